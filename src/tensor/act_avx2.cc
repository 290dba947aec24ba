// AVX2 activation quantizers: float rows → Q8_0, Q8_1 and Q8_K blocks, byte for byte what the
// generic quantize_act gives (kernels_generic_legacy.cc, kernels_generic_kquants.cc;
// tests/tensor/simd_test.cc checks it). Registered by kernels_avx2.cc for every weight type
// whose act_type is one of these; on an AVX-512 CPU act_avx512.cc overrides them.
//
// Goals: the conversion every matmul runs on its input rows, off the profile. With the generic
// scalar code it took 4.8% of a Qwen3-0.6B Q4_K_M prefill on a Zen 3 (Q8_K's first-largest
// search is a branch per element), and at batch 1 it runs on one thread while the other waits.
// Exactness: as the AVX-512 quantizers: max |x| is order-independent, the scales are the
// generic scalar expressions, x·id is one rounded product and vcvtps2dq rounds half to even
// (the default MXCSR mode) as the generic magic-number add does for |v| <= 2^22, fp16 scales
// through F16C (round to nearest even, what the generic Fp32ToFp16 mirrors).
// Non-goals: NaN inputs (the generic code assumes NaN-free activations too).
#include <cstring>

#include "tensor/act_blocks_inl.h"

namespace shardlm::internal {
namespace {

inline __m256 Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float ReduceMax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline int ReduceAdd(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 1));
  return _mm_cvtsi128_si32(x);
}

// Four vectors of int32 in [−128, 127], elements 0..31 in order, as 32 bytes at qs. The two
// saturating packs interleave them by 128-bit lane and 4-element dword; one permute restores
// the order.
inline void StoreBytes(const __m256i (&q)[4], int8_t* qs) {
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(qs),
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// One 32-element block: qs and fp16(d) like the generic QuantizeActBlock; returns d (f32) and,
// through *sum, Σ qs.
inline float QuantizeBlock32(const float* x, int8_t* qs, fp16_t* d_half, int* sum) {
  __m256 v[4];
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
  const float amax = ReduceMax(
      _mm256_max_ps(_mm256_max_ps(Abs(v[0]), Abs(v[1])), _mm256_max_ps(Abs(v[2]), Abs(v[3]))));
  const float d = amax / 127.f;
  *d_half = act::F32ToFp16(d);
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
  StoreBytes(q, qs);
  if (sum != nullptr) {
    *sum = ReduceAdd(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  }
  return d;
}

// Q8_K: max = the first element of largest magnitude (with its sign), iscale = −127/max,
// q = min(127, round(iscale·x)), bsums per 16, d = 1/iscale.
void QuantizeActQ8_KAvx2(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    __m256 vmax = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8) vmax = _mm256_max_ps(vmax, Abs(_mm256_loadu_ps(x + j)));
    const float amax = ReduceMax(vmax);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    float max = 0.0f;
    const __m256 vamax = _mm256_set1_ps(amax);
    for (int j = 0; j < kQK_K; j += 8) {
      const int hit =
          _mm256_movemask_ps(_mm256_cmp_ps(Abs(_mm256_loadu_ps(x + j)), vamax, _CMP_EQ_OQ));
      if (hit != 0) {
        max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 vscale = _mm256_set1_ps(iscale);
    const __m256i limit = _mm256_set1_epi32(127);
    for (int b = 0; b < kQK_K / 32; ++b) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        q[k] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(x + 32 * b + 8 * k))), limit);
      }
      StoreBytes(q, y[i].qs + 32 * b);
      y[i].bsums[2 * b] = static_cast<int16_t>(ReduceAdd(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[2 * b + 1] = static_cast<int16_t>(ReduceAdd(_mm256_add_epi32(q[2], q[3])));
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace

void FillActAvx2(TypeTraits& traits) {
  act::InstallActQuantizers<QuantizeBlock32, QuantizeActQ8_KAvx2>(traits);
}

}  // namespace shardlm::internal
