// Internal helpers shared by the AVX2 kernel files and grid_kernel_inl.h (which the AVX-512 grid
// kernels include too): files compiled with at least the avx2/fma/f16c flags.
//
// Goals: one definition of the fixed horizontal reduction, so every AVX2 kernel reduces
// its lanes in the same order. Non-goals: anything ISA-independent (simd_tile.h).
#pragma once

#include "tensor/intrinsics.h"
#include "tensor/quant_blocks.h"

// Anonymous: each AVX2 file gets its own copy, so no other translation unit (compiled
// with other flags) can ever be linked against these bodies.
namespace shardlm::internal::avx2 {
namespace {

inline float Fp16ToF32(fp16_t h) { return _cvtsh_ss(h); }

// (l0 + l4) + (l2 + l6) + ((l1 + l5) + (l3 + l7)): the one lane order of every AVX2 dot.
inline float ReduceAdd(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline __m256i Load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

}  // namespace
}  // namespace shardlm::internal::avx2
