// AVX-512 VNNI kernels for the K-quants (256-element super-blocks) against Q8_K
// activations: Q4_K and Q6_K (the Q4_K_M mix), Q5_K, Q3_K, Q2_K. Registered by
// kernels_avx512.cc.
//
// Goals: one float conversion per super-block and pair; everything inside a super-block
// is exact int32 arithmetic. Weights are unpacked once per row and reused across the
// tile's tokens; activations are loaded once per token and reused across its rows.
// Non-goals: repacked weight layouts (panels_kquants_avx512.cc); activation quantization (generic).
//
// Integer scheme (both types): vpmaddubsw multiplies the unsigned weight quants by the
// signed activation bytes into int16 pairs (|x| <= 2·63·127, no saturation), then
// vpdpwssd multiplies those pairs by the int16 sub-block scales and accumulates in int32
// (|Σ| <= 256·63·127·128 < 2^31). Weight offsets (Q4_K mins, Q6_K's -32) go through the
// activation block sums (bsums), never through per-element work.

#include <type_traits>

#include "tensor/intrinsics.h"
#include "tensor/quant_blocks.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

inline float Fp16ToF32(fp16_t h) { return _cvtsh_ss(h); }

inline __m512i Load64(const void* p) { return _mm512_loadu_si512(p); }

// Lane k of the result = v[first + k / per] for int16 lanes (vpermw index vector).
inline __m512i SpreadIndex(int first, int per) {
  alignas(64) int16_t idx[32];
  for (int k = 0; k < 32; ++k) idx[k] = static_cast<int16_t>(first + k / per);
  return _mm512_load_si512(idx);
}

// The 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K block, one byte each, from the
// 12 packed bytes: sub-blocks 0-3 keep their low 6 bits in bytes 0-3 (scales) and 4-7
// (mins); sub-blocks 4-7 take their low nibble from bytes 8-11 and their top 2 bits from
// the top bits of bytes 0-3 (scales) and 4-7 (mins).
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

// Q4_K / Q5_K: value = d·sc_j·q − dmin·m_j for sub-block j of 32. A 64-byte load of qs
// holds 128 elements: low nibbles are sub-blocks 4h and 4h+2 (first and second 32 bytes),
// high nibbles 4h+1 and 4h+3; two 128-bit-lane shuffles put them back in element order so
// that activations are plain contiguous loads. Q5_K adds 16 where bit j of qh[l] is set.
template <bool kFiveBit>
struct Q4KKernel {
  using Block = std::conditional_t<kFiveBit, BlockQ5_K, BlockQ4_K>;

  // Unsigned quants of sub-blocks 4h, 4h+1 (q[0]) and 4h+2, 4h+3 (q[1]).
  static void Quants(const Block* blk, int half, __m512i* q) {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const __m512i raw = Load64(blk->qs + 64 * half);
    const __m512i lo = _mm512_and_si512(raw, nibble);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
    q[0] = _mm512_shuffle_i64x2(lo, hi, 0x44);
    q[1] = _mm512_shuffle_i64x2(lo, hi, 0xee);
    if constexpr (kFiveBit) {
      const __m512i qh =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh)));
      for (int k = 0; k < 2; ++k) {
        const int sub = 4 * half + 2 * k;  // bit `sub` for the low 32 bytes, sub+1 above
        const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << sub)),
                                                _mm256_set1_epi8(static_cast<char>(2 << sub)), 1);
        q[k] =
            _mm512_mask_add_epi8(q[k], _mm512_test_epi8_mask(qh, bits), q[k], _mm512_set1_epi8(16));
      }
    }
  }

  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK_K;
    const __m512i spread[4] = {SpreadIndex(0, 16), SpreadIndex(2, 16), SpreadIndex(4, 16),
                               SpreadIndex(6, 16)};
    const __m512i pair_index = SpreadIndex(0, 2);  // bsum pair 2j,2j+1 ↔ min j
    __m512 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m512i isum[NR][NC];
      __m512i mins[NR];
      float wd[NR], wdmin[NR];
      __m512i scales16[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(Block));
        uint64_t sc, mn;
        UnpackScalesMins(blk->scales, &sc, &mn);
        scales16[r] = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc)));
        mins[r] = _mm512_zextsi256_si512(_mm512_castsi512_si256(_mm512_permutexvar_epi16(
            pair_index, _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(mn))))));
        wd[r] = Fp16ToF32(blk->d);
        wdmin[r] = Fp16ToF32(blk->dmin);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[r][c] = _mm512_setzero_si512();
      }
      SHARDLM_UNROLL for (int half = 0; half < 2; ++half) {
        __m512i wq[NR][2], ws[NR][2];
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          Quants(reinterpret_cast<const Block*>(w + r * w_stride) + b, half, wq[r]);
          ws[r][0] = _mm512_permutexvar_epi16(spread[2 * half], scales16[r]);
          ws[r][1] = _mm512_permutexvar_epi16(spread[2 * half + 1], scales16[r]);
        }
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
          const __m512i a0 = Load64(ablk->qs + 128 * half);
          const __m512i a1 = Load64(ablk->qs + 128 * half + 64);
          SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
            isum[r][c] =
                _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(wq[r][0], a0), ws[r][0]);
            isum[r][c] =
                _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(wq[r][1], a1), ws[r][1]);
          }
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
        const __m512i bsums = _mm512_zextsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ablk->bsums)));
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const __m512i msum = _mm512_madd_epi16(bsums, mins[r]);
          acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][c]),
                                      _mm512_set1_ps(wd[r] * ablk->d), acc[r][c]);
          acc[r][c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_set1_ps(wdmin[r] * ablk->d),
                                       acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

// Per-block weight state of the types with 16 scales of 16 elements (Q6_K, Q3_K, Q2_K).
struct SixteenScales {
  __m512i scales16;  // int16 lanes 0-15: the scale of each 16-element group
  __m512i offsets;   // int16 lanes 0-15, zero above: paired with the 16 bsums
  float d, dmin;     // dmin only for Q2_K (its offsets are mins, scaled apart)
};

// Q6_K: value = d·sc_g·(q − 32), q = 4 low bits from ql | 2 high bits from qh. Each
// 128-element half has ql[64] and qh[32]: low nibbles of ql are elements 0-63, high
// nibbles 64-127; qh bit pairs 0-1, 2-3, 4-5, 6-7 are elements 0-31, 32-63, 64-95, 96-127.
// The −32 becomes −32·Σ_g sc_g·bsum_g, in the same int32 sum.
struct Q6KWeights {
  using Block = BlockQ6_K;
  static constexpr bool kHasMins = false;
  static SixteenScales Prepare(const Block* blk) {
    SixteenScales s;
    const __m256i sc =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
    s.scales16 = _mm512_zextsi256_si512(sc);
    s.offsets =
        _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 5)));
    s.d = Fp16ToF32(blk->d);
    s.dmin = 0.0f;
    return s;
  }
  static void Quants(const Block* blk, int half, __m512i* q) {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const __m512i two_bits = _mm512_set1_epi8(0x03);
    const __m512i ql = Load64(blk->ql + 64 * half);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * half));
    const __m512i qh_a =
        _mm512_inserti64x4(_mm512_zextsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    const __m512i qh_b = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_srli_epi16(qh, 4)),
                                            _mm256_srli_epi16(qh, 6), 1);
    q[0] = _mm512_or_si512(_mm512_and_si512(ql, nibble),
                           _mm512_slli_epi16(_mm512_and_si512(qh_a, two_bits), 4));
    q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble),
                           _mm512_slli_epi16(_mm512_and_si512(qh_b, two_bits), 4));
  }
};

// Two-bit fields of a 32-byte load: elements 0-63 are bit pairs 0-1 then 2-3, elements
// 64-127 bit pairs 4-5 then 6-7 (the Q2_K/Q3_K layout of each 128-element half).
inline void TwoBitFields(const uint8_t* qs, __m512i* q) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  const __m512i two_bits = _mm512_set1_epi8(0x03);
  const __m512i x = _mm512_inserti64x4(_mm512_zextsi256_si512(raw), _mm256_srli_epi16(raw, 2), 1);
  q[0] = _mm512_and_si512(x, two_bits);
  q[1] = _mm512_and_si512(_mm512_srli_epi16(x, 4), two_bits);
}

// Q3_K: value = d·(s_g − 32)·(q3 − 4), q3 = 2 low bits from qs | the hmask bit as 4. Scale
// g has 6 bits: low nibble from byte g (g < 8) or the high nibble of byte g − 8, top two
// bits from byte 8 + g % 4 at bit 2·(g / 4). Group j (32 elements) of half h takes hmask
// bit 4h + j. The −4 becomes −4·Σ_g sc_g·bsum_g.
struct Q3KWeights {
  using Block = BlockQ3_K;
  static constexpr bool kHasMins = false;
  static SixteenScales Prepare(const Block* blk) {
    uint32_t a0, a1, a2;
    __builtin_memcpy(&a0, blk->scales, 4);
    __builtin_memcpy(&a1, blk->scales + 4, 4);
    __builtin_memcpy(&a2, blk->scales + 8, 4);
    const uint32_t k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
    const uint32_t g0 = (a0 & k4) | ((a2 & k2) << 4);
    const uint32_t g1 = (a1 & k4) | (((a2 >> 2) & k2) << 4);
    const uint32_t g2 = ((a0 >> 4) & k4) | (((a2 >> 4) & k2) << 4);
    const uint32_t g3 = ((a1 >> 4) & k4) | (((a2 >> 6) & k2) << 4);
    const __m128i packed = _mm_set_epi32(static_cast<int>(g3), static_cast<int>(g2),
                                         static_cast<int>(g1), static_cast<int>(g0));
    const __m256i sc = _mm256_sub_epi16(_mm256_cvtepu8_epi16(packed), _mm256_set1_epi16(32));
    SixteenScales s;
    s.scales16 = _mm512_zextsi256_si512(sc);
    s.offsets =
        _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 2)));
    s.d = Fp16ToF32(blk->d);
    s.dmin = 0.0f;
    return s;
  }
  static void Quants(const Block* blk, int half, __m512i* q) {
    TwoBitFields(blk->qs + 32 * half, q);
    const __m512i hm =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->hmask)));
    for (int k = 0; k < 2; ++k) {
      const int bit = 4 * half + 2 * k;  // group j = 2k (low 32 bytes) and 2k+1
      const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << bit)),
                                              _mm256_set1_epi8(static_cast<char>(2 << bit)), 1);
      q[k] = _mm512_mask_add_epi8(q[k], _mm512_test_epi8_mask(hm, bits), q[k], _mm512_set1_epi8(4));
    }
  }
};

// Q2_K: value = d·(s_g & 15)·q − dmin·(s_g >> 4) for 16-element group g; the mins go
// through the bsums with their own scale dmin.
struct Q2KWeights {
  using Block = BlockQ2_K;
  static constexpr bool kHasMins = true;
  static SixteenScales Prepare(const Block* blk) {
    const __m256i raw =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
    SixteenScales s;
    s.scales16 = _mm512_zextsi256_si512(_mm256_and_si256(raw, _mm256_set1_epi16(15)));
    s.offsets = _mm512_zextsi256_si512(_mm256_srli_epi16(raw, 4));
    s.d = Fp16ToF32(blk->d);
    s.dmin = Fp16ToF32(blk->dmin);
    return s;
  }
  static void Quants(const Block* blk, int half, __m512i* q) {
    TwoBitFields(blk->qs + 32 * half, q);
  }
};

// Q6_K, Q3_K, Q2_K: unsigned quants, 16 scales of 16 elements. Offsets (−32 / −4) join the
// int32 sum through the bsums; Q2_K's mins do the same into a second sum scaled by dmin.
template <class P>
struct SixteenScaleKernel {
  using Block = typename P::Block;

  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK_K;
    const __m512i spread[4] = {SpreadIndex(0, 8), SpreadIndex(4, 8), SpreadIndex(8, 8),
                               SpreadIndex(12, 8)};
    __m512 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m512i isum[NR][NC], msum[NR][NC];
      SixteenScales ws[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(Block));
        ws[r] = P::Prepare(blk);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
          const __m512i bsums = _mm512_zextsi256_si512(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ablk->bsums)));
          if constexpr (P::kHasMins) {
            isum[r][c] = _mm512_setzero_si512();
            msum[r][c] = _mm512_madd_epi16(bsums, ws[r].offsets);
          } else {
            isum[r][c] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bsums, ws[r].offsets);
          }
        }
      }
      SHARDLM_UNROLL for (int half = 0; half < 2; ++half) {
        __m512i wq[NR][2], wsc[NR][2];
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          P::Quants(reinterpret_cast<const Block*>(w + r * w_stride) + b, half, wq[r]);
          wsc[r][0] = _mm512_permutexvar_epi16(spread[2 * half], ws[r].scales16);
          wsc[r][1] = _mm512_permutexvar_epi16(spread[2 * half + 1], ws[r].scales16);
        }
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
          const __m512i a0 = Load64(ablk->qs + 128 * half);
          const __m512i a1 = Load64(ablk->qs + 128 * half + 64);
          SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
            isum[r][c] =
                _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(wq[r][0], a0), wsc[r][0]);
            isum[r][c] =
                _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(wq[r][1], a1), wsc[r][1]);
          }
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* ablk = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][c]),
                                      _mm512_set1_ps(ws[r].d * ablk->d), acc[r][c]);
          if constexpr (P::kHasMins) {
            acc[r][c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[r][c]),
                                         _mm512_set1_ps(ws[r].dmin * ablk->d), acc[r][c]);
          }
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

}  // namespace

// Tiles of 4 rows x 4 tokens. The per-pair int32 and float accumulators (32 registers)
// do not all fit, but the spilled ones are touched once per super-block; measured on Zen 4
// (one thread, L2-resident operands, n = 1024): Q4_K 216 GOPS at 4x4 vs 201 at 2x4, 184 at
// 2x2, 167 at 4x2; Q6_K 218 at 4x4, 188 at 2x2. Decode walks rows through the 1x1 kernel
// (simd_tile.h): ~100 GOPS for Q4_K from L2, more than DRAM can feed.
void FillKQuantsAvx512(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kQ4_K:
      simd::Install<Q4KKernel<false>, 4, 4>(traits);
      break;
    case GgmlType::kQ5_K:
      simd::Install<Q4KKernel<true>, 4, 4>(traits);
      break;
    case GgmlType::kQ6_K:
      simd::Install<SixteenScaleKernel<Q6KWeights>, 4, 4>(traits);
      break;
    case GgmlType::kQ3_K:
      simd::Install<SixteenScaleKernel<Q3KWeights>, 4, 4>(traits);
      break;
    case GgmlType::kQ2_K:
      simd::Install<SixteenScaleKernel<Q2KWeights>, 4, 4>(traits);
      break;
    default:
      break;
  }
}

}  // namespace shardlm::internal
