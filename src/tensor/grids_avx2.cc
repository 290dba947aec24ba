// AVX2 kernels of the grid i-quants (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S) and
// the ternary types (TQ1_0, TQ2_0) against Q8_K activations. Registered by kernels_avx2.cc;
// AVX-512 CPUs use them too.
//
// The grid types take the shared tile kernel (grid_kernel_inl.h: one decode of a row's
// super-block per tile, which every token of the tile reuses; llama.cpp's kernels decode a
// block again for every token); this file brings their decoders: grid entries by table loads,
// signs as ±1 bytes from tables; decode (one row, one token) has its own path per type,
// DotSuperBlock, with a super-block's scales, indices and signs in vectors (the first such
// paths, Qwen3-0.6B tg, 2 threads, forced to AVX2 on a Zen 5: IQ3_S 2.0x, IQ1_M 1.77x, IQ2_S
// 1.34x, IQ2_XS 1.25x, IQ2_XXS 1.19x, IQ3_XXS 1.16x, IQ1_S 1.02x), and their scales and sign
// masks kept in registers (AddQuarterBlocks). The IQ1 types count their values in eighths
// (8·grid ± 1: the ±1/8 shift joined to each value), so one dot product per sub-block holds
// both.
// The ternary types keep their unsigned digits 0..2 and subtract the activations' block sums
// per lane instead, as their generic kernel does; the float side is the generic kernels'
// (kernels_generic_grids.cc, kernels_generic_ternary.cc), so the results are bitwise theirs.
// Non-goals: repacked layouts.
#include <array>
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
using grids::Word;

// One sub-block of 32 as two vectors: magnitudes `mag` (unsigned bytes) and `sgn`, whose byte
// signs are the values' (zero where the value is), so value · a = mag · sign(a, sgn).
struct SubBlock {
  __m256i mag, sgn;
};

// What every AVX2 decoder gives the tile kernel (grid_kernel_inl.h): its sub-block type and
// how a sub-block meets a row of activations. vpsignb carries the values' signs onto the
// activations, vpmaddubsw multiplies by the magnitudes (|pair sum| <= 2·62·127 fits int16),
// vpmaddwd by the scales widens to exact int32 lanes.
struct Avx2Ops {
  using SubBlock = ::shardlm::internal::SubBlock;
  static void AddSub(const SubBlock& sub, __m256i a, __m256i scales, PairSums* p) {
    const __m256i pairs = _mm256_maddubs_epi16(sub.mag, _mm256_sign_epi8(a, sub.sgn));
    p->isum = _mm256_add_epi32(p->isum, _mm256_madd_epi16(pairs, scales));
  }
};

// The decode paths (DotSuperBlock: one row, one token) take a super-block's fields in vectors
// at once: the 16 scales and the 8 sub-blocks' 32-bit sign masks each in one register, from
// which a sub-block's scale vector and ±1 sign bytes are one in-lane shuffle each
// (AddQuarterBlocks), and the grid indices computed in registers and read back from the stack
// for the table loads, which broadcast loads and blends merge (Gather4) where the entries are
// 8 bytes. Then sub-block by sub-block as the tiles (the same int32 lanes). The IQ1 types'
// entries carry their own signs; IQ1_S keeps its scalar index arithmetic: a few ALU operations
// per entry, 2-5% faster than the stored indices.

// 16-bit lane i of the result: byte kFirst + i / kPer of `bytes` (whose two 128-bit lanes hold
// the same 16 bytes), high byte zero.
template <int kFirst, int kPer>
inline constexpr auto kLaneBytes = [] {
  std::array<int8_t, 32> ctrl{};
  for (int i = 0; i < 16; ++i) {
    ctrl[2 * i] = static_cast<int8_t>(kFirst + i / kPer);
    ctrl[2 * i + 1] = -128;
  }
  return ctrl;
}();
template <int kFirst, int kPer>
__m256i LaneBytes(__m256i bytes) {
  return _mm256_shuffle_epi8(bytes, Load32(kLaneBytes<kFirst, kPer>.data()));
}

// Bytes each holding a 7-bit sign code with bit 7 set to the parity that makes the group's
// negatives even. Bit 0 of each byte of the fold is that byte's parity: the shifts bring a
// higher byte's bits no lower than bit 4.
inline __m256i WithParityBits(__m256i codes) {
  __m256i parity = _mm256_xor_si256(codes, _mm256_srli_epi16(codes, 4));
  parity = _mm256_xor_si256(parity, _mm256_srli_epi16(parity, 2));
  parity = _mm256_xor_si256(parity, _mm256_srli_epi16(parity, 1));
  return _mm256_or_si256(codes,
                         _mm256_slli_epi16(_mm256_and_si256(parity, _mm256_set1_epi8(1)), 7));
}

// 32 groups' 7-bit sign codes (int16 lanes of `lo`, `hi`) as the four-group sign masks of the
// eight sub-blocks (dword lane ib: sub-block ib's).
inline __m256i EvenSignMasks(__m256i lo, __m256i hi) {
  // packus interleaves the 128-bit lanes; the permute puts the bytes back in order.
  return WithParityBits(_mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi), 0xD8));
}

// Four 8-byte table entries: each a broadcast load (the load unit alone, no shuffle uop),
// merged by blends, which any vector pipe takes; entry 0 lowest.
inline __m256i Gather4(const uint64_t* table, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  const __m256i e0 = _mm256_set1_epi64x(static_cast<int64_t>(table[i0]));
  const __m256i e1 = _mm256_set1_epi64x(static_cast<int64_t>(table[i1]));
  const __m256i e2 = _mm256_set1_epi64x(static_cast<int64_t>(table[i2]));
  const __m256i e3 = _mm256_set1_epi64x(static_cast<int64_t>(table[i3]));
  return _mm256_blend_epi32(_mm256_blend_epi32(e0, e1, 0x0C), _mm256_blend_epi32(e2, e3, 0xC0),
                            0xF0);
}

// IQ2_XXS / IQ3_XXS: per sub-block a word of four 7-bit sign codes (bits 7l..7l + 6, the scale
// above them); `words` holds the eight. Their sign masks (dword lane ib: sub-block ib's), by
// shifts and masks: a bit deposit (pdep) would be microcoded on the AVX2 CPUs before Zen 3.
// (On a Zen 5, where pdep is fast, against a pdep per sub-block: IQ2_XXS decode 1.14x,
// IQ3_XXS 0.90-0.98x.)
inline __m256i SignWordMasks(__m256i words) {
  const __m256i code = _mm256_set1_epi32(0x7F);
  __m256i spread = _mm256_and_si256(words, code);
  for (int l = 1; l < 4; ++l) {
    spread = _mm256_or_si256(
        spread, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(words, 7 * l), code), 8 * l));
  }
  return WithParityBits(spread);
}

// vpshufb controls: byte k of sub-block j's mask (dword j of a 128-bit lane) to the 8 bytes of
// group k (groups 0, 1 in the low lane, 2, 3 in the high one).
inline constexpr auto kMaskBytesOfQuarter = [] {
  std::array<std::array<int8_t, 32>, 4> ctrl{};
  for (int j = 0; j < 4; ++j) {
    for (int i = 0; i < 32; ++i) ctrl[j][i] = static_cast<int8_t>(4 * j + i / 8);
  }
  return ctrl;
}();

// The ±1 bytes of sub-block j's sign mask, from `masks` holding four sub-blocks' masks in both
// 128-bit lanes.
inline __m256i SignsOfLaneMask(__m256i masks, int j) {
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i bytes = _mm256_shuffle_epi8(masks, Load32(kMaskBytesOfQuarter[j].data()));
  return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(1));
}

// 128-bit half h of v in both lanes.
inline __m256i Half(__m256i v, int h) {
  return h ? _mm256_permute2x128_si256(v, v, 0x11) : _mm256_permute2x128_si256(v, v, 0x00);
}

// vpshufb controls: sub-block j's two scales (int16 words 2j, 2j + 1 of a 128-bit lane holding
// four sub-blocks' scale16) to every word of the low and the high lane, the elements 0..15
// and 16..31 the sub-block's pairs keep there.
inline constexpr auto kScalesOfQuarter = [] {
  std::array<std::array<int8_t, 32>, 4> ctrl{};
  for (int j = 0; j < 4; ++j) {
    for (int i = 0; i < 32; ++i) ctrl[j][i] = static_cast<int8_t>(4 * j + 2 * (i / 16) + i % 2);
  }
  return ctrl;
}();

// Sub-blocks 0..7 of a decode path with their scales in a register (`scales`: int16 lane i the
// header's scale16[i]): a sub-block's scale vector is one in-lane shuffle of its half broadcast
// to both lanes, with no store and reload; sub_of(ib) gives the sub-block. Against the scales
// (and sign masks) stored in the header and read back per sub-block, IQ2_XXS decode took 0.88x
// the time per super-block (one thread, L2-resident rows, best of 300).
template <class SubOf>
void AddQuarterBlocks(const BlockQ8_K& a, __m256i scales, PairSums* p, SubOf sub_of) {
  SHARDLM_UNROLL for (int ib = 0; ib < kQK_K / kQK; ++ib) {
    const __m256i scale =
        _mm256_shuffle_epi8(Half(scales, ib / 4), Load32(kScalesOfQuarter[ib % 4].data()));
    const SubBlock sub = sub_of(ib);
    const __m256i pairs =
        _mm256_maddubs_epi16(sub.mag, _mm256_sign_epi8(grids::SubBlockActs(a, ib), sub.sgn));
    p->isum = _mm256_add_epi32(p->isum, _mm256_madd_epi16(pairs, scale));
  }
}

// The types with sign masks (`masks`: dword lane ib sub-block ib's 32 bits): sub-block ib's
// ±1 bytes are one in-lane shuffle of its half of them; grid_of(ib) gives its magnitudes.
template <class GridOf>
void AddQuarterBlocks(const BlockQ8_K& a, __m256i scales, __m256i masks, PairSums* p,
                      GridOf grid_of) {
  AddQuarterBlocks(a, scales, p, [&](int ib) {
    return SubBlock{grid_of(ib), SignsOfLaneMask(Half(masks, ib / 4), ib % 4)};
  });
}

// 16 groups' indices: bytes of `low`, or'ed with `high`'s lanes.
inline void StoreIndices16(const uint8_t* low, __m256i high, uint16_t idx[16]) {
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(idx),
      _mm256_or_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(low))),
                      high));
}

struct Iq2XxsDecoder : Avx2Ops {
  using Block = BlockIq2Xxs;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) {
    const uint32_t idx = Word(b.qs + 4 * ib), codes = Word(b.qs + 4 * ib + 2);
    return {Set4(kIq2XxsGrid[idx & 0xFF], kIq2XxsGrid[(idx >> 8) & 0xFF],
                 kIq2XxsGrid[(idx >> 16) & 0xFF], kIq2XxsGrid[idx >> 24]),
            Set4(kEvenSignBytes[codes & 127], kEvenSignBytes[(codes >> 7) & 127],
                 kEvenSignBytes[(codes >> 14) & 127], kEvenSignBytes[(codes >> 21) & 127])};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = Fp16ToF32(b.d);
    // Per sub-block two dwords: the groups' index bytes, then the word of signs and scale.
    const __m256i odd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
    const __m256i words =
        _mm256_blend_epi32(_mm256_permutevar8x32_epi32(Load32(b.qs), odd),
                           _mm256_permutevar8x32_epi32(Load32(b.qs + 16), odd), 0xF0);
    const auto* bytes = reinterpret_cast<const uint8_t*>(b.qs);
    AddQuarterBlocks(a, grids::WordScales(words), SignWordMasks(words), p, [&](int ib) {
      const uint32_t q = Word(bytes + 8 * ib);
      return Gather4(kIq2XxsGrid.data(), q & 0xFF, (q >> 8) & 0xFF, (q >> 16) & 0xFF, q >> 24);
    });
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
                 kEvenSignBytes[q[3] >> 9])};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = Fp16ToF32(b.d);
    const __m256i q0 = Load32(b.qs), q1 = Load32(b.qs + 16);  // 9-bit index, 7-bit sign code
    uint16_t idx[kQK_K / 8];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx),
                        _mm256_and_si256(q0, _mm256_set1_epi16(511)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + 16),
                        _mm256_and_si256(q1, _mm256_set1_epi16(511)));
    AddQuarterBlocks(a, grids::NibbleScales(b.scales),
                     EvenSignMasks(_mm256_srli_epi16(q0, 9), _mm256_srli_epi16(q1, 9)), p,
                     [&](int ib) {
                       const uint16_t* i = idx + 4 * ib;
                       return Gather4(kIq2XsGrid.data(), i[0], i[1], i[2], i[3]);
                     });
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
                 kSignBytes[signs[3]])};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = Fp16ToF32(b.d);
    // Group g's index: byte g of qs, bits 8-9 from bits 2·(g % 4) of qh[g / 4]: qh[g / 4] times
    // 2^(8 − 2·(g % 4)), masked.
    uint64_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    const __m256i qh_bytes = _mm256_set1_epi64x(static_cast<int64_t>(qh));
    const __m256i shift = _mm256_set1_epi64x(0x0004001000400100);
    const __m256i high_bits = _mm256_set1_epi16(0x300);
    uint16_t idx[kQK_K / 8];
    StoreIndices16(
        b.qs, _mm256_and_si256(_mm256_mullo_epi16(LaneBytes<0, 4>(qh_bytes), shift), high_bits),
        idx);
    StoreIndices16(
        b.qs + 16,
        _mm256_and_si256(_mm256_mullo_epi16(LaneBytes<4, 4>(qh_bytes), shift), high_bits),
        idx + 16);
    AddQuarterBlocks(a, grids::NibbleScales(b.scales), Load32(b.qs + kQK_K / 8), p, [&](int ib) {
      const uint16_t* i = idx + 4 * ib;
      return Gather4(kIq2SGrid.data(), i[0], i[1], i[2], i[3]);
    });
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
             kEvenSignBytes[(codes >> 14) & 127], kEvenSignBytes[(codes >> 21) & 127])};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = Fp16ToF32(b.d);
    const __m256i words = Load32(b.qs + kQK_K / 4);
    AddQuarterBlocks(a, grids::WordScales(words), SignWordMasks(words), p, [&](int ib) {
      const uint8_t* q = b.qs + 8 * ib;
      return Set4(
          Pair(kIq3XxsGrid[q[0]], kIq3XxsGrid[q[1]]), Pair(kIq3XxsGrid[q[2]], kIq3XxsGrid[q[3]]),
          Pair(kIq3XxsGrid[q[4]], kIq3XxsGrid[q[5]]), Pair(kIq3XxsGrid[q[6]], kIq3XxsGrid[q[7]]));
    });
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
                 kSignBytes[signs[3]])};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = Fp16ToF32(b.d);
    // Entry j's index: byte j of qs, bit 8 from bit j % 8 of qh[j / 8].
    uint64_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    const __m256i qh_bytes = _mm256_set1_epi64x(static_cast<int64_t>(qh));
    const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    const auto high = [&](__m256i qh_of_entry) {
      return _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(qh_of_entry, bit), bit),
                              _mm256_set1_epi16(0x100));
    };
    uint16_t idx[kQK_K / 4];
    StoreIndices16(b.qs, high(LaneBytes<0, 8>(qh_bytes)), idx);
    StoreIndices16(b.qs + 16, high(LaneBytes<2, 8>(qh_bytes)), idx + 16);
    StoreIndices16(b.qs + 32, high(LaneBytes<4, 8>(qh_bytes)), idx + 32);
    StoreIndices16(b.qs + 48, high(LaneBytes<6, 8>(qh_bytes)), idx + 48);
    AddQuarterBlocks(a, grids::Iq3SScales(b.scales), Load32(b.signs), p, [&](int ib) {
      const uint16_t* i = idx + 8 * ib;
      return Set4(Pair(kIq3SGrid[i[0]], kIq3SGrid[i[1]]), Pair(kIq3SGrid[i[2]], kIq3SGrid[i[3]]),
                  Pair(kIq3SGrid[i[4]], kIq3SGrid[i[5]]), Pair(kIq3SGrid[i[6]], kIq3SGrid[i[7]]));
    });
  }
};

// IQ1's values in eighths (grids::Iq1Eighths) carry their own signs.
inline SubBlock SignedSub(__m256i q) { return {_mm256_abs_epi8(q), q}; }

struct Iq1SDecoder : Avx2Ops {
  using Block = BlockIq1S;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) { return SignedSub(grids::Iq1SEighths(b, ib)); }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = Fp16ToF32(b.d);
    const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh));
    const __m256i shifts = grids::Iq1SShifts(qh);
    AddQuarterBlocks(a, grids::Iq1SScales(qh), p, [&](int ib) {
      const grids::Indices4 x = grids::Iq1SIndices(b, ib);
      return SignedSub(grids::Iq1Eighths(Gather4(kIq1SGrid.data(), x.i[0], x.i[1], x.i[2], x.i[3]),
                                         grids::Iq1SShiftOf(shifts, ib)));
    });
  }
};

struct Iq1MDecoder : Avx2Ops {
  using Block = BlockIq1M;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) { return SignedSub(grids::Iq1MEighths(b, ib)); }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    const __m256i scales = grids::Iq1MScales(b, h);
    // Group g's index: qs[g], bits 8-10 from bits 0-2 of nibble g of qh: byte g / 2 times 256
    // (low nibble) or 16 (high), masked.
    const __m256i qh = grids::Iq1MQh16(b);
    const __m256i shift = _mm256_set1_epi32(0x00100100);
    const __m256i high_bits = _mm256_set1_epi16(0x700);
    uint16_t idx[kQK_K / 8];
    StoreIndices16(
        b.qs, _mm256_and_si256(_mm256_mullo_epi16(LaneBytes<0, 2>(qh), shift), high_bits), idx);
    StoreIndices16(b.qs + 16,
                   _mm256_and_si256(_mm256_mullo_epi16(LaneBytes<8, 2>(qh), shift), high_bits),
                   idx + 16);
    AddQuarterBlocks(a, scales, p, [&](int ib) {
      const uint16_t* i = idx + 4 * ib;
      return SignedSub(grids::Iq1Eighths(Gather4(kIq1SGrid.data(), i[0], i[1], i[2], i[3]),
                                         grids::Iq1MShift(qh, ib)));
    });
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

// The grid types: tiles of 2 rows x 8 tokens. Against 2 x 4, Qwen3-0.6B pp512 (2 threads, forced
// to AVX2, paired): IQ3_S 1.41-1.58x, IQ1_M 1.39-1.52x, IQ2_S 1.41-1.46x, IQ2_XXS 1.31-1.38x,
// IQ1_S 1.22-1.32x, IQ2_XS 1.22-1.28x, IQ3_XXS 1.13-1.47x; 2 x 16 spills more than it saves
// (IQ3_XXS 0.92-0.99x of 2 x 8, IQ1_M 1.11x). The ternary types: 2 x 4.
void FillGridsAvx2(TypeTraits& traits) {
  if (grids::InstallGridKernel<Iq2XxsDecoder, Iq2XsDecoder, Iq2SDecoder, Iq3XxsDecoder, Iq3SDecoder,
                               Iq1SDecoder, Iq1MDecoder, 8>(traits)) {
    return;
  }
  if (traits.type == GgmlType::kTq1_0) simd::Install<TernaryKernel<Tq1Decoder>, 2, 4>(traits);
  if (traits.type == GgmlType::kTq2_0) simd::Install<TernaryKernel<Tq2Decoder>, 2, 4>(traits);
}

}  // namespace shardlm::internal
