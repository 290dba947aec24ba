// Internal to tensor/: how the per-ISA kernel files plug into the traits table.
//
// type_traits.cc builds one table per ISA: it starts from the generic (scalar) row and lets
// the ISA's file override the function pointers it accelerates. A type an ISA file does
// not touch keeps its generic kernels, so every type works on every CPU.
#pragma once

#include "tensor/type_traits.h"

namespace shardlm::internal {

void FillGenericKernels(TypeTraits& traits);  // kernels_generic.cc (and friends)
void FillAvx2Kernels(TypeTraits& traits);     // kernels_avx2.cc, compiled with -mavx2
void FillAvx512Kernels(TypeTraits& traits);   // kernels_avx512.cc, compiled with -mavx512*

// The ISA DetectIsa() settles on: `forced` (SHARDLM_ISA: "generic", "avx2", "avx512"; null
// or unknown = no preference) capped by the CPU's best (type_traits.cc).
Isa CapIsa(const char* forced, Isa best);

}  // namespace shardlm::internal
