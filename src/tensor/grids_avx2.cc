// AVX2 kernels of the grid i-quants (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S) and
// the ternary types (TQ1_0, TQ2_0) against Q8_K activations. Registered by kernels_avx2.cc;
// AVX-512 CPUs use them too.
//
// The grid types take the shared tile kernel (grid_kernel_inl.h: one decode of a row's
// super-block per tile, which every token of the tile reuses; llama.cpp's kernels decode a
// block again for every token); this file brings their decoders: grid entries by table loads,
// signs as ±1 bytes from tables. The ternary types keep their unsigned digits 0..2 and subtract
// the activations' block sums per lane instead, as their generic kernel does; the float side is
// the generic kernels' (kernels_generic_grids.cc, kernels_generic_ternary.cc), so the results
// are bitwise theirs.
// Non-goals: repacked layouts.
#include <cstring>

#include "tensor/grid_kernel_inl.h"
#include "tensor/iquant_grids.h"
#include "tensor/simd_avx2_inl.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

using avx2::Fp16ToF32;
using avx2::Load32;
using avx2::ReduceAdd;
using grids::Pair;
using grids::PairSums;
using grids::Set4;
using grids::Shift;
using grids::Word;

// One sub-block of 32 as two vectors: magnitudes `mag` (unsigned bytes) and `sgn`, whose byte
// signs are the values' (zero where the value is), so value · a = mag · sign(a, sgn). IQ1_M also
// gives the ±1 signs of its 1/8 shifts.
struct SubBlock {
  __m256i mag, sgn, shift;
};

// What every AVX2 decoder gives the tile kernel (grid_kernel_inl.h): its sub-block type and
// how a sub-block meets a row of activations. vpsignb carries the values' signs onto the
// activations, vpmaddubsw multiplies by the magnitudes (|pair sum| <= 2·62·127 fits int16),
// vpmaddwd by the scales widens to exact int32 lanes.
struct Avx2Ops {
  using SubBlock = ::shardlm::internal::SubBlock;
  template <Shift kShift>
  static void AddSub(const SubBlock& sub, __m256i a, __m256i scales, PairSums* p) {
    const __m256i pairs = _mm256_maddubs_epi16(sub.mag, _mm256_sign_epi8(a, sub.sgn));
    p->isum = _mm256_add_epi32(p->isum, _mm256_madd_epi16(pairs, scales));
    if constexpr (kShift == Shift::kElements) {
      const __m256i shift_pairs =
          _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_sign_epi8(a, sub.shift));
      p->shift_isum = _mm256_add_epi32(p->shift_isum, _mm256_madd_epi16(shift_pairs, scales));
    }
  }
};

struct Iq2XxsDecoder : Avx2Ops {
  using Block = BlockIq2Xxs;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) {
    const uint32_t idx = Word(b.qs + 4 * ib), codes = Word(b.qs + 4 * ib + 2);
    return {Set4(kIq2XxsGrid[idx & 0xFF], kIq2XxsGrid[(idx >> 8) & 0xFF],
                 kIq2XxsGrid[(idx >> 16) & 0xFF], kIq2XxsGrid[idx >> 24]),
            Set4(kEvenSignBytes[codes & 127], kEvenSignBytes[(codes >> 7) & 127],
                 kEvenSignBytes[(codes >> 14) & 127], kEvenSignBytes[(codes >> 21) & 127]),
            _mm256_setzero_si256()};
  }
};

struct Iq2XsDecoder : Avx2Ops {
  using Block = BlockIq2Xs;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) {
    uint16_t q[4];  // the block is packed: its uint16 fields may be unaligned
    std::memcpy(q, b.qs + 4 * ib, sizeof(q));
    return {Set4(kIq2XsGrid[q[0] & 511], kIq2XsGrid[q[1] & 511], kIq2XsGrid[q[2] & 511],
                 kIq2XsGrid[q[3] & 511]),
            Set4(kEvenSignBytes[q[0] >> 9], kEvenSignBytes[q[1] >> 9], kEvenSignBytes[q[2] >> 9],
                 kEvenSignBytes[q[3] >> 9]),
            _mm256_setzero_si256()};
  }
};

struct Iq2SDecoder : Avx2Ops {
  using Block = BlockIq2S;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) {
    const uint8_t* qs = b.qs + 4 * ib;
    const uint8_t* signs = b.qs + kQK_K / 8 + 4 * ib;
    const int qh = b.qh[ib];
    return {Set4(kIq2SGrid[qs[0] | ((qh << 8) & 0x300)], kIq2SGrid[qs[1] | ((qh << 6) & 0x300)],
                 kIq2SGrid[qs[2] | ((qh << 4) & 0x300)], kIq2SGrid[qs[3] | ((qh << 2) & 0x300)]),
            Set4(kSignBytes[signs[0]], kSignBytes[signs[1]], kSignBytes[signs[2]],
                 kSignBytes[signs[3]]),
            _mm256_setzero_si256()};
  }
};

struct Iq3XxsDecoder : Avx2Ops {
  using Block = BlockIq3Xxs;
  static constexpr float kFactor = 0.25f;
  static SubBlock Sub(const Block& b, int ib) {
    const uint32_t codes = Word(b.qs + kQK_K / 4 + 4 * ib);
    const uint8_t* q = b.qs + 8 * ib;
    return {
        Set4(Pair(kIq3XxsGrid[q[0]], kIq3XxsGrid[q[1]]), Pair(kIq3XxsGrid[q[2]], kIq3XxsGrid[q[3]]),
             Pair(kIq3XxsGrid[q[4]], kIq3XxsGrid[q[5]]),
             Pair(kIq3XxsGrid[q[6]], kIq3XxsGrid[q[7]])),
        Set4(kEvenSignBytes[codes & 127], kEvenSignBytes[(codes >> 7) & 127],
             kEvenSignBytes[(codes >> 14) & 127], kEvenSignBytes[(codes >> 21) & 127]),
        _mm256_setzero_si256()};
  }
};

struct Iq3SDecoder : Avx2Ops {
  using Block = BlockIq3S;
  static constexpr float kFactor = 1.0f;
  static SubBlock Sub(const Block& b, int ib) {
    const uint8_t* q = b.qs + 8 * ib;
    const int qh = b.qh[ib];
    const uint8_t* signs = b.signs + 4 * ib;
    auto group = [&](int l) {
      return Pair(kIq3SGrid[q[2 * l] | ((qh << (8 - 2 * l)) & 256)],
                  kIq3SGrid[q[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)]);
    };
    return {Set4(group(0), group(1), group(2), group(3)),
            Set4(kSignBytes[signs[0]], kSignBytes[signs[1]], kSignBytes[signs[2]],
                 kSignBytes[signs[3]]),
            _mm256_setzero_si256()};
  }
};

constexpr uint64_t kPlusOnes = 0x0101010101010101ull;

// IQ1 entries are signed (−1, 0, 1): their own signs.
inline SubBlock SignedSub(__m256i q) { return {_mm256_abs_epi8(q), q, _mm256_setzero_si256()}; }

struct Iq1SDecoder : Avx2Ops {
  using Block = BlockIq1S;
  static constexpr float kFactor = 1.0f;
  static SubBlock Sub(const Block& b, int ib) { return SignedSub(grids::Iq1SEntries(b, ib)); }
};

struct Iq1MDecoder : Avx2Ops {
  using Block = BlockIq1M;
  static constexpr float kFactor = 1.0f;
  static SubBlock Sub(const Block& b, int ib) {
    const int h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
    SubBlock sub = SignedSub(grids::Iq1MEntries(b, ib));
    const uint64_t minus = ~uint64_t{0};
    sub.shift = Set4(h0 & 0x08 ? minus : kPlusOnes, h0 & 0x80 ? minus : kPlusOnes,
                     h1 & 0x08 ? minus : kPlusOnes, h1 & 0x80 ? minus : kPlusOnes);
    return sub;
  }
};

// ---- Ternary types: unsigned digits 0..2, minus the block sums -------------------------------

struct TernaryDigits {
  alignas(32) uint8_t q[kQK_K];
  float d;
};

// Trit n (0 = most significant) of each byte of v: (byte·3^n mod 256)·3 >> 8.
inline __m256i Trits(__m256i v, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const __m256i lo = _mm256_mullo_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x00FF)),
                                        _mm256_set1_epi16(kPow3[n]));
  const __m256i hi = _mm256_mullo_epi16(_mm256_srli_epi16(v, 8), _mm256_set1_epi16(kPow3[n]));
  // byte·3^n mod 256, then ·3 >> 8 per byte (16-bit lanes hold one byte each).
  const __m256i lo_t = _mm256_srli_epi16(
      _mm256_mullo_epi16(_mm256_and_si256(lo, _mm256_set1_epi16(0x00FF)), _mm256_set1_epi16(3)), 8);
  const __m256i hi_t = _mm256_srli_epi16(
      _mm256_mullo_epi16(_mm256_and_si256(hi, _mm256_set1_epi16(0x00FF)), _mm256_set1_epi16(3)), 8);
  return _mm256_or_si256(lo_t, _mm256_slli_epi16(hi_t, 8));
}

struct Tq1Decoder {
  using Block = BlockTq1_0;
  static void Decode(const Block& b, TernaryDigits* t) {
    t->d = Fp16ToF32(b.d);
    const __m256i first = Load32(b.qs);
    for (int n = 0; n < 5; ++n) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(t->q + 32 * n), Trits(first, n));
    }
    // Bytes 32..47 twice (elements 160 + 16n + m for trit n of byte m).
    const __m128i rest = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 32));
    const __m256i rest2 = _mm256_set_m128i(rest, rest);
    alignas(32) uint8_t digits[5][32];
    for (int n = 0; n < 5; ++n) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(digits[n]), Trits(rest2, n));
    }
    for (int n = 0; n < 5; ++n) std::memcpy(t->q + 160 + 16 * n, digits[n], 16);
    for (int n = 0; n < 4; ++n) {
      for (int j = 0; j < 4; ++j) {
        const uint8_t byte = static_cast<uint8_t>(b.qh[j] * (n == 0   ? 1
                                                             : n == 1 ? 3
                                                             : n == 2 ? 9
                                                                      : 27));
        t->q[240 + 4 * n + j] = static_cast<uint8_t>((static_cast<uint16_t>(byte) * 3) >> 8);
      }
    }
  }
};

struct Tq2Decoder {
  using Block = BlockTq2_0;
  static void Decode(const Block& b, TernaryDigits* t) {
    t->d = Fp16ToF32(b.d);
    const __m256i three = _mm256_set1_epi8(3);
    for (int j = 0; j < 2; ++j) {
      const __m256i v = Load32(b.qs + 32 * j);
      for (int l = 0; l < 4; ++l) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(t->q + 128 * j + 32 * l),
                           _mm256_and_si256(_mm256_srli_epi16(v, 2 * l), three));
      }
    }
  }
};

template <class D>
struct TernaryKernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    using Block = typename D::Block;
    const int64_t nb = n / kQK_K;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_setzero_ps();
    TernaryDigits t[NR];
    for (int64_t b = 0; b < nb; ++b) {
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const Block* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(Block));
        D::Decode(*blk, &t[r]);
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* a = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
        // Lane l: bsums 2l and 2l + 1 (the activations of elements 32l..32l + 31).
        const __m256i sums = _mm256_madd_epi16(Load32(a->bsums), ones);
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          __m256i isum = _mm256_setzero_si256();
          for (int ib = 0; ib < kQK_K / kQK; ++ib) {
            const __m256i pairs =
                _mm256_maddubs_epi16(Load32(t[r].q + ib * kQK), Load32(a->qs + ib * kQK));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, ones));
          }
          isum = _mm256_sub_epi32(isum, sums);
          acc[r][c] =
              _mm256_fmadd_ps(_mm256_set1_ps(a->d * t[r].d), _mm256_cvtepi32_ps(isum), acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = ReduceAdd(acc[r][c]);
  }
};

}  // namespace

// The ternary types: tiles of 2 rows x 4 tokens, as the grid types'.
void FillGridsAvx2(TypeTraits& traits) {
  if (grids::InstallGridKernel<Iq2XxsDecoder, Iq2XsDecoder, Iq2SDecoder, Iq3XxsDecoder, Iq3SDecoder,
                               Iq1SDecoder, Iq1MDecoder>(traits)) {
    return;
  }
  if (traits.type == GgmlType::kTq1_0) simd::Install<TernaryKernel<Tq1Decoder>, 2, 4>(traits);
  if (traits.type == GgmlType::kTq2_0) simd::Install<TernaryKernel<Tq2Decoder>, 2, 4>(traits);
}

}  // namespace shardlm::internal
