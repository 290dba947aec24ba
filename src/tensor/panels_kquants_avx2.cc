// AVX2 kernel over the panels of Q4_K (panels.h: 16 rows x 256 columns per panel block, 6-bit
// scales and mins per 32 columns), for CPUs without AVX-512. Registered by kernels_avx2.cc.
//
// Scheme (panel_kernel_avx2_inl.h: two 8-row halves): per group of 4 columns and token,
// vpmaddubsw multiplies the nibbles of 8 rows by the token's 4 activation bytes; a sub-block's
// eight groups are summed in int16 (8·2·15·127 < 2^15, exact) and one vpmaddwd by the rows'
// scales (each int32 lane holding its row's scale twice) widens and scales them at once. The
// mins go through the activations' bsums: one vpmaddwd of (min, min) against bsums 2j, 2j + 1
// per sub-block. The integers are the AVX-512 kernel's (S·scale, Σ min·bsums) and the float
// step per super-block is its AddSuperBlock, so the outputs are bitwise the AVX-512 panels'.
//
// Non-goals: Q2_K, Q3_K, Q5_K, Q6_K on AVX2 (for now: row kernels).
#include "tensor/panel_kernel_avx2_inl.h"

namespace shardlm::internal::panels {
namespace {

// Row scales of one sub-block, 8 rows of a half, each in both int16 of its int32 lane.
inline __m256i RowPairs(const uint8_t* row_bytes, int half) {
  const __m256i v =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row_bytes + 8 * half)));
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

struct Q4KPanelKernel : ByHalves<Q4KPanelKernel> {
  template <int NC>
  static void RunHalf(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                      int half, __m256 (&f)[NC]) {
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / kQK_K; ++b) {
      const auto* p = reinterpret_cast<const PanelQ4_K*>(panel) + b;
      if (half == 0) PrefetchAhead(p);
      const BlockQ8_K* a[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        a[c] = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
      }
      __m256i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        __m256i s[NC];
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) s[c] = _mm256_setzero_si256();
        SHARDLM_UNROLL for (int i = 0; i < 4; ++i) {
          const int pair = 4 * j + i;
          __m256i q[2];
          HalfNibbles(p->qs[pair], half, q);
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            const int8_t* qs = a[c]->qs + 8 * pair;
            s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(q[0], Bcast32(qs)));
            s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(q[1], Bcast32(qs + 4)));
          }
        }
        const __m256i scale = RowPairs(p->scales[j], half);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s[c], scale));
        }
      }
      // Mins: M = Σ_j min_j · (bsum_2j + bsum_2j+1).
      __m256i msum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) msum[c] = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i m = RowPairs(p->mins[j], half);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          msum[c] = _mm256_add_epi32(msum[c], _mm256_madd_epi16(m, Bcast32(a[c]->bsums + 2 * j)));
        }
      }
      const __m256 d = HalfFp16(p->d, half), dmin = HalfFp16(p->dmin, half);
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const __m256 ad = _mm256_set1_ps(a[c]->d);
        f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, ad), f[c]);
        f[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[c]), _mm256_mul_ps(dmin, ad), f[c]);
      }
    }
  }
};

}  // namespace
}  // namespace shardlm::internal::panels

namespace shardlm::internal {

void FillKQuantPanelsAvx2(TypeTraits& traits) {
  if (traits.type == GgmlType::kQ4_K) panels::Install<panels::Q4KPanelKernel>(traits);
}

}  // namespace shardlm::internal
