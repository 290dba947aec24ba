// Atomic file writes and bounded reads for the cache and slot folders.
//
// WriteFileAtomic(path, bytes): writes a temp file in the same folder (path's name +
// ".tmp.<pid>.<n>"), fsyncs it, renames it over `path` and fsyncs the folder, so a reader
// (or a restart after a crash) sees either no file or the whole file — never a torn one.
// On any failure the temp file is removed; ENOSPC and EDQUOT give kIoError "disk full".
// Files of 1 MiB and more are written with O_DIRECT where the filesystem allows it (KV page
// files: no copy into the page cache, which cost more CPU than the rest of the disk tier).
// AtomicFileWriter does the same for a file written piece by piece (a slot file streamed
// from the KV pool, gigabytes that are never in memory at once): positional writes into the
// temp file, then Commit.
// Every file, temp files included, is created 0600 by open(2) itself: a cached or saved
// sequence is a conversation's text, for the server's user alone, from its first byte.
//
// ReadOnlyFile: positional reads of a regular file (a slot file streamed back in chunks);
// a FIFO, device or folder is refused at open without blocking on it.
//
// Goals: crash-safe replacement of one file; errors that name the file and the errno.
// Non-goals: locking against other processes writing the same name (the last rename wins,
// and both wrote the same content: names are content hashes), directory creation
// (private_folder.h).
//
// Thread safety: WriteFileAtomic and the Read functions are thread-safe (no shared state
// but an atomic counter for temp names); an AtomicFileWriter or ReadOnlyFile belongs to one
// thread at a time. Lifetime: an AtomicFileWriter not committed removes its temp file when
// destroyed; a ReadOnlyFile closes its descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardlm {

// Temp files carry this in their name; a folder scan may delete leftovers from a crash.
inline constexpr std::string_view kTempFileMarker = ".tmp.";
// The mode every file written here is created with (the umask may only narrow it).
inline constexpr unsigned kPrivateFileMode = 0600;

Status WriteFileAtomic(const std::filesystem::path& path, std::span<const uint8_t> bytes);

// A file written in pieces at any offsets, then made visible at once. Buffered writes (a
// slot file is a rare, user-asked write; descriptors are patched after their payloads).
class AtomicFileWriter {
 public:
  // Creates the temp file beside `path` (O_EXCL, 0600). Errors: IoError naming it.
  static Result<AtomicFileWriter> Create(const std::filesystem::path& path);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();  // removes the temp file unless committed

  // Writes `bytes` at `offset` of the temp file (holes read as zeros).
  Status WriteAt(uint64_t offset, std::span<const uint8_t> bytes);
  // fsync, close, rename over the path, fsync the folder. On failure the temp file is gone.
  Status Commit();
  const std::filesystem::path& temp_path() const { return tmp_; }

 private:
  AtomicFileWriter(std::filesystem::path path, std::filesystem::path tmp, int fd);
  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;  // -1 once committed, failed or moved from
};

// A regular file opened for positional reads.
class ReadOnlyFile {
 public:
  // NotFound (missing), InvalidData (not a regular file: a FIFO would block a reader), or
  // IoError.
  static Result<ReadOnlyFile> Open(const std::filesystem::path& path);
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&&) = delete;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  uint64_t size() const { return size_; }  // at open
  // Fills `dst` from `offset`; InvalidData when the file ends first (it shrank), IoError.
  Status ReadAt(uint64_t offset, std::span<uint8_t> dst) const;

 private:
  ReadOnlyFile(std::filesystem::path path, int fd, uint64_t size);
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file, or NotFound (missing), IoError, or OutOfRange when larger than max_bytes.
Result<std::vector<uint8_t>> ReadWholeFile(const std::filesystem::path& path, uint64_t max_bytes);
// The first min(n, file size) bytes (a header), or NotFound / IoError.
Result<std::vector<uint8_t>> ReadFileHead(const std::filesystem::path& path, size_t n);

// kIoError "<what>: disk full (<strerror>)" for ENOSPC/EDQUOT, "<what>: <strerror>" else.
Status ErrnoStatus(int err, std::string_view what);
// Whether `status` is the disk-full error ErrnoStatus makes.
bool IsDiskFull(const Status& status);

}  // namespace shardlm
