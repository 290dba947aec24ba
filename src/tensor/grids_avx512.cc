// AVX-512 kernels of the grid i-quants (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S)
// against Q8_K activations. Registered by kernels_avx512.cc.
//
// The shared tile kernel (grid_kernel_inl.h: one decode of a row's super-block per tile, the
// generic kernels' integer lanes and float order, so the results are bitwise theirs) with
// decoders that use what AVX-512 adds: signs kept as a mask (one bit per element) that negates
// the activations with one masked subtraction, the 7-bit sign codes turned into that mask
// without a table, and two decoded sub-blocks multiplied per 512-bit step (IQ1_M's pp512 went
// 1.5x, IQ2_XS's 1.2x when they did). Decode (one row, one token) has its own path per type,
// DotSuperBlock, which takes a super-block's indices, signs and scales in vectors at once
// (Qwen3-0.6B tg, 2 threads: IQ2_XS 1.56x, IQ3_XXS and IQ3_S 1.4x, IQ2_XXS and IQ2_S 1.25x,
// IQ1_M 1.17x, IQ1_S 1.07x with its header from one register).
#include <cstring>

#include "tensor/grid_kernel_inl.h"
#include "tensor/intrinsics.h"
#include "tensor/iquant_grids.h"
#include "tensor/quant_blocks.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

using grids::PairSums;
using grids::Set4;
using grids::Shift;
using grids::Word;

// The 32 sign bits of four groups' 7-bit codes (code l in bits 7l..7l+6 of `codes`): each
// code's bits in a byte, and bit 7 of the byte the parity that makes its negatives even. (A bit
// deposit is fast on every AVX-512 CPU; the AVX2 kernels avoid it: microcoded before Zen 3.)
uint32_t EvenSignMask(uint32_t codes) {
  const uint32_t spread = _pdep_u32(codes, 0x7F7F7F7Fu);
  uint32_t parity = spread ^ (spread >> 4);
  parity ^= parity >> 2;
  parity ^= parity >> 1;
  return spread | ((parity & 0x01010101u) << 7);
}

// Four 8-wide grid entries at the int32 indices `idx`.
__m256i Gather4(const uint64_t* grid, __m128i idx) {
  return _mm256_i32gather_epi64(reinterpret_cast<const long long*>(grid), idx, 8);
}
// (Scalar loads, Set4, are faster on this machine (Zen 5) than a 4-entry gather wherever the
// indices come cheaply: IQ2_XXS, IQ2_XS; in the tiles the gathers win where computing the
// indices in vectors saves more: IQ2_S, and the 8-entry ones of IQ3. In decode, whose
// DotSuperBlock computes a super-block's indices in vectors, scalar loads beat the gathers for
// every type: IQ3_XXS 1.37x with them against 1.0x with one 16-entry gather per pair, IQ1_M
// 1.17x against an 8-entry gather, IQ2_XXS 27 -> 21 t/s when it tried one.)
// Eight 4-wide grid entries at the int32 indices `idx`.
__m256i Gather8(const uint32_t* grid, __m256i idx) {
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(grid), idx, 4);
}

__m128i Bytes4(const uint8_t* p) {
  return _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(Word(p))));
}
__m256i Bytes8(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(w)));
}

// One sub-block of 32: magnitudes, the mask of negative values, and (IQ1_M) the mask of the
// negative 1/8 shifts, one bit per pair of elements.
struct SubBlock {
  __m256i mag;
  __mmask32 neg;
  __mmask16 shift_neg;
};

// Two sub-blocks per 512-bit step (the tiles' pairs, the IQ1 decode paths): each multiply-add
// on twice the elements, the two halves' int32 lanes added at the end (integers: the same sums
// as one sub-block at a time, the generic kernels' lanes).
//
// The scales of sub-blocks ib, ib + 1 from a vector whose first 16 int16 lanes hold the 16
// scales (of 16 elements each): 128-bit lane k holds scale 2·ib + k, 8 times.
__m512i PairScales(__m512i scales16, int ib) {
  const __m512i lane_scale =
      _mm512_set_epi64(0x0003000300030003, 0x0003000300030003, 0x0002000200020002,
                       0x0002000200020002, 0x0001000100010001, 0x0001000100010001, 0, 0);
  return _mm512_permutexvar_epi16(
      _mm512_add_epi16(lane_scale, _mm512_set1_epi16(static_cast<int16_t>(2 * ib))), scales16);
}
// The int32 lanes of magnitudes `mag` with signs `neg` against activations `a`.
__m512i PairDot(__m512i mag, __mmask64 neg, __m512i a, __m512i scales) {
  const __m512i signed_a = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
  return _mm512_madd_epi16(_mm512_maddubs_epi16(mag, signed_a), scales);
}
// The two sub-blocks' lanes added: the 8 lanes of one.
__m256i FoldHalves(__m512i lanes) {
  return _mm256_add_epi32(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64(lanes, 1));
}

// What every AVX-512 decoder gives the tile kernel (grid_kernel_inl.h): its sub-block type and
// how a sub-block meets a row of activations: the mask negates them (one masked subtraction),
// vpmaddubsw multiplies by the magnitudes, vpmaddwd by the scales widens to exact int32 lanes.
struct Avx512Ops {
  using SubBlock = ::shardlm::internal::SubBlock;
  template <Shift kShift>
  static void AddSub(const SubBlock& sub, __m256i a, __m256i scales, PairSums* p) {
    const __m256i signed_a = _mm256_mask_sub_epi8(a, sub.neg, _mm256_setzero_si256(), a);
    const __m256i pairs = _mm256_maddubs_epi16(sub.mag, signed_a);
    p->isum = _mm256_add_epi32(p->isum, _mm256_madd_epi16(pairs, scales));
    if constexpr (kShift == Shift::kElements) {
      // The shift's sign goes on the scales (per row and sub-block) instead of the activations
      // (per pair): the pair sums of a token's activations serve both rows of a tile, the
      // signed scales all its tokens, and the int32 lanes are the same.
      const __m256i a_pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), a);
      const __m256i signed_scales =
          _mm256_mask_sub_epi16(scales, sub.shift_neg, _mm256_setzero_si256(), scales);
      p->shift_isum = _mm256_add_epi32(p->shift_isum, _mm256_madd_epi16(a_pairs, signed_scales));
    }
  }

  // Tiles: two sub-blocks per step (grid_kernel_inl.h's HasPairTiles).
  struct Pair {
    __m512i mag, scales;
    __m512i shift_scales;  // IQ1_M: the scales with the shift's sign per pair of elements
    __mmask64 neg;
  };
  struct PairAcc {
    __m512i isum = _mm512_setzero_si512(), shift_isum = _mm512_setzero_si512();
  };
  // A pair from its parts: `shift_neg` negates the scales per pair of elements (IQ1_M).
  static Pair PairOf(__m512i mag, __mmask64 neg, __m512i scales, __mmask32 shift_neg) {
    return {mag, scales, _mm512_mask_sub_epi16(scales, shift_neg, _mm512_setzero_si512(), scales),
            neg};
  }
  // IQ1's signed entries (−1, 0, 1) as a pair.
  static Pair SignedPair(__m512i q, __m512i scales, __mmask32 shift_neg) {
    return PairOf(_mm512_abs_epi8(q), _mm512_movepi8_mask(q), scales, shift_neg);
  }
  // The header's 16 scales in the first 16 int16 lanes (PairScales' input).
  static __m512i HeaderScales(const grids::Header& h) {
    return _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h.scale16)));
  }
  static Pair MakePair(const grids::Header& h, const SubBlock& lo, const SubBlock& hi, int ib) {
    return PairOf(_mm512_inserti64x4(_mm512_castsi256_si512(lo.mag), hi.mag, 1),
                  lo.neg | (static_cast<uint64_t>(hi.neg) << 32), PairScales(HeaderScales(h), ib),
                  lo.shift_neg | (static_cast<uint32_t>(hi.shift_neg) << 16));
  }
  static __m512i PairActs(const BlockQ8_K& a, int ib) {
    return _mm512_loadu_si512(a.qs + ib * kQK);
  }
  template <Shift kShift>
  static void AddPair(const Pair& q, __m512i a, PairAcc* acc) {
    acc->isum = _mm512_add_epi32(acc->isum, PairDot(q.mag, q.neg, a, q.scales));
    if constexpr (kShift == Shift::kElements) {
      const __m512i a_pairs = _mm512_maddubs_epi16(_mm512_set1_epi8(1), a);
      acc->shift_isum =
          _mm512_add_epi32(acc->shift_isum, _mm512_madd_epi16(a_pairs, q.shift_scales));
    }
  }
  static void Fold(const PairAcc& acc, PairSums* p) {
    p->isum = FoldHalves(acc.isum);
    p->shift_isum = FoldHalves(acc.shift_isum);
  }
  // A decode path's super-block: pair_of(ib) for sub-blocks ib, ib + 1 against the activations.
  template <Shift kShift, class PairOfSubBlocks>
  static void AddPairs(const BlockQ8_K& a, PairSums* p, PairOfSubBlocks pair_of) {
    PairAcc acc;
    for (int ib = 0; ib < kQK_K / kQK; ib += 2) AddPair<kShift>(pair_of(ib), PairActs(a, ib), &acc);
    Fold(acc, p);
  }
};

// The decode paths of the other grid types (DotSuperBlock: one row, one token) take a
// super-block's fields in vectors at once: its grid indices are masked in one register and
// read back from the stack for the scalar grid loads, its 32 sign codes become the sign bytes
// in one register, its 16 scales come from one register; then two sub-blocks per step as the
// tiles' pairs. Per sub-block that leaves the four index and four grid loads of the scalar path
// and no scalar bit arithmetic.
//
// Lane g of 32 int16 lanes holds g: the group whose index bits a lane computes.
__m512i GroupLanes() {
  return _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14,
                          13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}
// 32 groups' grid indices: byte g of `low`, or'ed with `high`'s lane g (bits 8 and up).
void StoreIndices(const uint8_t* low, __m512i high, uint16_t idx[32]) {
  _mm512_storeu_si512(
      idx,
      _mm512_or_si512(
          _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(low))), high));
}

// Eight 8-wide grid entries (two sub-blocks) by scalar loads: groups 0-3 at indices lo[0..3],
// groups 4-7 at hi[0..3].
template <class Index>
__m512i Entries8(const uint64_t* grid, const Index* lo, const Index* hi) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(Set4(grid[lo[0]], grid[lo[1]], grid[lo[2]], grid[lo[3]])),
      Set4(grid[hi[0]], grid[hi[1]], grid[hi[2]], grid[hi[3]]), 1);
}

// The 32 groups' sign bytes from their 7-bit codes (int16 lanes of `codes`), bit 7 the parity
// that makes each group's negatives even (EvenSignMask's bytes): the masks of the four pairs of
// sub-blocks, 64 bits each.
void EvenSignMasks(__m512i codes, uint64_t masks[4]) {
  __m512i parity = _mm512_xor_si512(codes, _mm512_srli_epi16(codes, 4));
  parity = _mm512_xor_si512(parity, _mm512_srli_epi16(parity, 2));
  parity = _mm512_xor_si512(parity, _mm512_srli_epi16(parity, 1));
  const __m512i bytes =
      _mm512_or_si512(codes, _mm512_slli_epi16(_mm512_and_si512(parity, _mm512_set1_epi16(1)), 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(masks), _mm512_cvtepi16_epi8(bytes));
}

// The header's 16 scales (grid_kernel_inl.h) as PairScales' input.
__m512i Scales512(__m256i scales16) { return _mm512_castsi256_si512(scales16); }

// IQ2_XXS / IQ3_XXS: per sub-block a word of four 7-bit sign codes (bits 7l..7l+6) and the
// scale in bits 28-31; `words` holds the super-block's eight. The masks of the pairs of
// sub-blocks, as EvenSignMasks.
void SignWordMasks(__m256i words, uint64_t masks[4]) {
  // Code l of word ib into 32-bit lane 4·ib + l (words 0-3, then 4-7).
  const __m512i word = _mm512_castsi256_si512(words);
  const __m512i of_lane = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i shift = _mm512_set_epi32(21, 14, 7, 0, 21, 14, 7, 0, 21, 14, 7, 0, 21, 14, 7, 0);
  const __m512i code = _mm512_set1_epi32(0x7F);
  const __m512i lo =
      _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(of_lane, word), shift), code);
  const __m512i hi = _mm512_and_si512(
      _mm512_srlv_epi32(
          _mm512_permutexvar_epi32(_mm512_add_epi32(of_lane, _mm512_set1_epi32(4)), word), shift),
      code);
  EvenSignMasks(_mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(lo)),
                                   _mm512_cvtepi32_epi16(hi), 1),
                masks);
}
// Sixteen 4-wide grid entries (two sub-blocks) at the indices idx[0..15], by scalar loads.
template <class Index>
__m512i Entries16(const uint32_t* grid, const Index* idx) {
  const auto two = [&](int k) { return grids::Pair(grid[idx[k]], grid[idx[k + 1]]); };
  return _mm512_inserti64x4(_mm512_castsi256_si512(Set4(two(0), two(2), two(4), two(6))),
                            Set4(two(8), two(10), two(12), two(14)), 1);
}

// IQ2_S / IQ3_S keep a sign bit per element: the mask of sub-blocks ib, ib + 1 is 8 of its bytes.
uint64_t SignBytes(const uint8_t* signs, int ib) {
  uint64_t mask;
  std::memcpy(&mask, signs + 4 * ib, sizeof(mask));
  return mask;
}

struct Iq2XxsDecoder : Avx512Ops {
  using Block = BlockIq2Xxs;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(b.qs + 4 * ib);
    return {Set4(kIq2XxsGrid[bytes[0]], kIq2XxsGrid[bytes[1]], kIq2XxsGrid[bytes[2]],
                 kIq2XxsGrid[bytes[3]]),
            EvenSignMask(Word(bytes + 4)), 0};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    // Per sub-block 8 bytes: the four groups' indices, then the word of signs and scale.
    const __m256i words = _mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_loadu_si512(b.qs), 32));
    uint64_t neg[4];
    SignWordMasks(words, neg);
    const __m512i scales = Scales512(grids::WordScales(words));
    const auto* idx = reinterpret_cast<const uint8_t*>(b.qs);
    AddPairs<Shift::kNone>(a, p, [&](int ib) {
      return PairOf(Entries8(kIq2XxsGrid.data(), idx + 8 * ib, idx + 8 * ib + 8), neg[ib / 2],
                    PairScales(scales, ib), 0);
    });
  }
};

struct Iq2XsDecoder : Avx512Ops {
  using Block = BlockIq2Xs;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) {
    uint16_t q[4];  // the block is packed: its uint16 fields may be unaligned
    std::memcpy(q, b.qs + 4 * ib, sizeof(q));
    const uint32_t codes =
        (q[0] >> 9) | ((q[1] >> 9) << 7) | ((q[2] >> 9) << 14) | ((q[3] >> 9) << 21);
    return {Set4(kIq2XsGrid[q[0] & 511], kIq2XsGrid[q[1] & 511], kIq2XsGrid[q[2] & 511],
                 kIq2XsGrid[q[3] & 511]),
            EvenSignMask(codes), 0};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    const __m512i q = _mm512_loadu_si512(b.qs);  // per group: 9-bit index, 7-bit sign code
    uint16_t idx[kQK_K / 8];
    _mm512_storeu_si512(idx, _mm512_and_si512(q, _mm512_set1_epi16(511)));
    uint64_t neg[4];
    EvenSignMasks(_mm512_srli_epi16(q, 9), neg);
    const __m512i scales = Scales512(grids::NibbleScales(b.scales));
    AddPairs<Shift::kNone>(a, p, [&](int ib) {
      return PairOf(Entries8(kIq2XsGrid.data(), idx + 4 * ib, idx + 4 * ib + 4), neg[ib / 2],
                    PairScales(scales, ib), 0);
    });
  }
};

struct Iq2SDecoder : Avx512Ops {
  using Block = BlockIq2S;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) {
    // Index bits 8-9 of group l: bits 2l, 2l + 1 of qh.
    const __m128i high =
        _mm_and_si128(_mm_sllv_epi32(_mm_set1_epi32(b.qh[ib]), _mm_setr_epi32(8, 6, 4, 2)),
                      _mm_set1_epi32(0x300));
    const __m128i idx = _mm_or_si128(Bytes4(b.qs + 4 * ib), high);
    return {Gather4(kIq2SGrid.data(), idx), Word(b.qs + kQK_K / 8 + 4 * ib), 0};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    // Group g's index: byte g of qs, bits 8-9 from bits 2·(g%4) of qh[g/4].
    uint64_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    const __m512i g = GroupLanes();
    const __m512i qh_of_group = _mm512_permutexvar_epi16(
        _mm512_srli_epi16(g, 2),
        _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(qh)))));
    // (qh >> 2·(g % 4)) << 8 as one shift left by 8 − 2·(g % 4).
    const __m512i left = _mm512_sub_epi16(
        _mm512_set1_epi16(8), _mm512_slli_epi16(_mm512_and_si512(g, _mm512_set1_epi16(3)), 1));
    uint16_t idx[kQK_K / 8];
    StoreIndices(b.qs,
                 _mm512_and_si512(_mm512_sllv_epi16(qh_of_group, left), _mm512_set1_epi16(0x300)),
                 idx);
    const __m512i scales = Scales512(grids::NibbleScales(b.scales));
    AddPairs<Shift::kNone>(a, p, [&](int ib) {
      return PairOf(Entries8(kIq2SGrid.data(), idx + 4 * ib, idx + 4 * ib + 4),
                    SignBytes(b.qs + kQK_K / 8, ib), PairScales(scales, ib), 0);
    });
  }
};

struct Iq3XxsDecoder : Avx512Ops {
  using Block = BlockIq3Xxs;
  static constexpr float kFactor = 0.25f;
  static SubBlock Sub(const Block& b, int ib) {
    return {Gather8(kIq3XxsGrid.data(), Bytes8(b.qs + 8 * ib)),
            EvenSignMask(Word(b.qs + kQK_K / 4 + 4 * ib)), 0};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + kQK_K / 4));
    uint64_t neg[4];
    SignWordMasks(words, neg);
    const __m512i scales = Scales512(grids::WordScales(words));
    AddPairs<Shift::kNone>(a, p, [&](int ib) {
      return PairOf(Entries16(kIq3XxsGrid.data(), b.qs + 8 * ib), neg[ib / 2],
                    PairScales(scales, ib), 0);
    });
  }
};

struct Iq3SDecoder : Avx512Ops {
  using Block = BlockIq3S;
  static constexpr float kFactor = 1.0f;
  static SubBlock Sub(const Block& b, int ib) {
    // Index bit 8 of entry k: bit k of qh.
    const __m256i high = _mm256_and_si256(
        _mm256_sllv_epi32(_mm256_set1_epi32(b.qh[ib]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)),
        _mm256_set1_epi32(256));
    const __m256i idx = _mm256_or_si256(Bytes8(b.qs + 8 * ib), high);
    return {Gather8(kIq3SGrid.data(), idx), Word(b.signs + 4 * ib), 0};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    const __m512i scales = Scales512(grids::Iq3SScales(b.scales));
    // Entry j's index: byte j of qs, bit 8 from bit j % 8 of qh[j / 8].
    uint64_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    const __m512i qh_words =
        _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(qh))));
    const __m512i j = GroupLanes();
    const __m512i bit = _mm512_and_si512(j, _mm512_set1_epi16(7));
    uint16_t idx[kQK_K / 4];
    for (int half = 0; half < 2; ++half) {
      const __m512i qh_of_entry = _mm512_permutexvar_epi16(
          _mm512_add_epi16(_mm512_srli_epi16(j, 3),
                           _mm512_set1_epi16(static_cast<int16_t>(4 * half))),
          qh_words);
      StoreIndices(
          b.qs + 32 * half,
          _mm512_slli_epi16(
              _mm512_and_si512(_mm512_srlv_epi16(qh_of_entry, bit), _mm512_set1_epi16(1)), 8),
          idx + 32 * half);
    }
    AddPairs<Shift::kNone>(a, p, [&](int ib) {
      return PairOf(Entries16(kIq3SGrid.data(), idx + 8 * ib), SignBytes(b.signs, ib),
                    PairScales(scales, ib), 0);
    });
  }
};

// IQ1 entries are signed (−1, 0, 1): magnitudes and the mask of their negatives.
SubBlock SignedSub(__m256i q, __mmask16 shift_neg) {
  return {_mm256_abs_epi8(q), _mm256_movepi8_mask(q), shift_neg};
}

struct Iq1SDecoder : Avx512Ops {
  using Block = BlockIq1S;
  static constexpr Shift kShift = Shift::kBlockSums;
  static constexpr float kFactor = 1.0f;
  static SubBlock Sub(const Block& b, int ib) { return SignedSub(grids::Iq1SEntries(b, ib), 0); }

  // Decode: two sub-blocks per step, as a tile's pairs; the header's scales and signed shift
  // scales from one register, the shift from them and the activations' sums after the lanes.
  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh));
    const __m512i scales = Scales512(grids::Iq1SScales(qh, h));
    // Group g's index: qs[g], bits 8-10 from bits 3·(g % 4) of qh[g / 4].
    const __m512i g = GroupLanes();
    const __m512i qh_of_group =
        _mm512_permutexvar_epi16(_mm512_srli_epi16(g, 2), _mm512_castsi128_si512(qh));
    const __m512i field =
        _mm512_mullo_epi16(_mm512_and_si512(g, _mm512_set1_epi16(3)), _mm512_set1_epi16(3));
    uint16_t idx[kQK_K / 8];
    StoreIndices(
        b.qs,
        _mm512_slli_epi16(
            _mm512_and_si512(_mm512_srlv_epi16(qh_of_group, field), _mm512_set1_epi16(7)), 8),
        idx);
    AddPairs<Shift::kNone>(a, p, [&](int ib) {
      return SignedPair(Entries8(kIq1SGrid.data(), idx + 4 * ib, idx + 4 * ib + 4),
                        PairScales(scales, ib), 0);
    });
  }
};

struct Iq1MDecoder : Avx512Ops {
  using Block = BlockIq1M;
  static constexpr Shift kShift = Shift::kElements;
  static constexpr float kFactor = 1.0f;
  static SubBlock Sub(const Block& b, int ib) {
    // Group l's nibble: bits 4l..4l+3 of the two qh bytes; its bit 3 is the shift sign, which
    // covers the group's 8 elements: 4 pairs.
    const uint32_t nibbles = static_cast<uint32_t>(b.qh[2 * ib] | (b.qh[2 * ib + 1] << 8));
    const uint32_t shift_neg = _pdep_u32(_pext_u32(nibbles, 0x8888u), 0x1111u) * 0xFu;
    return SignedSub(grids::Iq1MEntries(b, ib), static_cast<__mmask16>(shift_neg));
  }

  // Decode (one row, one token): two sub-blocks per step, as a tile's pairs, the 16 scales
  // from one register (grids::Iq1MScales) instead of the header's scalar loop.
  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    const __m512i scales = Scales512(grids::Iq1MScales(b, h));
    // Group g's index: qs[g], bits 8-10 from bits 0-2 of nibble g of qh.
    const __m512i g = GroupLanes();
    const __m512i nibble = _mm512_srlv_epi16(
        _mm512_permutexvar_epi16(_mm512_srli_epi16(g, 1),
                                 _mm512_castsi256_si512(_mm256_cvtepu8_epi16(
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh))))),
        _mm512_slli_epi16(_mm512_and_si512(g, _mm512_set1_epi16(1)), 2));
    uint16_t idx[kQK_K / 8];
    StoreIndices(b.qs, _mm512_slli_epi16(_mm512_and_si512(nibble, _mm512_set1_epi16(7)), 8), idx);
    AddPairs<Shift::kElements>(a, p, [&](int ib) {
      // Nibble g's bit 3: the shift sign of group g (4 pairs of elements).
      const uint32_t nibbles = Word(b.qh + 2 * ib);
      const __mmask32 shift_neg = _pdep_u32(_pext_u32(nibbles, 0x88888888u), 0x11111111u) * 0xFu;
      return SignedPair(Entries8(kIq1SGrid.data(), idx + 4 * ib, idx + 4 * ib + 4),
                        PairScales(scales, ib), shift_neg);
    });
  }
};

}  // namespace

// Tiles of 2 rows x 16 tokens: a row's decoded super-block serves 16 tokens. With 32 vector
// registers the wider tiles pay: Qwen3-0.6B pp512 (2 threads) IQ2_XS 102 t/s at 2 x 4, 129-144
// at 2 x 8, 164-168 at 2 x 16; IQ1_M 65-71, 80-90, 100-101. The AVX2 kernels (16 registers)
// take 2 x 8.
void FillGridsAvx512(TypeTraits& traits) {
  grids::InstallGridKernel<Iq2XxsDecoder, Iq2XsDecoder, Iq2SDecoder, Iq3XxsDecoder, Iq3SDecoder,
                           Iq1SDecoder, Iq1MDecoder, 16>(traits);
}

}  // namespace shardlm::internal
