// AVX-512 VNNI kernels for the legacy 32-element block types: Q8_0, Q4_0, Q5_0 against
// Q8_0 activations, Q4_1, Q5_1 against Q8_1 activations, and Q8_0 rows dequantized; and for
// IQ4_NL and MXFP4 (table levels, looked up by a shuffle) against Q8_0 like Q4_0.
// Registered by kernels_avx512.cc.
//
// Goals: decode streams weight rows at memory speed; prefill reuses each loaded weight
// block across the tile's tokens and each activation block across its rows. Every
// (row, token) pair follows the same float sequence whatever the tile (simd_tile.h).
// Non-goals: repacked (interleaved) weight layouts; activation quantization (generic).
//
// Integer tricks: vpdpbusd multiplies unsigned by signed bytes. For Q8_0, activations are
// made unsigned by flipping their sign bit (a + 128), and the surplus 128·Σw per 4-byte
// lane is folded into the accumulator's start value, computed once per weight block. The
// 4- and 5-bit types keep their quants unsigned (q, not q − 8 / q − 16); their offset
// becomes −8·Σa / −16·Σa, a start value computed once per activation block. Either way
// the int32 lanes hold the exact Σ a·w; only the per-block scaling is floating point.

#include "tensor/intrinsics.h"
#include "tensor/quant_blocks.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

inline float Fp16ToF32(fp16_t h) { return _cvtsh_ss(h); }

// Two blocks' 32 quants side by side in one register (upper half zero when p1 is null).
inline __m512i LoadTwo(const int8_t* p0, const int8_t* p1) {
  const __m512i lo =
      _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0)));
  if (p1 == nullptr) return _mm512_zextsi256_si512(_mm512_castsi512_si256(lo));
  return _mm512_inserti64x4(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
}

// [d0 × 8 lanes, d1 × 8 lanes]: the scale of each half of a LoadTwo register.
inline __m512 TwoScales(float d0, float d1) {
  return _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
}

// Unsigned-quant weight policies: Quants(b0, b1) = the two blocks' quants as unsigned bytes
// in element order (upper half zero when b1 is null).
// Nibbles: 16 bytes per block hold elements 0-15 (low) and 16-31 (high).
template <class Block>
inline __m512i Nibbles(const Block* b0, const Block* b1) {
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0->qs));
  const __m128i q1 =
      b1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1->qs)) : _mm_setzero_si128();
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
  // [q0, q1, q0 >> 4, q1 >> 4] → [q0, q0 >> 4, q1, q1 >> 4] in 128-bit lanes.
  const __m512i wide =
      _mm512_inserti64x4(_mm512_zextsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
  return _mm512_and_si512(_mm512_shuffle_i64x2(wide, wide, 0xd8), _mm512_set1_epi8(0x0f));
}

// Q5: bit j of qh is the fifth bit (16) of element j.
template <class Block>
inline __m512i FiveBits(const Block* b0, const Block* b1) {
  uint32_t h0, h1 = 0;
  __builtin_memcpy(&h0, b0->qh, 4);
  if (b1) __builtin_memcpy(&h1, b1->qh, 4);
  const __mmask64 high = static_cast<__mmask64>(h0) | (static_cast<__mmask64>(h1) << 32);
  const __m512i low = Nibbles(b0, b1);
  return _mm512_mask_add_epi8(low, high, low, _mm512_set1_epi8(16));
}

struct Q8_0Weights {
  using Block = BlockQ8_0;
  static __m512i Quants(const Block* b0, const Block* b1) {
    return LoadTwo(b0->qs, b1 ? b1->qs : nullptr);
  }
};
// Signed-quant weights (policy W: Q8_0) · Q8_0 activations. Two blocks (64 bytes) per step;
// an odd last block runs with a zero upper half, which adds exact zeros to the same accumulators.
template <class W>
struct SignedKernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK;
    const __m512i sign_flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
      const bool pair = b + 1 < nb;
      __m512i wq[NR], wstart[NR];
      __m512 wd[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const typename W::Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, 2 * sizeof(typename W::Block));
        wq[r] = W::Quants(&blk[0], pair ? &blk[1] : nullptr);
        // -128·Σw per lane: the start value that cancels the +128 bias of activations.
        wstart[r] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                     _mm512_dpbusd_epi32(_mm512_setzero_si512(), sign_flip, wq[r]));
        wd[r] = TwoScales(Fp16ToF32(blk[0].d), pair ? Fp16ToF32(blk[1].d) : 0.0f);
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* ablk = reinterpret_cast<const BlockQ8_0*>(act + c * act_stride) + b;
        const __m512i au =
            _mm512_xor_si512(LoadTwo(ablk[0].qs, pair ? ablk[1].qs : nullptr), sign_flip);
        const __m512 ad = TwoScales(Fp16ToF32(ablk[0].d), pair ? Fp16ToF32(ablk[1].d) : 0.0f);
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const __m512i dot = _mm512_dpbusd_epi32(wstart[r], au, wq[r]);
          acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd[r], ad), acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

struct Q4_0Weights {
  using Block = BlockQ4_0;
  using ActBlock = BlockQ8_0;
  static constexpr int kOffset = 8;
  static __m512i Quants(const Block* b0, const Block* b1) { return Nibbles(b0, b1); }
};
struct Q5_0Weights {
  using Block = BlockQ5_0;
  using ActBlock = BlockQ8_0;
  static constexpr int kOffset = 16;
  static __m512i Quants(const Block* b0, const Block* b1) { return FiveBits(b0, b1); }
};
// IQ4_NL: each nibble looks its level up in a table of the levels + 128 (one table per 128-bit
// lane), unsigned like the others' quants; the offset 128 comes off as −128·Σa.
// The nibbles of two blocks looked up in a 16-entry table of signed levels, + 128 (unsigned).
template <class Block>
__m512i TableQuants(const int8_t* values, const Block* b0, const Block* b1) {
  const __m512i levels = _mm512_add_epi8(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values))),
      _mm512_set1_epi8(static_cast<char>(0x80)));
  return _mm512_shuffle_epi8(levels, Nibbles(b0, b1));
}
struct Iq4NlWeights {
  using Block = BlockIq4Nl;
  using ActBlock = BlockQ8_0;
  static constexpr int kOffset = 128;
  static __m512i Quants(const Block* b0, const Block* b1) {
    return TableQuants(kIq4NlValues, b0, b1);
  }
};
// MXFP4: FP4 values (doubled) + 128, looked up like IQ4_NL's; the scale is 2^(e − 128).
struct Mxfp4Weights {
  using Block = BlockMxfp4;
  using ActBlock = BlockQ8_0;
  static constexpr int kOffset = 128;
  static __m512i Quants(const Block* b0, const Block* b1) {
    return TableQuants(kMxfp4Values, b0, b1);
  }
  static float Scale(const Block& b) {  // the generic kernel's own formula
    const uint32_t bits = b.e < 2 ? 0x00200000u << b.e : static_cast<uint32_t>(b.e - 1) << 23;
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
  }
};

// A weight block's float scale: W::Scale where the policy has one, else its fp16 d.
template <class W>
float WeightScale(const typename W::Block& b) {
  if constexpr (requires { W::Scale(b); }) {
    return W::Scale(b);
  } else {
    return Fp16ToF32(b.d);
  }
}

struct Q4_1Weights {
  using Block = BlockQ4_1;
  using ActBlock = BlockQ8_1;
  static constexpr int kOffset = 0;
  static __m512i Quants(const Block* b0, const Block* b1) { return Nibbles(b0, b1); }
};
struct Q5_1Weights {
  using Block = BlockQ5_1;
  using ActBlock = BlockQ8_1;
  static constexpr int kOffset = 0;
  static __m512i Quants(const Block* b0, const Block* b1) { return FiveBits(b0, b1); }
};

// Lane 0 = v0, lane 8 = v1, others 0: adds one term per block to the per-lane sums.
inline __m512 TwoSingles(float v0, float v1) {
  return _mm512_maskz_mov_ps(0x0101, TwoScales(v0, v1));
}

// Unsigned-quant weights (policy W) · Q8_0 or Q8_1 activations. Q8_0-activated types
// (offset 8/16): Σ d_w·d_a·Σ(q − off)·a. Q8_1-activated types (min m): Σ d_w·d_a·Σq·a +
// m·s_a, with s_a the activation block's stored fp16 d·Σa, as llama.cpp does.
template <class W>
struct UnsignedKernel {
  using Block = typename W::Block;
  using ActBlock = typename W::ActBlock;
  static constexpr bool kHasMin = W::kOffset == 0;

  struct RowPart {  // one weight row's blocks b, b+1
    __m512i q;
    __m512 d, m;
  };
  struct ActPart {  // one activation row's blocks b, b+1
    __m512i q, start;
    __m512 d, s;
  };

  static RowPart PrepareRow(const Block* blk, bool pair) {
    RowPart row;
    row.q = W::Quants(blk, pair ? blk + 1 : nullptr);
    row.d = TwoScales(WeightScale<W>(blk[0]), pair ? WeightScale<W>(blk[1]) : 0.0f);
    row.m = _mm512_setzero_ps();
    if constexpr (kHasMin) {
      row.m = TwoSingles(Fp16ToF32(blk[0].m), pair ? Fp16ToF32(blk[1].m) : 0.0f);
    }
    return row;
  }

  static ActPart PrepareAct(const ActBlock* ablk, bool pair) {
    ActPart a;
    a.q = LoadTwo(ablk[0].qs, pair ? ablk[1].qs : nullptr);
    a.d = TwoScales(Fp16ToF32(ablk[0].d), pair ? Fp16ToF32(ablk[1].d) : 0.0f);
    a.start = _mm512_setzero_si512();
    a.s = _mm512_setzero_ps();
    if constexpr (kHasMin) {
      a.s = TwoScales(Fp16ToF32(ablk[0].s), pair ? Fp16ToF32(ablk[1].s) : 0.0f);
    } else {
      const __m512i offset = _mm512_set1_epi8(static_cast<char>(W::kOffset));
      a.start = _mm512_sub_epi32(a.start, _mm512_dpbusd_epi32(a.start, offset, a.q));
    }
    return a;
  }

  // The float sequence of one pair and block pair: the only place accumulators change.
  static __m512 Step(__m512 acc, const RowPart& row, const ActPart& a) {
    const __m512i dot = _mm512_dpbusd_epi32(a.start, row.q, a.q);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(row.d, a.d), acc);
    if constexpr (kHasMin) acc = _mm512_fmadd_ps(row.m, a.s, acc);
    return acc;
  }

  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    const int64_t nb = n / kQK;
    __m512 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
      const bool pair = b + 1 < nb;
      RowPart rows[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const auto* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, 2 * sizeof(Block));
        rows[r] = PrepareRow(blk, pair);
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const ActPart a =
            PrepareAct(reinterpret_cast<const ActBlock*>(act + c * act_stride) + b, pair);
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) acc[r][c] = Step(acc[r][c], rows[r], a);
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = _mm512_reduce_add_ps(acc[r][c]);
  }

  // Decode: the activation row prepared once (up to kMaxPreparedPairs block pairs, 24 KiB
  // of stack: rows of 8192 elements), then each weight row streamed through Step in block
  // order, exactly as Run<1, 1> does. Longer rows fall back to Run<1, 1> per row.
  static constexpr int64_t kMaxPreparedPairs = 128;
  static void RunRows(int64_t n, const uint8_t* w, int64_t w_stride, int nr, const uint8_t* act,
                      float* out, int64_t out_stride) {
    const int64_t nb = n / kQK;
    const int64_t n_pairs = (nb + 1) / 2;
    if (n_pairs > kMaxPreparedPairs) {
      for (int r = 0; r < nr; ++r)
        Run<1, 1>(n, w + r * w_stride, 0, act, 0, out + r * out_stride, 0);
      return;
    }
    ActPart prepared[kMaxPreparedPairs];
    for (int64_t b = 0; b < nb; b += 2) {
      prepared[b / 2] = PrepareAct(reinterpret_cast<const ActBlock*>(act) + b, b + 1 < nb);
    }
    for (int r = 0; r < nr; ++r) {
      __m512 acc = _mm512_setzero_ps();
      const auto* row = reinterpret_cast<const Block*>(w + r * w_stride);
      for (int64_t b = 0; b < nb; b += 2)
        acc = Step(acc, PrepareRow(row + b, b + 1 < nb), prepared[b / 2]);
      out[r * out_stride] = _mm512_reduce_add_ps(acc);
    }
  }
};

// dst = qs · float(d) per element: one exact int8 → float conversion and one rounded product,
// the generic DequantizeRowQ8_0's bits (also the Q8_0 KV cache's rows, read by attention).
void DequantizeRowQ8_0Avx512(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(blocks[b].d));
    for (int j = 0; j < kQK; j += 16) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs + j));
      _mm512_storeu_ps(dst + b * kQK + j,
                       _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
    }
  }
}

}  // namespace

// Tile 4 rows x 4 tokens: 16 accumulators + 3 registers per row + 2 per token nearly fit
// the 32 zmm registers. Measured on Zen 4 (one thread, L2-resident, n = 1024): Q8_0 180
// GOPS at 4x4, 186 at 4x6 (not worth the ragged tiles), 141 at 2x4 or 4x2, 72 at 1x1.
void FillLegacyAvx512(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kQ8_0:
      simd::Install<SignedKernel<Q8_0Weights>, 4, 4>(traits);
      traits.dequantize_row = DequantizeRowQ8_0Avx512;
      break;
    case GgmlType::kIq4Nl:
      simd::Install<UnsignedKernel<Iq4NlWeights>, 4, 4>(traits);
      break;
    case GgmlType::kMxfp4:
      simd::Install<UnsignedKernel<Mxfp4Weights>, 4, 4>(traits);
      break;
    case GgmlType::kQ4_0:
      simd::Install<UnsignedKernel<Q4_0Weights>, 4, 4>(traits);
      break;
    case GgmlType::kQ5_0:
      simd::Install<UnsignedKernel<Q5_0Weights>, 4, 4>(traits);
      break;
    case GgmlType::kQ4_1:
      simd::Install<UnsignedKernel<Q4_1Weights>, 4, 4>(traits);
      break;
    case GgmlType::kQ5_1:
      simd::Install<UnsignedKernel<Q5_1Weights>, 4, 4>(traits);
      break;
    default:
      break;
  }
}

}  // namespace shardlm::internal
