// AppendLe: an integer as little-endian bytes, whatever the host's byte order — how the
// cache's hashes (block_hash.h, snapshot_layout.h) serialise what they hash, so a hash names
// the same bytes on every machine.
//
// Thread safety: a pure function. Lifetime: values only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace shardlm {

template <typename T>
void AppendLe(std::vector<uint8_t>& out, T v) {
  static_assert(std::is_integral_v<T>);
  const auto u = static_cast<std::make_unsigned_t<T>>(v);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}

}  // namespace shardlm
