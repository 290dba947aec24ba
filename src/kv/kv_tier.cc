// KvTier: the RAM and file tiers of non-resident KV pages (see kv_tier.h).
#include "kv/kv_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/check.h"

namespace shardlm {

Result<KvTierSpec> ParseKvTierSpec(const std::string& text) {
  KvTierSpec spec;
  if (text == "ram") return spec;
  constexpr std::string_view kFile = "file:";
  if (text.starts_with(kFile) && text.size() > kFile.size()) {
    spec.kind = KvTierSpec::Kind::kFile;
    spec.dir = text.substr(kFile.size());
    return spec;
  }
  return InvalidArgument("--kv-tier '{}' is not 'ram' or 'file:DIR'", text);
}

std::string KvTierSpecName(const KvTierSpec& spec) {
  return spec.kind == KvTierSpec::Kind::kRam ? "ram" : "file:" + spec.dir;
}

namespace {

class RamTier final : public KvTier {
 public:
  RamTier(int n_pages, size_t page_bytes) : KvTier(n_pages, page_bytes), pages_(n_pages) {}

  Status Write(PageId page, const uint8_t* bytes) override {
    SHARDLM_CHECK(page >= 0 && page < n_pages_);
    std::unique_ptr<uint8_t[]>& stored = pages_[page];
    if (!stored) {
      stored.reset(new (std::nothrow) uint8_t[page_bytes_]);
      if (!stored) {
        return ResourceExhausted("the RAM KV tier cannot hold page {} ({} bytes): out of memory",
                                 page, page_bytes_);
      }
      ++pages_stored_;
    }
    std::memcpy(stored.get(), bytes, page_bytes_);
    return Status::Ok();
  }
  Status Read(PageId page, uint8_t* bytes) override {
    SHARDLM_CHECK(page >= 0 && page < n_pages_);
    if (!pages_[page]) return NotFound("the RAM KV tier does not hold page {}", page);
    std::memcpy(bytes, pages_[page].get(), page_bytes_);
    return Status::Ok();
  }
  void Drop(PageId page) override {
    SHARDLM_CHECK(page >= 0 && page < n_pages_);
    if (pages_[page]) --pages_stored_;
    pages_[page].reset();
  }
  bool Holds(PageId page) const override { return pages_[page] != nullptr; }
  std::string where() const override { return "ram"; }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> pages_;
};

class FileTier final : public KvTier {
 public:
  FileTier(int n_pages, size_t page_bytes, int fd, std::string path)
      : KvTier(n_pages, page_bytes),
        fd_(fd),
        path_(std::move(path)),
        held_(n_pages, 0),
        checksums_(n_pages, 0) {}
  ~FileTier() override {
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  Status Write(PageId page, const uint8_t* bytes) override {
    SHARDLM_CHECK(page >= 0 && page < n_pages_);
    size_t done = 0;
    while (done < page_bytes_) {
      const ssize_t n = ::pwrite(fd_, bytes + done, page_bytes_ - done, Offset(page) + off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        Drop(page);  // a half-written page must never be read back
        return Failure(err, "write", page);
      }
      done += size_t(n);
    }
    if (!held_[page]) ++pages_stored_;
    held_[page] = 1;
    checksums_[page] = XXH3_64bits(bytes, page_bytes_);
    return Status::Ok();
  }
  Status Read(PageId page, uint8_t* bytes) override {
    SHARDLM_CHECK(page >= 0 && page < n_pages_);
    if (!held_[page]) return NotFound("the KV tier file '{}' does not hold page {}", path_, page);
    size_t done = 0;
    while (done < page_bytes_) {
      const ssize_t n = ::pread(fd_, bytes + done, page_bytes_ - done, Offset(page) + off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        return IoError("the KV tier file '{}' ends inside page {} (truncated by someone?)", path_,
                       page);
      }
      if (n < 0) return Failure(errno, "read", page);
      done += size_t(n);
    }
    // The file is ours, but another process may truncate or write it: a hole past a
    // truncation reads as zeros, so only the checksum tells.
    if (XXH3_64bits(bytes, page_bytes_) != checksums_[page]) {
      return IoError(
          "the KV tier file '{}' no longer holds page {} as written (truncated or "
          "changed by someone?)",
          path_, page);
    }
    return Status::Ok();
  }
  void Drop(PageId page) override {
    SHARDLM_CHECK(page >= 0 && page < n_pages_);
    if (!held_[page]) return;
    held_[page] = 0;
    --pages_stored_;
    // Give the disk back; a file system without hole punching keeps the bytes (harmless).
    (void)::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, Offset(page),
                      off_t(page_bytes_));
  }
  bool Holds(PageId page) const override { return held_[page] != 0; }
  std::string where() const override { return path_; }

 private:
  off_t Offset(PageId page) const { return off_t(page) * off_t(page_bytes_); }
  Status Failure(int err, const char* what, PageId page) const {
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
      return ResourceExhausted("the KV tier file '{}' is full: cannot {} page {} ({})", path_, what,
                               page, std::strerror(err));
    }
    return IoError("the KV tier file '{}': cannot {} page {}: {}", path_, what, page,
                   std::strerror(err));
  }

  int fd_;
  std::string path_;
  std::vector<uint8_t> held_;        // [page] → 1 when the file holds the page
  std::vector<uint64_t> checksums_;  // [page] → xxh3-64 of the bytes written
};

}  // namespace

Result<std::unique_ptr<KvTier>> CreateKvTier(const KvTierSpec& spec, int n_pages, size_t page_bytes,
                                             const std::string& name) {
  if (n_pages <= 0 || page_bytes == 0) {
    return InvalidArgument("a KV tier needs pages (got {} of {} bytes)", n_pages, page_bytes);
  }
  if (spec.kind == KvTierSpec::Kind::kRam) {
    return std::unique_ptr<KvTier>(new RamTier(n_pages, page_bytes));
  }
  // A process may open several tiers (stages, tests): a counter keeps their names apart.
  static std::atomic<int> counter{0};
  const std::string path = spec.dir + "/kv-tier-" + std::to_string(::getpid()) + "-" +
                           std::to_string(counter.fetch_add(1)) + "-" + name + ".pages";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return IoError("--kv-tier file:{}: cannot create '{}': {}", spec.dir, path,
                   std::strerror(errno));
  }
  return std::unique_ptr<KvTier>(new FileTier(n_pages, page_bytes, fd, path));
}

}  // namespace shardlm
