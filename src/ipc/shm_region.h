// ShmRegion: a shared-memory region mapped by two processes on one host — the path
// activation rows and KV pages take between a server and a shard daemon, so hidden states
// never travel through the socket.
//
// The creator makes an anonymous memfd (memfd_create), sizes it, seals it against
// shrinking and growing, and maps it; its fd is sent over the MessageChannel; the peer maps
// the received fd after checking the seal and (fstat) that the file is at least as large
// as the size it was told.
//
// Goals: bounds-checked views (Span) so a peer's offsets cannot reach outside the mapping.
// Non-goals: synchronisation (the protocol's request/reply order is the only lock).
//
// Thread safety: the mapping is shared memory; callers order access by protocol.
// Lifetime: unmapped and its fd closed in the destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace shardlm {

class ShmRegion {
 public:
  // A new region of `bytes` (> 0), zero-filled. `name` shows in /proc/PID/fd.
  static Result<std::unique_ptr<ShmRegion>> Create(const std::string& name, size_t bytes);
  // Maps a region received from a peer (takes ownership of fd, closed on error too).
  // Errors: the file is not sealed against shrinking (so its size could not be trusted),
  // it is smaller than `bytes`, mmap failure.
  static Result<std::unique_ptr<ShmRegion>> Map(int fd, size_t bytes);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }
  uint8_t* data() { return data_; }
  // [offset, offset + bytes) of the region, or an InvalidArgument when it does not fit.
  Result<std::span<uint8_t>> Span(size_t offset, size_t bytes);

 private:
  ShmRegion(int fd, uint8_t* data, size_t size) : fd_(fd), data_(data), size_(size) {}
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace shardlm
