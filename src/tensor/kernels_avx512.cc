// AVX-512 kernels: overrides of the generic traits rows for the types this ISA accelerates.
// Compiled with the avx512 flags (CMakeLists.txt); only called when the CPU has avx512
// (Zen 4, Sapphire Rapids and later: f, bw, vl, dq, vnni, bf16, vbmi).
//
// Goals: the registration point; the kernels live per weight-type family in
// legacy_avx512.cc (32-element blocks), kquants_avx512.cc (256-element K-quants) and
// float_avx512.cc (F32, F16, BF16), and the Q8_0/Q8_1/Q8_K activation quantizers in
// act_avx512.cc (byte-identical to the generic ones), and the panel kernels (every type with
// panels, tensor/panels.h) in panels_kquants_avx512.cc and panels_blocks_avx512.cc, and the grid
// i-quants in grids_avx512.cc. Non-goals: bf16 activation conversion (generic).
#include "tensor/kernels_impl.h"

namespace shardlm::internal {

// Defined in the family files named above; each leaves types it does not know untouched.
void FillLegacyAvx512(TypeTraits& traits);
void FillKQuantsAvx512(TypeTraits& traits);
void FillFloatAvx512(TypeTraits& traits);
void FillActAvx512(TypeTraits& traits);
void FillKQuantPanelsAvx512(TypeTraits& traits);
void FillBlockPanelsAvx512(TypeTraits& traits);
void FillGridsAvx512(TypeTraits& traits);

void FillAvx512Kernels(TypeTraits& traits) {
  FillLegacyAvx512(traits);
  FillKQuantsAvx512(traits);
  FillFloatAvx512(traits);
  FillActAvx512(traits);
  FillKQuantPanelsAvx512(traits);
  FillBlockPanelsAvx512(traits);
  FillGridsAvx512(traits);
}

}  // namespace shardlm::internal
