// ExpNonPositive (fast_exp.h) on 8 lanes (AVX2 files) and 16 lanes (AVX-512 files), the
// same operations in the same order as the scalar form. Include only from *_avx2.cc /
// *_avx512.cc files: what it declares depends on the ISA the file is compiled for.
#pragma once

#include "model/fast_exp.h"
#include "tensor/intrinsics.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {

#if defined(__AVX2__) && defined(__FMA__)
// ExpNonPositive (fast_exp.h) on 8 lanes, the same operations in the same order.
inline __m256 ExpNonPositive8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(kExpLowest));
  const __m256 round = _mm256_set1_ps(kExpRound);
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(kExpLog2e), round);
  const __m256 k = _mm256_sub_ps(t, round);
  const __m256i ki = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(round));
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kExpLn2Hi), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kExpLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  SHARDLM_UNROLL for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  const __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(ki, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
}
#endif

#if defined(__AVX512F__)
// ExpNonPositive (fast_exp.h) on 16 lanes, the same operations in the same order.
inline __m512 ExpNonPositive16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(kExpLowest));
  const __m512 round = _mm512_set1_ps(kExpRound);
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(kExpLog2e), round);
  const __m512 k = _mm512_sub_ps(t, round);
  const __m512i ki = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(round));
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kExpLn2Hi), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kExpLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  SHARDLM_UNROLL for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  const __m512i pow2 = _mm512_slli_epi32(_mm512_add_epi32(ki, _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(pow2));
}
#endif

}  // namespace shardlm::internal
