// AVX2 kernels for the K-quants against Q8_K activations: Q4_K and Q6_K (the Q4_K_M mix),
// Q5_K, Q3_K, Q2_K. Registered by kernels_avx2.cc.
//
// Goals: exact int32 arithmetic inside a 256-element super-block, one float step per
// super-block and pair; a small tile for prefill; the same per-pair op sequence in every
// tile (simd_tile.h). Non-goals: repacked layouts.
//
// Integer scheme: vpmaddubsw (unsigned quants × signed activations → int16 pairs, no
// saturation: 2·63·127 < 2^15), vpmaddwd by the broadcast sub-block scale → int32.
// Offsets (Q4_K/Q5_K/Q2_K mins, Q6_K's −32, Q3_K's −4) go through the activation block sums.
#include <type_traits>

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

// Q4_K / Q5_K: 32 qs bytes per 64 elements: low nibbles sub-block 2j, high nibbles 2j+1;
// Q5_K adds 16 where bit 2j (low) or 2j+1 (high) of qh[l] is set.
template <bool kFiveBit>
struct Q4KKernel {
  using Block = std::conditional_t<kFiveBit, BlockQ5_K, BlockQ4_K>;

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
        const auto* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(Block));
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
          const auto* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
          const __m256i q = Load32(blk->qs + 32 * j);
          lo[r] = _mm256_and_si256(q, nibble);
          hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble);
          if constexpr (kFiveBit) {
            const __m256i qh = _mm256_srli_epi16(Load32(blk->qh), 2 * j);
            const __m256i one = _mm256_set1_epi8(1);
            lo[r] = _mm256_or_si256(lo[r], _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
            hi[r] = _mm256_or_si256(
                hi[r], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
          }
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
          const auto* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
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

// Per-block weight state of the types with 16 scales of 16 elements (Q6_K, Q3_K, Q2_K).
struct SixteenScales {
  __m256i scales;   // 16 int16: the scale of each 16-element group
  __m256i offsets;  // 16 int16 paired with the bsums: −off·sc (Q6_K, Q3_K) or mins (Q2_K)
  float d, dmin;    // dmin only for Q2_K
};

// Q6_K: group g (32 elements) of half h: ql[64h + 32(g & 1) ..] nibble (g >> 1), qh bits
// 2g..2g+1 of qh[32h ..]; value q − 32, the −32 through −32·Σ sc·bsum.
struct Q6KWeights {
  using Block = BlockQ6_K;
  static constexpr bool kHasMins = false;
  static SixteenScales Prepare(const Block* blk) {
    SixteenScales s;
    const __m256i sc =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
    s.scales = sc;
    s.offsets = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 5));
    s.d = Fp16ToF32(blk->d);
    s.dmin = 0.0f;
    return s;
  }
  static __m256i Group(const Block* blk, int h, int g) {
    __m256i ql = Load32(blk->ql + 64 * h + 32 * (g & 1));
    if (g >= 2) ql = _mm256_srli_epi16(ql, 4);
    const __m256i qh = _mm256_srli_epi16(Load32(blk->qh + 32 * h), 2 * g);
    return _mm256_or_si256(_mm256_and_si256(ql, _mm256_set1_epi8(0x0f)),
                           _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4));
  }
};

// Q3_K: group g of half h: 2 bits at 2g of qs[32h ..], plus 4 where hmask bit 4h + g is
// set; value q3 − 4 with 6-bit scales s − 32 (see kquants_avx512.cc for the packing).
struct Q3KWeights {
  using Block = BlockQ3_K;
  static constexpr bool kHasMins = false;
  static SixteenScales Prepare(const Block* blk) {
    uint32_t a0, a1, a2;
    __builtin_memcpy(&a0, blk->scales, 4);
    __builtin_memcpy(&a1, blk->scales + 4, 4);
    __builtin_memcpy(&a2, blk->scales + 8, 4);
    const uint32_t k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
    const __m128i packed =
        _mm_set_epi32(static_cast<int>(((a1 >> 4) & k4) | (((a2 >> 6) & k2) << 4)),
                      static_cast<int>(((a0 >> 4) & k4) | (((a2 >> 4) & k2) << 4)),
                      static_cast<int>((a1 & k4) | (((a2 >> 2) & k2) << 4)),
                      static_cast<int>((a0 & k4) | ((a2 & k2) << 4)));
    const __m256i sc = _mm256_sub_epi16(_mm256_cvtepu8_epi16(packed), _mm256_set1_epi16(32));
    SixteenScales s;
    s.scales = sc;
    s.offsets = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 2));
    s.d = Fp16ToF32(blk->d);
    s.dmin = 0.0f;
    return s;
  }
  static __m256i Group(const Block* blk, int h, int g) {
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i q =
        _mm256_and_si256(_mm256_srli_epi16(Load32(blk->qs + 32 * h), 2 * g), _mm256_set1_epi8(3));
    const __m256i hbit = _mm256_and_si256(_mm256_srli_epi16(Load32(blk->hmask), 4 * h + g), one);
    return _mm256_or_si256(q, _mm256_slli_epi16(hbit, 2));
  }
};

// Q2_K: group g of half h: 2 bits at 2g of qs[32h ..]; value d·(s & 15)·q − dmin·(s >> 4).
struct Q2KWeights {
  using Block = BlockQ2_K;
  static constexpr bool kHasMins = true;
  static SixteenScales Prepare(const Block* blk) {
    const __m256i raw =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
    SixteenScales s;
    s.scales = _mm256_and_si256(raw, _mm256_set1_epi16(15));
    s.offsets = _mm256_srli_epi16(raw, 4);
    s.d = Fp16ToF32(blk->d);
    s.dmin = Fp16ToF32(blk->dmin);
    return s;
  }
  static __m256i Group(const Block* blk, int h, int g) {
    return _mm256_and_si256(_mm256_srli_epi16(Load32(blk->qs + 32 * h), 2 * g),
                            _mm256_set1_epi8(3));
  }
};

// Byte shuffle broadcasting int16 2g of each 128-bit lane to the low lane and int16 2g + 1
// to the high lane: the two scales of 32-element group g.
inline __m256i GroupScaleShuffle(int g) {
  const int8_t lo = static_cast<int8_t>(4 * g), hi = static_cast<int8_t>(4 * g + 2);
  return _mm256_setr_epi8(lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1,
                          lo, lo + 1, lo, lo + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1,
                          hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1);
}

// Q6_K, Q3_K, Q2_K: unsigned quants per 32-element group, two scales per group (one per
// 128-bit half of the vpmaddubsw result); offsets through the bsums.
template <class P>
struct SixteenScaleKernel {
  using Block = typename P::Block;

  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK_K;
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i isum[NR][NC], msum[NR][NC];
      SixteenScales ws[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(Block));
        ws[r] = P::Prepare(blk);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
          const __m256i offs = _mm256_madd_epi16(Bsums(ablk), ws[r].offsets);
          if constexpr (P::kHasMins) {
            isum[r][c] = _mm256_setzero_si256();
            msum[r][c] = offs;
          } else {
            isum[r][c] = offs;
          }
        }
      }
      SHARDLM_UNROLL for (int h = 0; h < 2; ++h) {
        __m256i half_scales[NR];  // scales 8h..8h+7 in both 128-bit lanes
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) half_scales[r] =
            h ? _mm256_permute2x128_si256(ws[r].scales, ws[r].scales, 0x11)
              : _mm256_permute2x128_si256(ws[r].scales, ws[r].scales, 0x00);
        SHARDLM_UNROLL for (int g = 0; g < 4; ++g) {
          __m256i q[NR], sc[NR];
          SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
            q[r] = P::Group(reinterpret_cast<const Block*>(w + r * w_stride) + b, h, g);
            sc[r] = _mm256_shuffle_epi8(half_scales[r], GroupScaleShuffle(g));
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
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][c]),
                                      _mm256_set1_ps(ws[r].d * ablk->d), acc[r][c]);
          if constexpr (P::kHasMins) {
            acc[r][c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[r][c]),
                                         _mm256_set1_ps(ws[r].dmin * ablk->d), acc[r][c]);
          }
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
  switch (traits.type) {
    case GgmlType::kQ4_K:
      simd::Install<Q4KKernel<false>, 2, 2>(traits);
      break;
    case GgmlType::kQ5_K:
      simd::Install<Q4KKernel<true>, 2, 2>(traits);
      break;
    case GgmlType::kQ6_K:
      simd::Install<SixteenScaleKernel<Q6KWeights>, 2, 2>(traits);
      break;
    case GgmlType::kQ3_K:
      simd::Install<SixteenScaleKernel<Q3KWeights>, 2, 2>(traits);
      break;
    case GgmlType::kQ2_K:
      simd::Install<SixteenScaleKernel<Q2KWeights>, 2, 2>(traits);
      break;
    default:
      break;
  }
}

}  // namespace shardlm::internal
