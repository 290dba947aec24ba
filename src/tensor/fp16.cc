// The fp16 -> fp32 lookup table behind Fp16ToFp32 (fp16.h), built at compile time so it is
// constant-initialized: no static-init order issue, no first-use guard in hot loops.
#include "tensor/fp16.h"

namespace shardlm::internal {
namespace {

constexpr std::array<float, 65536> MakeFp16Table() {
  std::array<float, 65536> table{};
  for (uint32_t h = 0; h < 65536; ++h) table[h] = Fp16ToFp32Compute(static_cast<fp16_t>(h));
  return table;
}

}  // namespace

constinit const std::array<float, 65536> kFp16ToFp32Table = MakeFp16Table();

}  // namespace shardlm::internal
