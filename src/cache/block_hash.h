// BlockHash: the content address of one full KV page, the key of the prefix cache.
//
//   h(0) = xxh3_128(Z       ‖ tokens of block 0 ‖ model fingerprint)
//   h(i) = xxh3_128(h(i-1)  ‖ tokens of block i ‖ model fingerprint)
// where Z is the all-zero hash (kRootBlockHash), a hash is fed as hi then lo (each 8 bytes,
// little-endian), a token as a little-endian int32 and the fingerprint as hi then lo (each
// 8 bytes, little-endian). So h(i) names the whole prefix [0, (i+1) × page_tokens) of one
// model, the same on every machine and in every version of shardlm (it keys files on disk).
//
// Goals: a value type usable as an unordered_map key; one function for one block and one
// for every full block of a token list. Non-goals: hashing a partial block (a page that is
// not full is never shared or persisted), cryptographic strength (a collision needs 2^64
// work; the caches trust the hash).
//
// Thread safety: pure functions and a value type. Lifetime: nothing is retained.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/fingerprint.h"

namespace shardlm {

struct BlockHash {
  uint64_t hi = 0;
  uint64_t lo = 0;

  std::string ToHex() const;  // 32 lowercase hex digits, hi first
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

// The `prev` of block 0, and the parent of a chain's first block.
inline constexpr BlockHash kRootBlockHash{};

// Parses exactly 32 hex digits (either case); nullopt otherwise. Inverse of ToHex.
std::optional<BlockHash> BlockHashFromHex(std::string_view hex);

// h(i) from h(i-1) (kRootBlockHash for block 0) and the tokens of block i.
BlockHash ChainBlockHash(const BlockHash& prev, std::span<const int32_t> block_tokens,
                         const Fingerprint128& model);

// The hashes of every full block of `tokens`: tokens.size() / page_tokens entries; a
// partial last block has none. page_tokens must be positive.
std::vector<BlockHash> ChainBlockHashes(std::span<const int32_t> tokens, int page_tokens,
                                        const Fingerprint128& model);

}  // namespace shardlm

template <>
struct std::hash<shardlm::BlockHash> {
  // The hash is already uniformly distributed: its low word is a good bucket index.
  size_t operator()(const shardlm::BlockHash& h) const noexcept {
    return static_cast<size_t>(h.lo);
  }
};
