// ModelFingerprint implementation (see fingerprint.h for what is hashed and why).
#include "gguf/fingerprint.h"

#include <xxhash.h>

#include <algorithm>

#include "base/check.h"

namespace shardlm {

namespace {

// Bytes hashed at each end of a tensor: one page, so at most two page reads per tensor.
constexpr uint64_t kEdgeBytes = 4096;

void UpdateU64(XXH3_state_t* state, uint64_t v) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(v >> (8 * i));
  XXH3_128bits_update(state, le, sizeof(le));
}

}  // namespace

std::string Fingerprint128::ToHex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

Fingerprint128 ModelFingerprint(const GgufFile& file) {
  XXH3_state_t* state = XXH3_createState();
  SHARDLM_CHECK(state != nullptr);
  XXH3_128bits_reset(state);
  std::span<const uint8_t> header = file.header_bytes();
  XXH3_128bits_update(state, header.data(), header.size());
  UpdateU64(state, file.file_size());
  for (const GgufTensorInfo& t : file.tensors()) {
    uint64_t edge = std::min(kEdgeBytes, t.n_bytes);
    UpdateU64(state, XXH3_64bits(t.data, edge));
    UpdateU64(state, XXH3_64bits(t.data + (t.n_bytes - edge), edge));
  }
  XXH128_hash_t hash = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return {hash.high64, hash.low64};
}

}  // namespace shardlm
