// AVX2 kernels for the legacy 32-element block types: Q8_0, Q4_0, Q5_0 against Q8_0
// activations, Q4_1, Q5_1 against Q8_1 activations, and Q8_0 rows dequantized; and for
// IQ4_NL, a 32-element block type whose quants are levels of a table (a shuffle looks them
// up), against Q8_0 like Q8_0. Registered by kernels_avx2.cc.
//
// Goals: the common 8-bit type at memory speed on AVX2-only CPUs, with a small tile for
// prefill; the same per-pair op sequence in every tile (simd_tile.h).
// Non-goals: repacked layouts.
//
// Integer scheme: vpmaddubsw needs one unsigned operand, so the weights' magnitudes |w|
// (hoisted per row) multiply the activations carrying the weights' signs (vpsignb per
// pair); |pair sum| <= 2·128·127 fits int16; vpmaddwd by ones widens to exact int32 lanes.
// The 4- and 5-bit types keep their quants unsigned (q, not q − 8 / q − 16) and take the
// offset as −8·Σa / −16·Σa, computed once per activation block.
#include "tensor/simd_avx2_inl.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

using avx2::Fp16ToF32;
using avx2::Load32;
using avx2::ReduceAdd;

// Unsigned quants of one block in element order: 16 bytes → 32 nibbles (low nibbles are
// elements 0-15, high nibbles 16-31).
template <class Block>
inline __m256i Nibbles(const Block* blk) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

// Q5: bit j of qh is the fifth bit (16) of element j. Each qh byte is spread over 8 bytes,
// which are tested against their own bit.
template <class Block>
inline __m256i FiveBits(const Block* blk) {
  uint32_t qh;
  __builtin_memcpy(&qh, blk->qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(Nibbles(blk), _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

struct Q8_0Weights {
  using Block = BlockQ8_0;
  static __m256i Quants(const Block* b) { return Load32(b->qs); }
};
// IQ4_NL: each nibble looks its level up in the table (one table per 128-bit lane).
struct Iq4NlWeights {
  using Block = BlockIq4Nl;
  static __m256i Quants(const Block* b) {
    const __m256i levels = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
    return _mm256_shuffle_epi8(levels, Nibbles(b));
  }
};

// MXFP4: FP4 values (doubled) looked up like IQ4_NL's levels; the scale is 2^(e − 128).
struct Mxfp4Weights {
  using Block = BlockMxfp4;
  static __m256i Quants(const Block* b) {
    const __m256i values = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
    return _mm256_shuffle_epi8(values, Nibbles(b));
  }
  static float Scale(const Block* b) {  // the generic kernel's own formula
    const uint32_t bits = b->e < 2 ? 0x00200000u << b->e : static_cast<uint32_t>(b->e - 1) << 23;
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
  }
};

// A weight block's float scale: W::Scale where the policy has one, else its fp16 d.
template <class W>
float WeightScale(const typename W::Block* b) {
  if constexpr (requires { W::Scale(b); }) {
    return W::Scale(b);
  } else {
    return Fp16ToF32(b->d);
  }
}

// Signed-quant weights (policy W: Q8_0, IQ4_NL, MXFP4) · Q8_0 activations: Σ d_w·d_a·Σ w·a.
template <class W>
struct SignedKernel {
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
        const auto* blk = reinterpret_cast<const typename W::Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(typename W::Block));
        wq[r] = W::Quants(blk);
        wabs[r] = _mm256_abs_epi8(wq[r]);
        wd[r] = WeightScale<W>(blk);
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

struct Q4_0Weights {
  using Block = BlockQ4_0;
  using ActBlock = BlockQ8_0;
  static constexpr int kOffsetShift = 3;  // offset 8
  static __m256i Quants(const Block* b) { return Nibbles(b); }
};
struct Q5_0Weights {
  using Block = BlockQ5_0;
  using ActBlock = BlockQ8_0;
  static constexpr int kOffsetShift = 4;  // offset 16
  static __m256i Quants(const Block* b) { return FiveBits(b); }
};
struct Q4_1Weights {
  using Block = BlockQ4_1;
  using ActBlock = BlockQ8_1;
  static constexpr int kOffsetShift = -1;  // no offset: a min m instead
  static __m256i Quants(const Block* b) { return Nibbles(b); }
};
struct Q5_1Weights {
  using Block = BlockQ5_1;
  using ActBlock = BlockQ8_1;
  static constexpr int kOffsetShift = -1;
  static __m256i Quants(const Block* b) { return FiveBits(b); }
};

// Unsigned-quant weights (policy W) · Q8_0 or Q8_1 activations: Σ d_w·d_a·Σ(q − off)·a,
// or for the Q8_1 types Σ d_w·d_a·Σq·a + m·s_a (s_a = the stored fp16 d·Σa), the m·s_a
// term added in lane 0 so that it joins the same per-lane sums.
template <class W>
struct UnsignedKernel {
  static constexpr bool kHasMin = W::kOffsetShift < 0;

  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    using Block = typename W::Block;
    using ActBlock = typename W::ActBlock;
    const int64_t nb = n / kQK;
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i wq[NR];
      float wd[NR];
      __m256 wm[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(Block));
        wq[r] = W::Quants(blk);
        wd[r] = Fp16ToF32(blk->d);
        if constexpr (kHasMin) wm[r] = _mm256_zextps128_ps256(_mm_set_ss(Fp16ToF32(blk->m)));
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* ablk = reinterpret_cast<const ActBlock*>(act + c * act_stride) + b;
        const __m256i aq = Load32(ablk->qs);
        const float ad = Fp16ToF32(ablk->d);
        __m256i start = _mm256_setzero_si256();
        __m256 as = _mm256_setzero_ps();
        if constexpr (kHasMin) {
          as = _mm256_set1_ps(Fp16ToF32(ablk->s));
        } else {
          const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, aq), ones16);
          start = _mm256_sub_epi32(start, _mm256_slli_epi32(sums, W::kOffsetShift));
        }
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const __m256i dot =
              _mm256_add_epi32(start, _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], aq), ones16));
          acc[r][c] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(wd[r] * ad), acc[r][c]);
          if constexpr (kHasMin) acc[r][c] = _mm256_fmadd_ps(wm[r], as, acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = ReduceAdd(acc[r][c]);
  }
};

// dst = qs · float(d) per element: one exact int8 → float conversion and one rounded product,
// the generic DequantizeRowQ8_0's bits (also the Q8_0 KV cache's rows, read by attention).
void DequantizeRowQ8_0Avx2(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(blocks[b].d));
    for (int j = 0; j < kQK; j += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs + j));
      _mm256_storeu_ps(dst + b * kQK + j,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

}  // namespace

// Tile 2 rows x 4 tokens: 8 accumulators + 2 registers per row + 1 per token + temporaries
// fit the 16 ymm registers. Decode takes a tile's 2 rows together (simd_tile.h).
void FillLegacyAvx2(TypeTraits& traits) {
  constexpr auto kDecode = simd::DecodeRows::kTogether;
  switch (traits.type) {
    case GgmlType::kQ8_0:
      simd::Install<SignedKernel<Q8_0Weights>, 2, 4, kDecode>(traits);
      traits.dequantize_row = DequantizeRowQ8_0Avx2;
      break;
    case GgmlType::kQ4_0:
      simd::Install<UnsignedKernel<Q4_0Weights>, 2, 4, kDecode>(traits);
      break;
    case GgmlType::kIq4Nl:
      simd::Install<SignedKernel<Iq4NlWeights>, 2, 4, kDecode>(traits);
      break;
    case GgmlType::kMxfp4:
      simd::Install<SignedKernel<Mxfp4Weights>, 2, 4, kDecode>(traits);
      break;
    case GgmlType::kQ5_0:
      simd::Install<UnsignedKernel<Q5_0Weights>, 2, 4, kDecode>(traits);
      break;
    case GgmlType::kQ4_1:
      simd::Install<UnsignedKernel<Q4_1Weights>, 2, 4, kDecode>(traits);
      break;
    case GgmlType::kQ5_1:
      simd::Install<UnsignedKernel<Q5_1Weights>, 2, 4, kDecode>(traits);
      break;
    default:
      break;
  }
}

}  // namespace shardlm::internal
