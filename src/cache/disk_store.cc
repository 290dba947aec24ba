#include "cache/disk_store.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>

#include "base/thread_name.h"
#include "cache/atomic_file.h"
#include "cache/private_folder.h"

namespace shardlm {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kSnapshotSuffix = ".snap";
constexpr std::string_view kProbeName = "write-probe.tmp.open";  // a temp name: scan drops it

Status CheckFolder(const fs::path& dir) {
  if (dir.empty()) return InvalidArgument("--kv-cache-dir is empty");
  const Status checked = CheckPrivateFolder(dir, "kv cache folder");
  if (checked.code() == StatusCode::kNotFound) {
    return NotFound("{}: create it or give another --kv-cache-dir", checked.message());
  }
  return checked;
}

// Creates the layout subfolder (private) and proves it writable with a temp file.
Status PrepareSubfolder(const fs::path& folder) {
  const Status made =
      EnsurePrivateFolder(folder, "kv cache layout folder", ExistingFolderMode::kTighten);
  if (!made.ok()) return made;
  const fs::path probe = folder / kProbeName;
  Status written = WriteFileAtomic(probe, {});
  std::error_code ec;
  fs::remove(probe, ec);
  return written.ok() ? written : written.WithContext("kv cache folder is not writable");
}

// The header of the file that should hold `hash` under `layout`: InvalidData when it is
// not that (corrupt, or renamed), IoError when it could not be read.
Result<SnapshotHeader> ReadHeader(const fs::path& path, const Fingerprint128& layout,
                                  const BlockHash& hash) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<uint8_t> head, ReadFileHead(path, kSnapshotHeaderBytes));
  SHARDLM_ASSIGN_OR_RETURN(SnapshotHeader header, DecodeSnapshotHeader(head));
  if (header.layout != layout || header.block_hash != hash) {
    return InvalidData("the header names another layout or block");
  }
  return header;
}

}  // namespace

Result<std::unique_ptr<DiskStore>> DiskStore::Open(DiskStoreOptions options) {
  SHARDLM_TRY(CheckFolder(options.dir));
  if (options.budget_bytes == 0) return InvalidArgument("--kv-cache-budget is 0");
  if (options.max_queued_writes <= 0) {
    return InvalidArgument("max_queued_writes = {}", options.max_queued_writes);
  }
  fs::path folder = options.dir / options.layout.ToHex();
  SHARDLM_TRY(PrepareSubfolder(folder));
  std::unique_ptr<DiskStore> store(new DiskStore(std::move(options), std::move(folder)));
  SHARDLM_TRY(store->Scan());
  store->writer_ = std::thread(&DiskStore::WriterLoop, store.get());
  return store;
}

DiskStore::DiskStore(DiskStoreOptions options, fs::path folder)
    : options_(std::move(options)), folder_(std::move(folder)) {}

DiskStore::~DiskStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    paused_ = false;
  }
  work_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void DiskStore::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "kv-cache: %s\n", line.c_str());
  }
}

fs::path DiskStore::PathOf(const BlockHash& hash) const {
  return folder_ / (hash.ToHex() + std::string(kSnapshotSuffix));
}

Status DiskStore::Scan() {
  struct Found {
    BlockHash hash;
    FileEntry entry;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (fs::directory_iterator it(folder_, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path path = it->path();
    std::error_code file_ec;  // per-file errors skip the file, not the scan
    const std::string name = path.filename().string();
    if (name.find(kTempFileMarker) != std::string::npos) {
      fs::remove(path, file_ec);  // a write cut short by a crash
      continue;
    }
    const bool snap_name = name.size() == 32 + kSnapshotSuffix.size() &&
                           name.ends_with(kSnapshotSuffix) &&
                           BlockHashFromHex(std::string_view(name).substr(0, 32));
    if (!snap_name || !it->is_regular_file(file_ec)) {
      Log(fmt::format("ignoring '{}': not a cache file", path.string()));
      continue;
    }
    const BlockHash hash = *BlockHashFromHex(std::string_view(name).substr(0, 32));
    Result<SnapshotHeader> header = ReadHeader(path, options_.layout, hash);
    if (!header.ok()) {
      const bool ours = header.status().code() == StatusCode::kInvalidData;
      Log(fmt::format("{} '{}': {}", ours ? "deleted" : "skipped", path.string(),
                      header.status().message()));
      if (ours) {
        fs::remove(path, file_ec);
        ++stats_.corrupt_files;
      }
      continue;
    }
    const uint64_t size = it->file_size(file_ec);
    const fs::file_time_type mtime = it->last_write_time(file_ec);
    if (file_ec) continue;  // vanished meanwhile
    found.push_back({hash, FileEntry{.bytes = size, .parent = header->parent_hash}, mtime});
  }
  if (ec) return ErrnoStatus(ec.value(), "scan kv cache folder " + folder_.string());
  // Oldest first, so ticks follow the files' last use across restarts.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(mu_);
  for (Found& f : found) {
    f.entry.last_use = ++tick_;
    AddEntryLocked(f.hash, f.entry);
  }
  MakeRoomLocked(0, {});
  return Status::Ok();
}

void DiskStore::AddEntryLocked(const BlockHash& hash, FileEntry entry) {
  entry.generation = ++generations_;
  ++children_[entry.parent];
  stats_.bytes_on_disk += static_cast<int64_t>(entry.bytes);
  ++stats_.files;
  files_[hash] = entry;
}

void DiskStore::RemoveEntryLocked(const BlockHash& hash) {
  auto it = files_.find(hash);
  if (it == files_.end()) return;
  auto parent = children_.find(it->second.parent);
  if (--parent->second == 0) children_.erase(parent);
  stats_.bytes_on_disk -= static_cast<int64_t>(it->second.bytes);
  --stats_.files;
  files_.erase(it);
}

uint64_t DiskStore::ValueLocked(const FileEntry& entry) const {
  return entry.last_use + kTicksPerHit * std::min(entry.hits, kMaxHitCredit);
}

void DiskStore::MakeRoomLocked(uint64_t incoming, std::span<const BlockHash> keep) {
  while (static_cast<uint64_t>(stats_.bytes_on_disk) + incoming > options_.budget_bytes) {
    const BlockHash* victim = nullptr;
    uint64_t victim_value = std::numeric_limits<uint64_t>::max();
    for (const auto& [hash, entry] : files_) {  // O(files): eviction is rare next to a write
      if (children_.contains(hash) || std::find(keep.begin(), keep.end(), hash) != keep.end()) {
        continue;
      }
      if (ValueLocked(entry) < victim_value) {
        victim = &hash;
        victim_value = ValueLocked(entry);
      }
    }
    if (victim == nullptr) return;
    const BlockHash hash = *victim;
    std::error_code ec;
    fs::remove(PathOf(hash), ec);
    RemoveEntryLocked(hash);
    ++stats_.evictions;
  }
}

bool DiskStore::Put(const BlockHash& hash, std::vector<uint8_t> snapshot) {
  Result<SnapshotHeader> header = DecodeSnapshotHeader(snapshot);
  if (!header.ok() || header->layout != options_.layout || header->block_hash != hash) {
    Log(fmt::format("refused to store block {}: not its snapshot under this layout{}", hash.ToHex(),
                    header.ok() ? "" : ": " + header.status().message()));
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.dropped_writes;
    return false;
  }
  const uint64_t size = snapshot.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_.contains(hash) || !NeedsWriteLocked(hash)) return true;
  const bool fits = size <= options_.budget_bytes &&
                    static_cast<int>(queue_.size()) < options_.max_queued_writes &&
                    queued_bytes_ + size <= options_.max_queued_bytes;
  if (!fits || std::chrono::steady_clock::now() < write_backoff_until_) {
    ++stats_.dropped_writes;
    return false;
  }
  queue_.push_back({hash, header->parent_hash, std::move(snapshot)});
  queued_.insert(hash);
  queued_bytes_ += size;
  work_cv_.notify_one();
  return true;
}

bool DiskStore::NeedsWrite(const BlockHash& hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  return NeedsWriteLocked(hash);
}

bool DiskStore::NeedsWriteLocked(const BlockHash& hash) const {
  auto it = files_.find(hash);
  return it == files_.end() || !it->second.validated;
}

void DiskStore::WriterLoop() {
  SetThreadName("kv-disk-write");
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || (!paused_ && !queue_.empty()); });
    if (queue_.empty()) break;  // stopping, and everything queued is written
    PendingWrite write = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= write.bytes.size();
    ++in_flight_;
    lock.unlock();
    Write(write);
    lock.lock();
    queued_.erase(write.hash);
    --in_flight_;
    if (queue_.empty()) idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void DiskStore::Write(PendingWrite& write) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::chrono::steady_clock::now() < write_backoff_until_) {
      ++stats_.dropped_writes;  // queued before a write failed: not worth an attempt
      return;
    }
    // A file it replaces credits its size; neither it nor the parent (the chain's head) is
    // evicted to make room.
    auto old = files_.find(write.hash);
    const uint64_t credit = old == files_.end() ? 0 : old->second.bytes;
    const BlockHash keep[] = {write.parent, write.hash};
    MakeRoomLocked(write.bytes.size() > credit ? write.bytes.size() - credit : 0, keep);
  }
  const Status written = WriteFileAtomic(PathOf(write.hash), write.bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (written.ok()) {
    RemoveEntryLocked(write.hash);  // the file it replaced, if any
    AddEntryLocked(write.hash, FileEntry{.bytes = write.bytes.size(),
                                         .parent = write.parent,
                                         .last_use = ++tick_,
                                         .validated = true});
    stats_.bytes_written += static_cast<int64_t>(write.bytes.size());
    ++stats_.files_written;
    return;
  }
  ++stats_.write_errors;
  write_backoff_until_ = std::chrono::steady_clock::now() + options_.write_failure_backoff;
  Log(fmt::format("{}: skipping writes for {:.1f} s, serving reads", written.message(),
                  std::chrono::duration<double>(options_.write_failure_backoff).count()));
}

Result<LoadedSnapshot> DiskStore::Get(const BlockHash& hash) {
  const fs::path path = PathOf(hash);
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(hash);
    if (it == files_.end()) {
      ++stats_.misses;
      return NotFound("block {} is not on disk", hash.ToHex());
    }
    generation = it->second.generation;
  }
  Result<std::vector<uint8_t>> bytes = ReadWholeFile(path, options_.max_file_bytes);
  Status failed = bytes.status();
  std::optional<Snapshot> snapshot;
  if (bytes.ok()) {
    Result<Snapshot> decoded = DecodeSnapshot(*bytes, options_.layout, hash);
    if (decoded.ok()) {
      snapshot = std::move(decoded).value();
    } else {
      failed = decoded.status();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed.ok()) return GetFailedLocked(hash, path, failed, generation);
  auto it = files_.find(hash);
  if (it != files_.end()) {
    it->second.last_use = ++tick_;
    ++it->second.hits;
    if (it->second.generation == generation) it->second.validated = true;
  }
  ++stats_.hits;
  stats_.bytes_read += static_cast<int64_t>(bytes->size());
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // recency for a restart
  LoadedSnapshot loaded;
  loaded.bytes = std::move(bytes).value();  // the buffer moves: the views stay valid
  loaded.snapshot = std::move(*snapshot);
  loaded.generation = generation;
  return loaded;
}

Status DiskStore::GetFailedLocked(const BlockHash& hash, const fs::path& path, Status failed,
                                  uint64_t generation) {
  ++stats_.misses;
  auto it = files_.find(hash);
  const bool same_file = it != files_.end() && it->second.generation == generation;
  if (failed.code() == StatusCode::kIoError) {  // the bytes may be fine: keep, but rewrite
    if (same_file) it->second.validated = false;
    return failed.WithContext(path.string());
  }
  if (failed.code() != StatusCode::kNotFound) {  // invalid: never serve it again
    failed = InvalidData("{}", failed.message());
    if (!same_file) return failed.WithContext(path.string());  // replaced while read
    ++stats_.corrupt_files;
    Log(fmt::format("discarded '{}': {}", path.string(), failed.message()));
    std::error_code ec;
    fs::remove(path, ec);
  }
  if (same_file) RemoveEntryLocked(hash);
  return failed.WithContext(path.string());
}

void DiskStore::Discard(const BlockHash& hash, const std::string& why, uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(hash);
  if (it == files_.end()) return;
  if (generation != kAnyGeneration && it->second.generation != generation) return;
  const fs::path path = PathOf(hash);
  ++stats_.corrupt_files;
  Log(fmt::format("discarded '{}': {}", path.string(), why));
  std::error_code ec;
  fs::remove(path, ec);
  RemoveEntryLocked(hash);
}

bool DiskStore::Contains(const BlockHash& hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.contains(hash);
}

void DiskStore::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && in_flight_ == 0; });
}

DiskStoreStats DiskStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DiskStore::PauseWriterForTest(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
  }
  work_cv_.notify_all();
}

}  // namespace shardlm
