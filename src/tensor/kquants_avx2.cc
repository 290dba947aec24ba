// AVX2 kernels for Q4_K and Q6_K weights against Q8_K activations (the Q4_K_M mix).
// Registered by kernels_avx2.cc.
//
// Goals: exact int32 arithmetic inside a 256-element super-block, one float step per
// super-block and pair; a small tile for prefill; the same per-pair op sequence in every
// tile (simd_tile.h). Non-goals: Q2_K/Q3_K/Q5_K on AVX2 (generic kernels).
//
// Integer scheme: vpmaddubsw (unsigned quants × signed activations → int16 pairs, no
// saturation: 2·63·127 < 2^15), vpmaddwd by the broadcast sub-block scale → int32.
// Offsets (Q4_K mins, Q6_K's −32) go through the activation block sums.
#include "tensor/simd_avx2_inl.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

using avx2::Fp16ToF32;
using avx2::Load32;
using avx2::ReduceAdd;

// The 8 six-bit scales and mins of a Q4_K block, one byte each (see kquants_avx512.cc).
inline void UnpackScalesMins(const uint8_t* packed, uint64_t* scales, uint64_t* mins) {
  uint32_t w0, w1, w2;
  __builtin_memcpy(&w0, packed, 4);
  __builtin_memcpy(&w1, packed + 4, 4);
  __builtin_memcpy(&w2, packed + 8, 4);
  const uint32_t sc_lo = w0 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
  const uint32_t mn_lo = w1 & 0x3f3f3f3fu;
  const uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
  *scales = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
  *mins = mn_lo | (static_cast<uint64_t>(mn_hi) << 32);
}

inline __m256i Bsums(const BlockQ8_K* a) { return Load32(a->bsums); }

// Q4_K: 32 qs bytes per 64 elements: low nibbles sub-block 2j, high nibbles 2j+1.
struct Q4KKernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK_K;
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i isum[NR][NC];
      uint64_t scales[NR];
      __m256i mins[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ4_K*>(w + r * w_stride) + b;
        uint64_t mn;
        UnpackScalesMins(blk->scales, &scales[r], &mn);
        const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mn)));
        // min j against bsums 2j and 2j+1.
        mins[r] = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[r][c] = _mm256_setzero_si256();
      }
      for (int j = 0; j < 4; ++j) {
        __m256i lo[NR], hi[NR], s_lo[NR], s_hi[NR];
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const auto* blk = reinterpret_cast<const BlockQ4_K*>(w + r * w_stride) + b;
          const __m256i q = Load32(blk->qs + 32 * j);
          lo[r] = _mm256_and_si256(q, nibble);
          hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble);
          s_lo[r] = _mm256_set1_epi16(static_cast<int16_t>((scales[r] >> (16 * j)) & 0xff));
          s_hi[r] = _mm256_set1_epi16(static_cast<int16_t>((scales[r] >> (16 * j + 8)) & 0xff));
        }
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
          const __m256i a0 = Load32(ablk->qs + 64 * j);
          const __m256i a1 = Load32(ablk->qs + 64 * j + 32);
          SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], a0), s_lo[r]);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], a1), s_hi[r]);
            isum[r][c] = _mm256_add_epi32(isum[r][c], _mm256_add_epi32(p0, p1));
          }
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
        const __m256i bsums = Bsums(ablk);
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const auto* blk = reinterpret_cast<const BlockQ4_K*>(w + r * w_stride) + b;
          const __m256i msum = _mm256_madd_epi16(bsums, mins[r]);
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][c]),
                                      _mm256_set1_ps(Fp16ToF32(blk->d) * ablk->d), acc[r][c]);
          acc[r][c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum),
                                       _mm256_set1_ps(Fp16ToF32(blk->dmin) * ablk->d), acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = ReduceAdd(acc[r][c]);
  }
};

// Q6_K: group g (32 elements) of half h: ql[64h + 32(g & 1) ..] nibble (g >> 1), qh bits
// 2g..2g+1 of qh[32h ..]; its two scales are sc[8h + 2g] and sc[8h + 2g + 1].
struct Q6KKernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK_K;
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    const __m256i two_bits = _mm256_set1_epi8(0x03);
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i isum[NR][NC];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ6_K*>(w + r * w_stride) + b;
        const __m256i sc16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
          // −32·Σ_g sc_g·bsum_g, the offset of every quant.
          isum[r][c] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                        _mm256_slli_epi32(_mm256_madd_epi16(Bsums(ablk), sc16), 5));
        }
      }
      for (int h = 0; h < 2; ++h) {
        for (int g = 0; g < 4; ++g) {
          __m256i q[NR], sc[NR];
          SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
            const auto* blk = reinterpret_cast<const BlockQ6_K*>(w + r * w_stride) + b;
            __m256i ql = Load32(blk->ql + 64 * h + 32 * (g & 1));
            if (g >= 2) ql = _mm256_srli_epi16(ql, 4);
            const __m256i qh = _mm256_srli_epi16(Load32(blk->qh + 32 * h), 2 * g);
            q[r] = _mm256_or_si256(_mm256_and_si256(ql, nibble),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, two_bits), 4));
            const int8_t* s = blk->scales + 8 * h + 2 * g;
            sc[r] = _mm256_set_m128i(_mm_set1_epi16(s[1]), _mm_set1_epi16(s[0]));
          }
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
            const __m256i a = Load32(ablk->qs + 128 * h + 32 * g);
            SHARDLM_UNROLL for (int r = 0; r < NR; ++r) isum[r][c] = _mm256_add_epi32(
                isum[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], a), sc[r]));
          }
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const auto* blk = reinterpret_cast<const BlockQ6_K*>(w + r * w_stride) + b;
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][c]),
                                      _mm256_set1_ps(Fp16ToF32(blk->d) * ablk->d), acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = ReduceAdd(acc[r][c]);
  }
};

}  // namespace

// Tiles of 2 rows x 2 tokens: per pair an int32 and a float accumulator (8 registers) plus
// the unpacked quants of 2 rows fill the 16 ymm registers.
void FillKQuantsAvx2(TypeTraits& traits) {
  if (traits.type == GgmlType::kQ4_K) simd::Install<Q4KKernel, 2, 2>(traits);
  if (traits.type == GgmlType::kQ6_K) simd::Install<Q6KKernel, 2, 2>(traits);
}

}  // namespace shardlm::internal
