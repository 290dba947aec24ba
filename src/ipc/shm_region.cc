// ShmRegion (shm_region.h): a sealed memfd mapped MAP_SHARED.
#include "ipc/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "ipc/message_channel.h"

namespace shardlm {
namespace {

// memfd_create refuses names over 249 bytes (NAME_MAX minus its "memfd:" prefix).
constexpr size_t kMaxMemfdName = 249;
// Seals the creator sets and the mapper requires: the size can no longer change, so a
// peer that checked it cannot be made to fault (SIGBUS) by a later truncate.
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

Result<uint8_t*> MapShared(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return IoError("cannot map a shared region of {} bytes: {}", bytes, std::strerror(errno));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

Result<std::unique_ptr<ShmRegion>> ShmRegion::Create(const std::string& name, size_t bytes) {
  if (bytes == 0) return InvalidArgument("shared region '{}' of 0 bytes", name);
  if (bytes > static_cast<size_t>(std::numeric_limits<off_t>::max())) {
    return InvalidArgument("shared region '{}' of {} bytes is too large", name, bytes);
  }
  UniqueFd fd(
      ::memfd_create(name.substr(0, kMaxMemfdName).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return IoError("memfd_create '{}': {}", name, std::strerror(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return IoError("cannot size shared region '{}' to {} bytes: {}", name, bytes,
                   std::strerror(errno));
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, kSizeSeals) != 0) {
    return IoError("cannot seal shared region '{}': {}", name, std::strerror(errno));
  }
  SHARDLM_ASSIGN_OR_RETURN(uint8_t * data, MapShared(fd.get(), bytes));
  return std::unique_ptr<ShmRegion>(new ShmRegion(fd.release(), data, bytes));
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::Map(int raw_fd, size_t bytes) {
  UniqueFd fd(raw_fd);
  if (!fd.valid()) return InvalidArgument("no shared-region descriptor was received");
  if (bytes == 0) return InvalidArgument("shared region of 0 bytes");
  int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return InvalidData(
        "the shared region is not sealed against shrinking (not made by "
        "ShmRegion::Create?)");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return IoError("cannot stat the shared region: {}", std::strerror(errno));
  }
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    return InvalidData("shared region is {} bytes, smaller than the {} bytes announced",
                       static_cast<int64_t>(st.st_size), bytes);
  }
  SHARDLM_ASSIGN_OR_RETURN(uint8_t * data, MapShared(fd.get(), bytes));
  return std::unique_ptr<ShmRegion>(new ShmRegion(fd.release(), data, bytes));
}

ShmRegion::~ShmRegion() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

Result<std::span<uint8_t>> ShmRegion::Span(size_t offset, size_t bytes) {
  if (offset > size_ || bytes > size_ - offset) {
    return InvalidArgument("range [{}, +{}) is outside the {}-byte shared region", offset, bytes,
                           size_);
  }
  return std::span<uint8_t>(data_ + offset, bytes);
}

}  // namespace shardlm
