// AVX2 kernels for IQ4_XS against Q8_K activations (IQ4_NL's are with the legacy types, whose
// 32-element blocks it shares). Registered by kernels_avx2.cc; AVX-512 CPUs use them too.
//
// Per super-block and pair: each sub-block's levels come from a table shuffle of its nibbles;
// vpmaddubsw takes their magnitudes and the activations carrying their signs (|pair sum| <=
// 2·127·127 fits int16), vpmaddwd by the sub-block's scale (ls − 32) widens to exact int32
// lanes summed over the super-block, and one fused multiply-add by d_w·d_a per super-block
// adds them to the float lanes: the generic kernel's order (kernels_generic_iquants.cc).
// Non-goals: repacked layouts (the next step for speed).
#include "tensor/simd_avx2_inl.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

using avx2::Fp16ToF32;
using avx2::Load32;
using avx2::ReduceAdd;

// The 6-bit scale ls (0..63) of sub-block ib (the generic file's own copy: an inline function
// shared with generic code could be linked in its AVX2 build).
int Iq4XsScale(uint16_t scales_h, const uint8_t* scales_l, int ib) {
  return ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
}

// The 32 levels of one sub-block (16 bytes of nibbles) in element order, as signed bytes.
inline __m256i SubBlockLevels(const uint8_t* qs, __m256i levels) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i nibbles =
      _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
  return _mm256_shuffle_epi8(levels, nibbles);
}

struct Iq4XsKernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK_K;
    const __m256i levels = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const BlockIq4Xs* blk[NR];
      __m256i isum[NR][NC];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        blk[r] = reinterpret_cast<const BlockIq4Xs*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk[r], w_stride, sizeof(BlockIq4Xs));
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[r][c] = _mm256_setzero_si256();
      }
      for (int ib = 0; ib < kQK_K / kQK; ++ib) {
        __m256i q[NR], qabs[NR], scale[NR];
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          q[r] = SubBlockLevels(blk[r]->qs + ib * kQK / 2, levels);
          qabs[r] = _mm256_abs_epi8(q[r]);
          scale[r] = _mm256_set1_epi16(
              static_cast<int16_t>(Iq4XsScale(blk[r]->scales_h, blk[r]->scales_l, ib) - 32));
        }
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
          const __m256i a = Load32(ablk->qs + ib * kQK);
          SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
            const __m256i pairs = _mm256_maddubs_epi16(qabs[r], _mm256_sign_epi8(a, q[r]));
            isum[r][c] = _mm256_add_epi32(isum[r][c], _mm256_madd_epi16(pairs, scale[r]));
          }
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][c]),
                                      _mm256_set1_ps(ablk->d * Fp16ToF32(blk[r]->d)), acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = ReduceAdd(acc[r][c]);
  }
};

}  // namespace

// Tile 2 rows x 2 tokens, as the K-quants'; decode takes a tile's 2 rows together
// (simd_tile.h).
void FillIQuantsAvx2(TypeTraits& traits) {
  if (traits.type == GgmlType::kIq4Xs) {
    simd::Install<Iq4XsKernel, 2, 2, simd::DecodeRows::kTogether>(traits);
  }
}

}  // namespace shardlm::internal
