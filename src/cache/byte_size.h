// ParseByteSize: a size flag such as `--kv-cache-budget 8GiB`.
//
// Accepted: decimal digits, optional spaces, an optional unit (case-insensitive):
//   B; KiB MiB GiB TiB and K M G T (powers of 1024); KB MB GB TB (powers of 1000).
// "8GiB" = 8 × 2^30, "512MiB" = 512 × 2^20, "100000" = 100000 bytes.
// Goals: an InvalidArgument that quotes the text and shows an example. Non-goals:
// fractions ("1.5G"), negative sizes.
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace shardlm {

Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace shardlm
