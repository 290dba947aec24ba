// Atomic file writes and bounded reads for the cache folder.
//
// WriteFileAtomic(path, bytes): writes a temp file in the same folder (path's name +
// ".tmp.<pid>.<n>"), fsyncs it, renames it over `path` and fsyncs the folder, so a reader
// (or a restart after a crash) sees either no file or the whole file — never a torn one.
// On any failure the temp file is removed; ENOSPC and EDQUOT give kIoError "disk full".
// Files of 1 MiB and more are written with O_DIRECT where the filesystem allows it (KV page
// files: no copy into the page cache, which cost more CPU than the rest of the disk tier).
//
// Goals: crash-safe replacement of one file; errors that name the file and the errno.
// Non-goals: locking against other processes writing the same name (the last rename wins,
// and both wrote the same content: names are content hashes), directory creation.
//
// Thread safety: thread-safe (no shared state but an atomic counter for temp names).
// Lifetime: nothing is retained.
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

Status WriteFileAtomic(const std::filesystem::path& path, std::span<const uint8_t> bytes);

// The whole file, or NotFound (missing), IoError, or OutOfRange when larger than max_bytes.
Result<std::vector<uint8_t>> ReadWholeFile(const std::filesystem::path& path, uint64_t max_bytes);
// The first min(n, file size) bytes (a header), or NotFound / IoError.
Result<std::vector<uint8_t>> ReadFileHead(const std::filesystem::path& path, size_t n);

// kIoError "<what>: disk full (<strerror>)" for ENOSPC/EDQUOT, "<what>: <strerror>" else.
Status ErrnoStatus(int err, std::string_view what);
// Whether `status` is the disk-full error ErrnoStatus makes.
bool IsDiskFull(const Status& status);

}  // namespace shardlm
