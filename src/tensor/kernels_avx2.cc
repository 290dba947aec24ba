// AVX2 kernels: overrides of the generic traits rows for the types this ISA accelerates.
// Compiled with the avx2 flags (CMakeLists.txt); only called when the CPU has avx2 + fma +
// f16c + bmi2 (Haswell / Zen 1 and later). On an AVX-512 CPU the AVX-512 file overrides
// these again (type_traits.cc applies both in order).
//
// Goals: the registration point; the kernels live per weight-type family in
// legacy_avx2.cc (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL), kquants_avx2.cc (Q2_K..Q6_K),
// iquants_avx2.cc (IQ4_XS), grids_avx2.cc (IQ1-IQ3, TQ1_0, TQ2_0), float_avx2.cc (F32, F16) and
// panels_blocks_avx2.cc, panels_kquants_avx2.cc (weight panels of Q8_0, Q4_0, IQ4_NL, MXFP4 and
// the 256-column types), and the activation quantizers to Q8_0, Q8_1 and Q8_K in act_avx2.cc
// (byte-identical to the generic ones).
// Non-goals: BF16 (generic kernels on AVX2-only CPUs).
#include "tensor/kernels_impl.h"

namespace shardlm::internal {

// Defined in the family files named above; each leaves types it does not know untouched.
void FillLegacyAvx2(TypeTraits& traits);
void FillKQuantsAvx2(TypeTraits& traits);
void FillFloatAvx2(TypeTraits& traits);
void FillIQuantsAvx2(TypeTraits& traits);
void FillGridsAvx2(TypeTraits& traits);
void FillBlockPanelsAvx2(TypeTraits& traits);
void FillKQuantPanelsAvx2(TypeTraits& traits);
void FillActAvx2(TypeTraits& traits);

void FillAvx2Kernels(TypeTraits& traits) {
  FillLegacyAvx2(traits);
  FillKQuantsAvx2(traits);
  FillFloatAvx2(traits);
  FillIQuantsAvx2(traits);
  FillGridsAvx2(traits);
  FillBlockPanelsAvx2(traits);
  FillKQuantPanelsAvx2(traits);
  FillActAvx2(traits);
}

}  // namespace shardlm::internal
