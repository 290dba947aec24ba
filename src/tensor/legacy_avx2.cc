// AVX2 kernel for Q8_0 weights against Q8_0 activations. Registered by kernels_avx2.cc.
//
// Goals: the common 8-bit type at memory speed on AVX2-only CPUs, with a small tile for
// prefill; the same per-pair op sequence in every tile (simd_tile.h).
// Non-goals: the other legacy types on AVX2 (generic kernels), repacked layouts.
//
// Integer scheme: vpmaddubsw needs one unsigned operand, so the weights' magnitudes |w|
// (hoisted per row) multiply the activations carrying the weights' signs (vpsignb per
// pair); |pair sum| <= 2·128·127 fits int16; vpmaddwd by ones widens to exact int32 lanes.
#include "tensor/simd_avx2_inl.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

using avx2::Fp16ToF32;
using avx2::Load32;
using avx2::ReduceAdd;

struct Q8_0Kernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i wq[NR], wabs[NR];
      float wd[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(w + r * w_stride) + b;
        wq[r] = Load32(blk->qs);
        wabs[r] = _mm256_abs_epi8(wq[r]);
        wd[r] = Fp16ToF32(blk->d);
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* ablk = reinterpret_cast<const BlockQ8_0*>(act + c * act_stride) + b;
        const __m256i aq = Load32(ablk->qs);
        const float ad = Fp16ToF32(ablk->d);
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const __m256i pairs = _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(aq, wq[r]));
          const __m256i dot = _mm256_madd_epi16(pairs, ones);
          acc[r][c] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(wd[r] * ad), acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = ReduceAdd(acc[r][c]);
  }
};

}  // namespace

// Tile 2 rows x 4 tokens: 8 accumulators + 2 registers per row + 1 per token + temporaries
// fit the 16 ymm registers.
void FillLegacyAvx2(TypeTraits& traits) {
  if (traits.type == GgmlType::kQ8_0) simd::Install<Q8_0Kernel, 2, 4>(traits);
}

}  // namespace shardlm::internal
