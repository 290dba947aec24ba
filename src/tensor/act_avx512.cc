// AVX-512 activation quantizers: float rows → Q8_0, Q8_1 and Q8_K blocks, byte for byte
// what the generic quantize_act gives (kernels_generic_legacy.cc, kernels_generic_kquants.cc;
// tests/tensor/simd_test.cc checks it). Registered by kernels_avx512.cc for every weight
// type whose act_type is one of these.
//
// Goals: keep the O(n) conversion off the decode critical path (it runs once per matmul
// and token, single-threaded at batch 1).
// Exactness: max |x| is order-independent; scales are computed with the same scalar
// expressions as the generic code; x·id is one rounded product, then vcvtps2dq rounds half
// to even (the default MXCSR mode), as the generic magic-number add does for |v| <= 2^22;
// fp16 scales go through F16C (round to nearest even, what the generic Fp32ToFp16 mirrors).
// Non-goals: NaN inputs (the generic code assumes NaN-free activations too).

#include <cstring>

#include "tensor/act_blocks_inl.h"

namespace shardlm::internal {
namespace {

inline __m512 Abs(__m512 v) { return _mm512_abs_ps(v); }

// One 32-element block: qs and fp16(d) like the generic QuantizeActBlock; returns d (f32)
// and, through *sum, Σ qs.
inline float QuantizeBlock32(const float* x, int8_t* qs, fp16_t* d_half, int* sum) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(Abs(x0), Abs(x1)));
  const float d = amax / 127.f;
  *d_half = act::F32ToFp16(d);
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  const __m512 vid = _mm512_set1_ps(id);
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtepi32_epi8(q1));
  if (sum != nullptr) *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  return d;
}

// Q8_K: max = the first element of largest magnitude (with its sign), iscale = −127/max,
// q = min(127, round(iscale·x)), bsums per 16, d = 1/iscale.
void QuantizeActQ8_KAvx512(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    __m512 vmax = _mm512_setzero_ps();
    for (int j = 0; j < kQK_K; j += 16) vmax = _mm512_max_ps(vmax, Abs(_mm512_loadu_ps(x + j)));
    const float amax = _mm512_reduce_max_ps(vmax);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    float max = 0.0f;
    const __m512 vamax = _mm512_set1_ps(amax);
    for (int j = 0; j < kQK_K; j += 16) {
      const __mmask16 hit = _mm512_cmp_ps_mask(Abs(_mm512_loadu_ps(x + j)), vamax, _CMP_EQ_OQ);
      if (hit != 0) {
        max = x[j + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m512 vscale = _mm512_set1_ps(iscale);
    const __m512i limit = _mm512_set1_epi32(127);
    for (int g = 0; g < kQK_K / 16; ++g) {
      const __m512i q = _mm512_min_epi32(
          _mm512_cvtps_epi32(_mm512_mul_ps(vscale, _mm512_loadu_ps(x + 16 * g))), limit);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * g), _mm512_cvtepi32_epi8(q));
      y[i].bsums[g] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace

void FillActAvx512(TypeTraits& traits) {
  act::InstallActQuantizers<QuantizeBlock32, QuantizeActQ8_KAvx512>(traits);
}

}  // namespace shardlm::internal
