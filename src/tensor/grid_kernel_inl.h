// Internal to the grid kernel files (grids_avx2.cc, grids_avx512.cc, compiled with at least
// the avx2 flags): what their kernels share. A super-block's header (d and the odd integer
// scale of each 16 elements) read the same way for every ISA, and the tile kernel: one decode
// of each row's super-block per tile, exact int32 lanes per super-block, one fused
// multiply-add by d_w·d_a per super-block and the type's factor at the end, the generic
// kernels' order (kernels_generic_grids.cc), so every ISA's results are bitwise theirs. The
// ISA files bring the decoders: how a sub-block's entries and signs are fetched and applied.
//
// Anonymous namespace: each including file gets its own copies, compiled for its ISA (no
// other translation unit can be linked against these bodies).
#pragma once

#include <cstring>

#include "tensor/iquant_grids.h"
#include "tensor/quant_blocks.h"
#include "tensor/simd_avx2_inl.h"
#include "tensor/simd_tile.h"
#include "tensor/type_traits.h"

namespace shardlm::internal::grids {
namespace {

inline uint32_t Word(const void* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// Four 8-byte grid entries (or pairs of 4-byte ones) by scalar loads, entry 0 lowest.
inline __m256i Set4(uint64_t e0, uint64_t e1, uint64_t e2, uint64_t e3) {
  return _mm256_set_epi64x(static_cast<int64_t>(e3), static_cast<int64_t>(e2),
                           static_cast<int64_t>(e1), static_cast<int64_t>(e0));
}

// The four grid entries (values −1, 0, 1) of IQ1 sub-block ib, and IQ1_S's indices of them:
// IQ1_S keeps their index bits 8-10 in its qh word, IQ1_M in a nibble per group.
struct Indices4 {
  uint32_t i[4];
};
inline Indices4 Iq1SIndices(const BlockIq1S& b, int ib) {
  const uint32_t qh = b.qh[ib];
  const uint8_t* qs = b.qs + 4 * ib;
  return {{qs[0] | ((qh << 8) & 0x700), qs[1] | ((qh << 5) & 0x700), qs[2] | ((qh << 2) & 0x700),
           qs[3] | ((qh >> 1) & 0x700)}};
}
inline __m256i Iq1SEntries(const BlockIq1S& b, int ib) {
  const Indices4 x = Iq1SIndices(b, ib);
  return Set4(kIq1SGrid[x.i[0]], kIq1SGrid[x.i[1]], kIq1SGrid[x.i[2]], kIq1SGrid[x.i[3]]);
}
inline Indices4 Iq1MIndices(const BlockIq1M& b, int ib) {
  const uint8_t* qs = b.qs + 4 * ib;
  const uint32_t h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
  return {{qs[0] | ((h0 << 8) & 0x700), qs[1] | ((h0 << 4) & 0x700), qs[2] | ((h1 << 8) & 0x700),
           qs[3] | ((h1 << 4) & 0x700)}};
}
inline __m256i Iq1MEntries(const BlockIq1M& b, int ib) {
  const Indices4 x = Iq1MIndices(b, ib);
  return Set4(kIq1SGrid[x.i[0]], kIq1SGrid[x.i[1]], kIq1SGrid[x.i[2]], kIq1SGrid[x.i[3]]);
}

// Two 4-wide entries as one 8-byte group.
inline uint64_t Pair(uint32_t lo, uint32_t hi) { return lo | (uint64_t{hi} << 32); }

// A super-block's header as the dot product sees it: d and the odd scale of each 16 elements.
struct Header {
  int16_t scale16[16];
  float d;
};

inline void SetScale32(Header* h, int ib, int scale) {
  h->scale16[2 * ib] = h->scale16[2 * ib + 1] = static_cast<int16_t>(scale);
}

// IQ2_XS / IQ2_S: a nibble per 16 elements.
inline void SetNibbleScales(const uint8_t* scales, Header* h) {
  for (int ib = 0; ib < 8; ++ib) {
    h->scale16[2 * ib] = static_cast<int16_t>(2 * (scales[ib] & 0xF) + 1);
    h->scale16[2 * ib + 1] = static_cast<int16_t>(2 * (scales[ib] >> 4) + 1);
  }
}

inline void Head(const BlockIq2Xxs& b, Header* h) {
  h->d = avx2::Fp16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) SetScale32(h, ib, 2 * (b.qs[4 * ib + 3] >> 12) + 1);
}
inline void Head(const BlockIq2Xs& b, Header* h) {
  h->d = avx2::Fp16ToF32(b.d);
  SetNibbleScales(b.scales, h);
}
inline void Head(const BlockIq2S& b, Header* h) {
  h->d = avx2::Fp16ToF32(b.d);
  SetNibbleScales(b.scales, h);
}
inline void Head(const BlockIq3Xxs& b, Header* h) {
  h->d = avx2::Fp16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    SetScale32(h, ib, 2 * static_cast<int>(Word(b.qs + kQK_K / 4 + 4 * ib) >> 28) + 1);
  }
}
inline void Head(const BlockIq3S& b, Header* h) {
  h->d = avx2::Fp16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    SetScale32(h, ib, 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1);
  }
}
inline void Head(const BlockIq1S& b, Header* h) {
  h->d = avx2::Fp16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) SetScale32(h, ib, 2 * ((b.qh[ib] >> 12) & 7) + 1);
}
// IQ1_M's d: the top nibbles of its four scale words.
inline float Iq1MD(const uint16_t sc[4]) {
  return avx2::Fp16ToF32(static_cast<fp16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                             ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
}
inline void Head(const BlockIq1M& b, Header* h) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof(sc));
  h->d = Iq1MD(sc);
  for (int ib = 0; ib < 8; ++ib) {
    h->scale16[2 * ib] = static_cast<int16_t>(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
    h->scale16[2 * ib + 1] = static_cast<int16_t>(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
  }
}

// The decode paths' header in registers (both ISAs): the 16 scales 2·s + 1 as int16 lanes.
inline __m256i OddScales(__m256i s) {
  return _mm256_add_epi16(_mm256_slli_epi16(s, 1), _mm256_set1_epi16(1));
}
// The nibbles of `n` bytes (low nibble first) as 2·n int16 lanes.
inline __m256i Nibbles16(uint64_t packed) {
  const __m128i bytes = _mm_cvtsi64_si128(static_cast<long long>(packed));
  const __m128i nibble = _mm_set1_epi8(0xF);
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_and_si128(bytes, nibble),
                                                _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble)));
}
// Two int16 lanes per sub-block from one value per sub-block (8 lanes).
inline __m256i PerSubBlock(__m128i v) {
  return _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v));
}
// IQ2_XS / IQ2_S: a nibble per 16 elements.
inline __m256i NibbleScales(const uint8_t* scales) {
  uint64_t packed;
  std::memcpy(&packed, scales, sizeof(packed));
  return OddScales(Nibbles16(packed));
}
// IQ3_S: a nibble per 32 elements.
inline __m256i Iq3SScales(const uint8_t* scales) {
  return OddScales(PerSubBlock(_mm256_castsi256_si128(Nibbles16(Word(scales)))));
}
// IQ2_XXS / IQ3_XXS: the scale in bits 28-31 of each sub-block's word (dword lanes of `words`).
inline __m256i WordScales(__m256i words) {
  const __m256i s = _mm256_srli_epi32(words, 28);
  return OddScales(_mm256_or_si256(s, _mm256_slli_epi32(s, 16)));
}
// IQ1_S: each sub-block's qh word holds the scale in bits 12-14 (and the shift's sign in bit
// 15); the header's scales.
inline __m256i Iq1SScales(__m128i qh) {
  return OddScales(PerSubBlock(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7))));
}

// IQ1_M: 16 3-bit scales in the low 12 bits of four words (scale i: bits 3·(i % 4).. of word
// i / 4), d in their top nibbles; sets d. Lane i takes word i / 4 (a byte shuffle of the four
// words broadcast), a multiply by 2^(13 − 3·(i % 4)) brings its field to bits 13-15.
inline __m256i Iq1MScales(const BlockIq1M& b, Header* h) {
  uint64_t sc64;
  std::memcpy(&sc64, b.scales, sizeof(sc64));
  uint16_t sc[4];
  std::memcpy(sc, &sc64, sizeof(sc));
  h->d = Iq1MD(sc);
  const __m256i word_of_lane = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4,
                                                5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7);
  const __m256i words =
      _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<int64_t>(sc64)), word_of_lane);
  return OddScales(
      _mm256_srli_epi16(_mm256_mullo_epi16(words, _mm256_set1_epi64x(0x0010008004002000)), 13));
}

// IQ1's values in eighths (the tile kernel's note): from the entries q (−1, 0, 1) and the
// bytes `shift` (−1 where an element's shift is −1/8, +1 where +1/8), 8q + shift: |value| <= 9,
// never 0.
inline __m256i Iq1Eighths(__m256i q, __m256i shift) {
  return _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), q), shift);
}
// IQ1_S: sub-block ib's shift is negative where bit 15 of its qh word is set.
inline __m256i Iq1SShift(const BlockIq1S& b, int ib) {
  return _mm256_set1_epi8(static_cast<char>(1 - ((b.qh[ib] >> 14) & 2)));
}
// The same for the decode paths, from the 8 qh words at once: `shifts` holds sub-block ib's
// shift (±1) in byte 2·ib of both 128-bit lanes (Iq1SShifts), one in-lane broadcast each.
inline __m256i Iq1SShifts(__m128i qh) {
  return _mm256_broadcastsi128_si256(_mm_or_si128(_mm_srai_epi16(qh, 15), _mm_set1_epi16(1)));
}
inline __m256i Iq1SShiftOf(__m256i shifts, int ib) {
  return _mm256_shuffle_epi8(shifts, _mm256_set1_epi8(static_cast<char>(2 * ib)));
}
// IQ1_M: a group's shift is negative where bit 3 of its nibble is set. Sub-block ib's groups
// 4·ib + l have theirs in byte qh[2·ib + l / 2], bit 3 (l even) or 7; `qh16` holds the 16 qh
// bytes in both 128-bit lanes.
inline __m256i Iq1MShift(__m256i qh16, int ib) {
  const __m256i byte_of_element =
      _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1),
                      _mm256_set1_epi8(static_cast<char>(2 * ib)));
  const __m256i bit =
      _mm256_setr_epi8(8, 8, 8, 8, 8, 8, 8, 8, -128, -128, -128, -128, -128, -128, -128, -128, 8, 8,
                       8, 8, 8, 8, 8, 8, -128, -128, -128, -128, -128, -128, -128, -128);
  const __m256i negative =
      _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(qh16, byte_of_element), bit), bit);
  return _mm256_or_si256(negative, _mm256_set1_epi8(1));
}
inline __m256i Iq1MQh16(const BlockIq1M& b) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh)));
}
// The tiles' sub-block ib of each IQ1 type in eighths (each ISA wraps it in its SubBlock).
inline __m256i Iq1SEighths(const BlockIq1S& b, int ib) {
  return Iq1Eighths(Iq1SEntries(b, ib), Iq1SShift(b, ib));
}
inline __m256i Iq1MEighths(const BlockIq1M& b, int ib) {
  return Iq1Eighths(Iq1MEntries(b, ib), Iq1MShift(Iq1MQh16(b), ib));
}

// The activations of sub-block ib.
inline __m256i SubBlockActs(const BlockQ8_K& a, int ib) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + ib * kQK));
}

// The scales of sub-block ib as 16 int16 lanes (the first 8 cover elements 0..15).
inline __m256i Scales(const Header& h, int ib) {
  return _mm256_set_m128i(_mm_set1_epi16(h.scale16[2 * ib + 1]), _mm_set1_epi16(h.scale16[2 * ib]));
}

// One (row, token) pair's running sums: exact int32 lanes per super-block.
struct PairSums {
  __m256i isum;
};

// A decoder with its own path for one row and one token (decode): D::DotSuperBlock(block,
// activations, header, sums) sets the header's d and a super-block's int32 lanes, the same as
// the sub-block path's.
template <class D>
concept HasSuperBlockDot = requires(const typename D::Block& b, const BlockQ8_K& a, Header* h,
                                    PairSums* p) {
  D::DotSuperBlock(b, a, h, p);
};

// An ISA whose tiles take two sub-blocks per step: D::Pair (two sub-blocks with their scales),
// D::MakePair(header, sub-block ib, sub-block ib + 1, ib), D::PairActs(activations, ib),
// D::AddPair(pair, acts, acc) into a D::PairAcc, and D::Fold(acc, sums) giving the
// one-sub-block path's int32 lanes.
template <class D>
concept HasPairTiles = requires {
  typename D::Pair;
  typename D::PairAcc;
};

// The tile kernel of decoder D (an ISA's: D::Block, D::kFactor, D::Sub(block, ib) returning its
// D::SubBlock, D::AddSub(sub, activations, scales, sums); Head(block, header) for the block
// type is above). The IQ1 decoders give their values in eighths (8·grid ± 1, the shift joined
// as an integer) and a factor of 1/8, as the generic kernels do.
template <class D>
struct GridKernel {
  // A row's decoded super-block, kept for the tile's tokens.
  struct Decoded {
    Header h;
    typename D::SubBlock sub[kQK_K / kQK];
  };

  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    using Block = typename D::Block;
    const int64_t nb = n / kQK_K;
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
      acc[r][c] = _mm256_setzero_ps();
    }
    Decoded g[NR];
    constexpr bool kSuperBlockDot = NR == 1 && NC == 1 && HasSuperBlockDot<D>;
    for (int64_t b = 0; b < nb; ++b) {
      PairSums sums[NR][NC];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const Block* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(Block));
        if constexpr (!kSuperBlockDot) Head(*blk, &g[r].h);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) sums[r][c] = {_mm256_setzero_si256()};
      }
      if constexpr (kSuperBlockDot) {
        D::DotSuperBlock(reinterpret_cast<const Block*>(w)[b],
                         reinterpret_cast<const BlockQ8_K*>(act)[b], &g[0].h, &sums[0][0]);
      } else if constexpr (NR == 1 && NC == 1) {
        // One pair (decode): each sub-block straight from the table loads into the dot.
        const Block* blk = reinterpret_cast<const Block*>(w) + b;
        const auto* a = reinterpret_cast<const BlockQ8_K*>(act) + b;
        for (int ib = 0; ib < kQK_K / kQK; ++ib) {
          D::AddSub(D::Sub(*blk, ib), SubBlockActs(*a, ib), Scales(g[0].h, ib), &sums[0][0]);
        }
      } else if constexpr (HasPairTiles<D>) {
        // Token by token, the tile's rows' decoded pairs against its activations: a token's
        // sums stay in registers.
        typename D::Pair pairs[NR][kQK_K / kQK / 2];
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const Block* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
          for (int ib = 0; ib < kQK_K / kQK; ib += 2) {
            pairs[r][ib / 2] = D::MakePair(g[r].h, D::Sub(*blk, ib), D::Sub(*blk, ib + 1), ib);
          }
        }
        for (int c = 0; c < NC; ++c) {
          const auto* a = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
          typename D::PairAcc acc[NR];
          SHARDLM_UNROLL for (int ib = 0; ib < kQK_K / kQK; ib += 2) {
            const auto av = D::PairActs(*a, ib);
            SHARDLM_UNROLL for (int r = 0; r < NR; ++r) D::AddPair(pairs[r][ib / 2], av, &acc[r]);
          }
          SHARDLM_UNROLL for (int r = 0; r < NR; ++r) D::Fold(acc[r], &sums[r][c]);
        }
      } else {
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const Block* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
          for (int ib = 0; ib < kQK_K / kQK; ++ib) g[r].sub[ib] = D::Sub(*blk, ib);
        }
        for (int ib = 0; ib < kQK_K / kQK; ++ib) {
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            const auto* a = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
            const __m256i av = SubBlockActs(*a, ib);
            SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
              D::AddSub(g[r].sub[ib], av, Scales(g[r].h, ib), &sums[r][c]);
            }
          }
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* a = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(g[r].h.d * a->d),
                                      _mm256_cvtepi32_ps(sums[r][c].isum), acc[r][c]);
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
      out[r * out_stride + c] = D::kFactor * avx2::ReduceAdd(acc[r][c]);
    }
  }
};

// Installs, for traits.type, the 2 rows x kTokens tile kernel of that grid type's decoder (a
// row's decoded block, about 0.3 KiB, serves kTokens tokens); false for the other types.
template <class Iq2Xxs, class Iq2Xs, class Iq2S, class Iq3Xxs, class Iq3S, class Iq1S, class Iq1M,
          int kTokens>
bool InstallGridKernel(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kIq2Xxs:
      simd::Install<GridKernel<Iq2Xxs>, 2, kTokens>(traits);
      return true;
    case GgmlType::kIq2Xs:
      simd::Install<GridKernel<Iq2Xs>, 2, kTokens>(traits);
      return true;
    case GgmlType::kIq2S:
      simd::Install<GridKernel<Iq2S>, 2, kTokens>(traits);
      return true;
    case GgmlType::kIq3Xxs:
      simd::Install<GridKernel<Iq3Xxs>, 2, kTokens>(traits);
      return true;
    case GgmlType::kIq3S:
      simd::Install<GridKernel<Iq3S>, 2, kTokens>(traits);
      return true;
    case GgmlType::kIq1S:
      simd::Install<GridKernel<Iq1S>, 2, kTokens>(traits);
      return true;
    case GgmlType::kIq1M:
      simd::Install<GridKernel<Iq1M>, 2, kTokens>(traits);
      return true;
    default:
      return false;
  }
}

}  // namespace
}  // namespace shardlm::internal::grids
