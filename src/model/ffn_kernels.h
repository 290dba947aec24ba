// Elementwise kernels of the feed-forward block: SwiGLU, out = silu(gate) · up, with one
// arithmetic order shared by every ISA (generic, AVX2 and AVX-512 give the same bits).
//
// Order per element: e = ExpNonPositive(−|g|) (fast_exp.h; 0 where −|g| is below its clamp),
// silu(g) = g · (g >= 0 ? 1 : e)
// / (1 + e) (the logistic function written so that exp never sees a positive argument),
// then times up. Within a few ulp of g / (1 + expf(−g)) · up (tests bound it).
// Goals: SwiGLU off the profile (it ran scalar expf per element: 4-6% of a batched decode
// step). Non-goals: other activations (GELU comes with the architectures that use it).
//
// Thread safety: the table is immutable after first use.
#pragma once

#include <cmath>
#include <cstdint>

#include "model/fast_exp.h"
#include "tensor/type_traits.h"

namespace shardlm {

struct FfnKernels {
  // out[i] = silu(gate[i]) · up[i] for i < n (out may be gate).
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out) = nullptr;
};

// Kernels for DetectIsa().
const FfnKernels& GetFfnKernels();
// Kernels for one ISA (tests), or nullptr when this CPU lacks it.
const FfnKernels* GetFfnKernelsFor(Isa isa);

namespace internal {
// One element of SwiGLU in the shared order (the generic kernel and the SIMD tails).
inline float SwiGluOne(float g, float up) {
  const float a = std::fabs(g);
  const float e = a > -kExpLowest ? 0.0f : ExpNonPositive(-a);  // below the clamp: 0
  return ((g * (g >= 0.0f ? 1.0f : e)) / (1.0f + e)) * up;
}

void FillFfnAvx2(FfnKernels& k);    // ffn_kernels_avx2.cc
void FillFfnAvx512(FfnKernels& k);  // ffn_kernels_avx512.cc
}  // namespace internal

}  // namespace shardlm
