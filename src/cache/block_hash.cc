#include "cache/block_hash.h"

#include <xxhash.h>

#include <type_traits>

#include "base/check.h"
#include "cache/little_endian.h"

namespace shardlm {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string BlockHash::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[i] = kDigits[(hi >> (60 - 4 * i)) & 0xf];
    out[16 + i] = kDigits[(lo >> (60 - 4 * i)) & 0xf];
  }
  return out;
}

std::optional<BlockHash> BlockHashFromHex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  BlockHash h;
  for (size_t i = 0; i < 32; ++i) {
    const int d = HexDigit(hex[i]);
    if (d < 0) return std::nullopt;
    uint64_t& word = i < 16 ? h.hi : h.lo;
    word = (word << 4) | static_cast<uint64_t>(d);
  }
  return h;
}

BlockHash ChainBlockHash(const BlockHash& prev, std::span<const int32_t> block_tokens,
                         const Fingerprint128& model) {
  std::vector<uint8_t> bytes;
  bytes.reserve(32 + 4 * block_tokens.size());
  AppendLe(bytes, prev.hi);
  AppendLe(bytes, prev.lo);
  for (int32_t token : block_tokens) AppendLe(bytes, token);
  AppendLe(bytes, model.hi);
  AppendLe(bytes, model.lo);
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return BlockHash{h.high64, h.low64};
}

std::vector<BlockHash> ChainBlockHashes(std::span<const int32_t> tokens, int page_tokens,
                                        const Fingerprint128& model) {
  SHARDLM_CHECK_MSG(page_tokens > 0, "page_tokens = %d", page_tokens);
  const size_t block = static_cast<size_t>(page_tokens);
  std::vector<BlockHash> hashes;
  hashes.reserve(tokens.size() / block);
  BlockHash prev = kRootBlockHash;
  for (size_t begin = 0; begin + block <= tokens.size(); begin += block) {
    prev = ChainBlockHash(prev, tokens.subspan(begin, block), model);
    hashes.push_back(prev);
  }
  return hashes;
}

}  // namespace shardlm
