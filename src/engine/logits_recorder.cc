// LogitsRecorder implementation: raw float32 rows, byte-swapped on big-endian hosts.
#include "engine/logits_recorder.h"

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace shardlm {

Result<std::unique_ptr<LogitsRecorder>> LogitsRecorder::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return IoError("cannot create {}: {}", path, std::strerror(errno));
  return std::unique_ptr<LogitsRecorder>(new LogitsRecorder(path, file));
}

LogitsRecorder::~LogitsRecorder() {
  if (file_) std::fclose(file_);
}

Status LogitsRecorder::Append(std::span<const float> row) {
  if (!file_) return IoError("{}: write after close", path_);
  size_t written = 0;
  if constexpr (std::endian::native == std::endian::little) {
    written = std::fwrite(row.data(), sizeof(float), row.size(), file_);
  } else {
    std::vector<uint32_t> swapped(row.size());
    std::memcpy(swapped.data(), row.data(), row.size_bytes());
    for (uint32_t& word : swapped) word = __builtin_bswap32(word);
    written = std::fwrite(swapped.data(), sizeof(uint32_t), swapped.size(), file_);
  }
  if (written != row.size()) return IoError("{}: write failed: {}", path_, std::strerror(errno));
  ++rows_;
  return Status::Ok();
}

Status LogitsRecorder::Close() {
  if (!file_) return Status::Ok();
  const bool ok = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok) return IoError("{}: close failed: {}", path_, std::strerror(errno));
  return Status::Ok();
}

}  // namespace shardlm
