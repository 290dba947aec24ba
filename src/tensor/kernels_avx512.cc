// AVX-512 kernels: overrides of the generic traits rows for the types this ISA accelerates.
// Compiled with the avx512 flags (CMakeLists.txt); only called when the CPU has avx512
// (Zen 4 / Ice Lake and later: f, bw, vl, dq, vnni, bf16).
//
// Goals: the registration point; the kernels live per weight-type family in
// legacy_avx512.cc (32-element blocks), kquants_avx512.cc (256-element K-quants) and
// float_avx512.cc (F32, F16, BF16). Non-goals: activation quantization (the generic
// quantize_act is kept: it is O(n) per token, while the dot products are O(n · rows)).
#include "tensor/kernels_impl.h"

namespace shardlm::internal {

// Defined in the family files named above; each leaves types it does not know untouched.
void FillLegacyAvx512(TypeTraits& traits);
void FillKQuantsAvx512(TypeTraits& traits);
void FillFloatAvx512(TypeTraits& traits);

void FillAvx512Kernels(TypeTraits& traits) {
  FillLegacyAvx512(traits);
  FillKQuantsAvx512(traits);
  FillFloatAvx512(traits);
}

}  // namespace shardlm::internal
