// Whole files as bytes, for tests that corrupt, truncate or compare what the code wrote.
//
// Goals: one reader and one writer for every test binary.
// Non-goals: error reporting (a missing file reads as empty; the test's own checks fail).
//
// Thread safety: none beyond the file system's. Lifetime: nothing is kept.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace shardlm::testing_util {

inline std::vector<uint8_t> ReadBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Writes `bytes` as the whole of `path`, replacing what was there.
inline void WriteBytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace shardlm::testing_util
