// AVX-512 kernels of the grid i-quants (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S)
// against Q8_K activations. Registered by kernels_avx512.cc.
//
// The shared tile kernel (grid_kernel_inl.h: one decode of a row's super-block per tile, the
// generic kernels' integer lanes and float order, so the results are bitwise theirs) with
// decoders that use what AVX-512 adds: signs kept as a mask (one bit per element) that negates
// the activations with one masked subtraction, and two decoded sub-blocks multiplied per
// 512-bit step (IQ1_M's pp512 went 1.5x, IQ2_XS's 1.2x when they did). Decode (one row, one
// token) has its own path per type, DotSuperBlock, which takes a super-block's indices, signs
// and scales in vectors at once (Qwen3-0.6B tg, 2 threads: IQ2_XS 1.56x, IQ3_XXS and IQ3_S
// 1.4x, IQ2_XXS and IQ2_S 1.25x, IQ1_M 1.17x, IQ1_S 1.07x with its header from one register),
// and where the grid is small, its entries by byte permutes (VBMI, below).
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

// One sub-block of 32: magnitudes and the mask of negative values.
struct SubBlock {
  __m256i mag;
  __mmask32 neg;
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
// The int32 lanes of magnitudes `mag` with signs `neg` against activations `a`, added to `acc`
// by vpdpwssd (VNNI), the multiply-add of vpmaddwd and the add in one.
__m512i AddPairDot(__m512i acc, __m512i mag, __mmask64 neg, __m512i a, __m512i scales) {
  const __m512i signed_a = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
  return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(mag, signed_a), scales);
}
// The two sub-blocks' lanes added: the 8 lanes of one.
__m256i FoldHalves(__m512i lanes) {
  return _mm256_add_epi32(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64(lanes, 1));
}

// What every AVX-512 decoder gives the tile kernel (grid_kernel_inl.h): its sub-block type and
// how a sub-block meets a row of activations: the mask negates them (one masked subtraction),
// vpmaddubsw multiplies by the magnitudes, vpdpwssd by the scales widens to exact int32 lanes
// and adds them.
struct Avx512Ops {
  using SubBlock = ::shardlm::internal::SubBlock;
  static void AddSub(const SubBlock& sub, __m256i a, __m256i scales, PairSums* p) {
    const __m256i signed_a = _mm256_mask_sub_epi8(a, sub.neg, _mm256_setzero_si256(), a);
    p->isum = _mm256_dpwssd_epi32(p->isum, _mm256_maddubs_epi16(sub.mag, signed_a), scales);
  }

  // Tiles: two sub-blocks per step (grid_kernel_inl.h's HasPairTiles).
  struct Pair {
    __m512i mag, scales;
    __mmask64 neg;
  };
  struct PairAcc {
    __m512i isum = _mm512_setzero_si512();
  };
  static Pair PairOf(__m512i mag, __mmask64 neg, __m512i scales) { return {mag, scales, neg}; }
  // IQ1's values in eighths (signed, |q| <= 9) as a pair.
  static Pair SignedPair(__m512i q, __m512i scales) {
    return PairOf(_mm512_abs_epi8(q), _mm512_movepi8_mask(q), scales);
  }
  // The header's 16 scales in the first 16 int16 lanes (PairScales' input).
  static __m512i HeaderScales(const grids::Header& h) {
    return _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h.scale16)));
  }
  static Pair MakePair(const grids::Header& h, const SubBlock& lo, const SubBlock& hi, int ib) {
    return PairOf(_mm512_inserti64x4(_mm512_castsi256_si512(lo.mag), hi.mag, 1),
                  lo.neg | (static_cast<uint64_t>(hi.neg) << 32), PairScales(HeaderScales(h), ib));
  }
  static __m512i PairActs(const BlockQ8_K& a, int ib) {
    return _mm512_loadu_si512(a.qs + ib * kQK);
  }
  static void AddPair(const Pair& q, __m512i a, PairAcc* acc) {
    acc->isum = AddPairDot(acc->isum, q.mag, q.neg, a, q.scales);
  }
  static void Fold(const PairAcc& acc, PairSums* p) { p->isum = FoldHalves(acc.isum); }
  // A decode path's super-block: pair_of(ib) for sub-blocks ib, ib + 1 against the activations.
  template <class PairOfSubBlocks>
  static void AddPairs(const BlockQ8_K& a, PairSums* p, PairOfSubBlocks pair_of) {
    PairAcc acc;
    SHARDLM_UNROLL for (int ib = 0; ib < kQK_K / kQK; ib += 2) {
      AddPair(pair_of(ib), PairActs(a, ib), &acc);
    }
    Fold(acc, p);
  }
};

// The decode paths (DotSuperBlock: one row, one token) take a super-block's fields in vectors
// at once: its 16 scales from one register, its signs as masks, its grid entries by vector
// permutes where the grid has 256 or 512 entries (below), else by scalar loads at indices
// packed four to a word (PackedIndices); then two sub-blocks per step as the tiles' pairs.
//
// Four grid indices in the 16-bit lanes of a word, by two bit deposits: the bytes at qs, and
// the low bits of `high` spread over the lanes' set bits of kHighBits (IQ2_S: two per lane,
// bits 8-9; IQ1: three, bits 8-10). Then 8 entries by scalar loads at two such words' lanes.
template <uint64_t kHighBits>
[[gnu::always_inline]] inline uint64_t PackedIndices(const uint8_t* qs, uint64_t high) {
  return _pdep_u64(Word(qs), 0x00FF00FF00FF00FFu) | _pdep_u64(high, kHighBits);
}
[[gnu::always_inline]] inline __m256i PackedEntries4(const uint64_t* grid, uint64_t idx) {
  return Set4(grid[idx & 0xFFFF], grid[(idx >> 16) & 0xFFFF], grid[(idx >> 32) & 0xFFFF],
              grid[idx >> 48]);
}
[[gnu::always_inline]] inline __m512i PackedEntries8(const uint64_t* grid, uint64_t lo,
                                                     uint64_t hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(PackedEntries4(grid, lo)),
                            PackedEntries4(grid, hi), 1);
}
constexpr uint64_t kIq1HighBits = 0x0700070007000700u;

// The header's 16 scales (grid_kernel_inl.h) as PairScales' input.
__m512i Scales512(__m256i scales16) { return _mm512_castsi256_si512(scales16); }

// ---- Grid entries by vector permutes (AVX-512 VBMI) --------------------------------------
// For the grids of 256 and 512 entries (IQ2_XXS, IQ3_XXS; IQ2_XS, IQ3_S) a super-block's 32 or
// 64 grid indices are looked up in vectors: the entries' packed codes (iquant_grids.h) by
// vpermi2w, 64 codes from two registers per permute and the indices' higher bits choosing
// among the picks; then the codes' fields spread to bytes by vpmultishiftqb and mapped to
// levels by vpermb. That replaces 32 or 64 scalar loads of entries, the loads of their indices
// and the inserts that gather them in vectors: decode's kernel alone (one thread, L2-resident
// rows, Zen 4) 1.22x (IQ2_XS) to 1.77x (IQ3_XXS). IQ2_S (1024 entries: 16 permutes per 32
// indices) was 0.95x and keeps the scalar loads, as the IQ1 types (2048).

// The codes at the 32 indices in the int16 lanes of `idx` (each < N).
template <size_t N>
[[gnu::always_inline]] inline __m512i LookupCodes(const std::array<uint16_t, N>& codes,
                                                  __m512i idx) {
  static_assert(N == 256 || N == 512);
  constexpr int kPicks = static_cast<int>(N / 64);
  __m512i pick[kPicks];
  SHARDLM_UNROLL for (int c = 0; c < kPicks; ++c) {
    pick[c] = _mm512_permutex2var_epi16(_mm512_loadu_si512(codes.data() + 64 * c), idx,
                                        _mm512_loadu_si512(codes.data() + 64 * c + 32));
  }
  SHARDLM_UNROLL for (int bit = 64, n = kPicks; n > 1; bit *= 2, n /= 2) {
    const __mmask32 high =
        _mm512_test_epi16_mask(idx, _mm512_set1_epi16(static_cast<int16_t>(bit)));
    SHARDLM_UNROLL for (int c = 0; c < n / 2; ++c) {
      pick[c] = _mm512_mask_mov_epi16(pick[2 * c], high, pick[2 * c + 1]);
    }
  }
  return pick[0];
}

// Tables for vpermb that map a byte to levels[byte % kPeriod] (a power of two at least the
// number of levels: the bits above a field do not matter).
template <int kPeriod, size_t kCount>
constexpr std::array<uint8_t, 64> LevelBytes(const uint8_t (&levels)[kCount]) {
  std::array<uint8_t, 64> table{};
  for (int i = 0; i < 64; ++i) table[i] = i % kPeriod < int(kCount) ? levels[i % kPeriod] : 0;
  return table;
}
alignas(64) constexpr std::array<uint8_t, 64> kIq2LevelBytes = LevelBytes<4>(kIq2Levels);
alignas(64) constexpr std::array<uint8_t, 64> kIq3XxsLevelBytes = LevelBytes<8>(kIq3XxsLevels);
alignas(64) constexpr std::array<uint8_t, 64> kIq3SLevelBytes = LevelBytes<8>(kIq3SLevels);

// Two sub-blocks (64 elements) of an 8-wide grid from the 32 codes of a super-block (int16
// lanes): groups 8p..8p + 7, group 8p + j's code in every word of qword j (vpermw), element k's
// 2-bit field in byte k (vpmultishiftqb), a field to its level (vpermb).
__m512i Expand8Wide(__m512i codes, int p, __m512i levels) {
  const __m512i code_of_word =
      _mm512_add_epi16(_mm512_set_epi16(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4, 3, 3, 3, 3,
                                        2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                       _mm512_set1_epi16(static_cast<int16_t>(8 * p)));
  const __m512i fields = _mm512_multishift_epi64_epi8(
      _mm512_set1_epi64(0x0E0C0A0806040200), _mm512_permutexvar_epi16(code_of_word, codes));
  return _mm512_permutexvar_epi8(fields, levels);
}

// Two sub-blocks (64 elements, 16 groups of 4) of a 4-wide grid from 32 codes (int16 lanes):
// groups 16p' .. 16p' + 15 of those 32 (p' = p % 2), groups 2j and 2j + 1 in qword j, element
// k's 3-bit field in byte k.
__m512i Expand4Wide(__m512i codes, int p, __m512i levels) {
  const __m512i code_of_word =
      _mm512_add_epi16(_mm512_set_epi16(15, 14, 15, 14, 13, 12, 13, 12, 11, 10, 11, 10, 9, 8, 9, 8,
                                        7, 6, 7, 6, 5, 4, 5, 4, 3, 2, 3, 2, 1, 0, 1, 0),
                       _mm512_set1_epi16(static_cast<int16_t>(16 * (p % 2))));
  const __m512i fields = _mm512_multishift_epi64_epi8(
      _mm512_set1_epi64(0x1916131009060300), _mm512_permutexvar_epi16(code_of_word, codes));
  return _mm512_permutexvar_epi8(fields, levels);
}

// vpmultishiftqb's control for four codes at bits first + step·l (l < 4) of each qword, into
// its bytes 0-3.
constexpr uint64_t CodeOffsets(int first, int step) {
  uint64_t at = 0;
  for (int l = 0; l < 4; ++l) at |= static_cast<uint64_t>(first + step * l) << (8 * l);
  return at;
}

// The sign bytes of a super-block's 32 groups whose signs are 7-bit codes (IQ2_XXS, IQ2_XS,
// IQ3_XXS): qword ib of `fields` holds sub-block ib's four codes at the bit offsets kAt
// (CodeOffsets); byte 8·ib + l of the result holds group 4·ib + l's signs, bit 7 the parity
// that makes its negatives even (vpmultishiftqb takes each code's byte, vpermi2b maps its low
// 7 bits through the table of EvenSigns).
alignas(64) constexpr auto kEvenSignTable = [] {
  std::array<uint8_t, 128> table{};
  for (uint32_t code = 0; code < 128; ++code) table[code] = EvenSigns(code);
  return table;
}();
template <uint64_t kAt>
__m512i EvenSignBytes(__m512i fields) {
  const __m512i codes = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(kAt), fields);
  return _mm512_permutex2var_epi8(_mm512_load_si512(kEvenSignTable.data()), codes,
                                  _mm512_load_si512(kEvenSignTable.data() + 64));
}
// The mask of negative elements of sub-blocks 2p, 2p + 1 from EvenSignBytes: group 8p + j's
// byte copied to qword j (vpermb), bit k of it tested into bit 8j + k.
__mmask64 PairSignMask(__m512i sign_bytes, int p) {
  const __m512i byte_of_group =
      _mm512_add_epi8(_mm512_set_epi64(0x0B0B0B0B0B0B0B0B, 0x0A0A0A0A0A0A0A0A, 0x0909090909090909,
                                       0x0808080808080808, 0x0303030303030303, 0x0202020202020202,
                                       0x0101010101010101, 0x0000000000000000),
                      _mm512_set1_epi8(static_cast<char>(16 * p)));
  return _mm512_test_epi8_mask(_mm512_permutexvar_epi8(byte_of_group, sign_bytes),
                               _mm512_set1_epi64(static_cast<long long>(0x8040201008040201)));
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
            EvenSignMask(Word(bytes + 4))};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    // Per sub-block 8 bytes: the four groups' indices, then the word of signs and scale.
    const __m512i qs = _mm512_loadu_si512(b.qs);
    const __m512i scales =
        Scales512(grids::WordScales(_mm512_cvtepi64_epi32(_mm512_srli_epi64(qs, 32))));
    const __m512i sign_bytes = EvenSignBytes<CodeOffsets(32, 7)>(qs);
    // Group g's index: byte g % 4 of sub-block g / 4's 8 bytes, zero-extended.
    const __m512i index_byte =
        _mm512_set_epi16(59, 58, 57, 56, 51, 50, 49, 48, 43, 42, 41, 40, 35, 34, 33, 32, 27, 26, 25,
                         24, 19, 18, 17, 16, 11, 10, 9, 8, 3, 2, 1, 0);
    const __m512i codes = LookupCodes(
        kIq2XxsCodes, _mm512_maskz_permutexvar_epi8(0x5555555555555555, index_byte, qs));
    const __m512i levels = _mm512_load_si512(kIq2LevelBytes.data());
    AddPairs(a, p, [&](int ib) {
      return PairOf(Expand8Wide(codes, ib / 2, levels), PairSignMask(sign_bytes, ib / 2),
                    PairScales(scales, ib));
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
            EvenSignMask(codes)};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    const __m512i q = _mm512_loadu_si512(b.qs);  // per group: 9-bit index, 7-bit sign code
    const __m512i codes = LookupCodes(kIq2XsCodes, _mm512_and_si512(q, _mm512_set1_epi16(511)));
    const __m512i sign_bytes = EvenSignBytes<CodeOffsets(9, 16)>(q);
    const __m512i scales = Scales512(grids::NibbleScales(b.scales));
    const __m512i levels = _mm512_load_si512(kIq2LevelBytes.data());
    AddPairs(a, p, [&](int ib) {
      return PairOf(Expand8Wide(codes, ib / 2, levels), PairSignMask(sign_bytes, ib / 2),
                    PairScales(scales, ib));
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
    return {Gather4(kIq2SGrid.data(), idx), Word(b.qs + kQK_K / 8 + 4 * ib)};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    // Group 4·ib + k's index: byte of qs, bits 8-9 from bits 2k of qh[ib]. (1024 entries: the
    // permutes of vector lookups, 16 per 32 indices, cost more than these scalar loads.)
    const __m512i scales = Scales512(grids::NibbleScales(b.scales));
    AddPairs(a, p, [&](int ib) {
      constexpr uint64_t kHighBits = 0x0300030003000300u;
      return PairOf(
          PackedEntries8(kIq2SGrid.data(), PackedIndices<kHighBits>(b.qs + 4 * ib, b.qh[ib]),
                         PackedIndices<kHighBits>(b.qs + 4 * ib + 4, b.qh[ib + 1])),
          SignBytes(b.qs + kQK_K / 8, ib), PairScales(scales, ib));
    });
  }
};

struct Iq3XxsDecoder : Avx512Ops {
  using Block = BlockIq3Xxs;
  static constexpr float kFactor = 0.25f;
  static SubBlock Sub(const Block& b, int ib) {
    return {Gather8(kIq3XxsGrid.data(), Bytes8(b.qs + 8 * ib)),
            EvenSignMask(Word(b.qs + kQK_K / 4 + 4 * ib))};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + kQK_K / 4));
    const __m512i sign_bytes = EvenSignBytes<CodeOffsets(0, 7)>(_mm512_cvtepu32_epi64(words));
    const __m512i scales = Scales512(grids::WordScales(words));
    // 64 groups of 4: indices 0-31 (sub-blocks 0-3), then 32-63.
    const __m512i codes[2] = {
        LookupCodes(kIq3XxsCodes, _mm512_cvtepu8_epi16(
                                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)))),
        LookupCodes(kIq3XxsCodes, _mm512_cvtepu8_epi16(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(b.qs + 32))))};
    const __m512i levels = _mm512_load_si512(kIq3XxsLevelBytes.data());
    AddPairs(a, p, [&](int ib) {
      return PairOf(Expand4Wide(codes[ib / 4], ib / 2, levels), PairSignMask(sign_bytes, ib / 2),
                    PairScales(scales, ib));
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
    return {Gather8(kIq3SGrid.data(), idx), Word(b.signs + 4 * ib)};
  }

  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    const __m512i scales = Scales512(grids::Iq3SScales(b.scales));
    // Entry j's index: byte j of qs, bit 8 from bit j % 8 of qh[j / 8], which is bit j of qh
    // read as one 64-bit mask.
    uint64_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    const auto codes_of_half = [&](int half) {
      const __m512i low =
          _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs) + half));
      return LookupCodes(kIq3SCodes,
                         _mm512_mask_add_epi16(low, static_cast<__mmask32>(qh >> (32 * half)), low,
                                               _mm512_set1_epi16(256)));
    };
    const __m512i codes[2] = {codes_of_half(0), codes_of_half(1)};
    const __m512i levels = _mm512_load_si512(kIq3SLevelBytes.data());
    AddPairs(a, p, [&](int ib) {
      return PairOf(Expand4Wide(codes[ib / 4], ib / 2, levels), SignBytes(b.signs, ib),
                    PairScales(scales, ib));
    });
  }
};

// IQ1's values in eighths (grids::Iq1Eighths: 8·grid ± 1) carry their own signs: magnitudes and
// the mask of the negative ones.
SubBlock SignedSub(__m256i q) { return {_mm256_abs_epi8(q), _mm256_movepi8_mask(q)}; }

// Two IQ1 sub-blocks' values in eighths from their entries q (−1, 0, 1) and the mask of the
// groups (64-bit lanes, 8 elements each) whose shift is −1/8: one vpermb of q through a table
// of 8q + 1 (entries 0, 1 and 63, which the byte −1 indexes), of 8q − 1 where the group's bytes
// had bit 5 flipped (entries 32, 33, 31).
alignas(64) constexpr auto kIq1EighthsOfEntry = [] {
  std::array<int8_t, 64> table{};
  table[0] = 1, table[1] = 9, table[63] = -7;
  table[32] = -1, table[33] = 7, table[31] = -9;
  return table;
}();
__m512i Iq1PairEighths(__m512i q, __mmask8 negative_groups) {
  const __m512i index = _mm512_mask_xor_epi64(q, negative_groups, q, _mm512_set1_epi8(0x20));
  return _mm512_permutexvar_epi8(index, _mm512_load_si512(kIq1EighthsOfEntry.data()));
}

struct Iq1SDecoder : Avx512Ops {
  using Block = BlockIq1S;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) { return SignedSub(grids::Iq1SEighths(b, ib)); }

  // Decode: two sub-blocks per step, as a tile's pairs; the header's scales from one register,
  // the sub-blocks' shift signs (bit 15 of their qh words) from one mask.
  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    h->d = avx2::Fp16ToF32(b.d);
    const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh));
    const __m512i scales = Scales512(grids::Iq1SScales(qh));
    // Sub-block ib's shift sign (bit 15 of its word) for each of its four groups.
    const uint32_t negative = _pdep_u32(_mm_movepi16_mask(qh), 0x11111111u) * 0xFu;
    // The grid indices four to a word by bit deposits (PackedIndices): decode's kernel
    // alone 1.11x against the scalar arithmetic per index (grids::Iq1SIndices), which was
    // 1.08-1.15x against the indices computed in one register and read back from the stack.
    AddPairs(a, p, [&](int ib) {
      const __m512i q =
          PackedEntries8(kIq1SGrid.data(), PackedIndices<kIq1HighBits>(b.qs + 4 * ib, b.qh[ib]),
                         PackedIndices<kIq1HighBits>(b.qs + 4 * ib + 4, b.qh[ib + 1]));
      return SignedPair(Iq1PairEighths(q, static_cast<__mmask8>(negative >> (4 * ib))),
                        PairScales(scales, ib));
    });
  }
};

struct Iq1MDecoder : Avx512Ops {
  using Block = BlockIq1M;
  static constexpr float kFactor = 0.125f;
  static SubBlock Sub(const Block& b, int ib) { return SignedSub(grids::Iq1MEighths(b, ib)); }

  // Decode (one row, one token): two sub-blocks per step, as a tile's pairs, the 16 scales
  // from one register (grids::Iq1MScales) instead of the header's scalar loop.
  static void DotSuperBlock(const Block& b, const BlockQ8_K& a, grids::Header* h, PairSums* p) {
    const __m512i scales = Scales512(grids::Iq1MScales(b, h));
    // Bit g: group g's shift sign, bit 3 of its nibble, from one register: lane g takes qh[g / 2]
    // in its high byte (a byte permute), odd lanes shifted right by 4, so the sign is bit 11.
    // (Decode's kernel alone 1.10x against the sign spread over a pair's 64 bytes by bit
    // deposits per pair; 1.05x against the mask by bit extracts from qh's two words.)
    alignas(64) static constexpr auto kQhByteOfLane = [] {
      std::array<uint8_t, 64> bytes{};
      for (int g = 0; g < 32; ++g) bytes[2 * g + 1] = static_cast<uint8_t>(g / 2);
      return bytes;
    }();
    const __m512i nibble_lanes = _mm512_srlv_epi16(
        _mm512_maskz_permutexvar_epi8(
            0xAAAAAAAAAAAAAAAAu, _mm512_load_si512(kQhByteOfLane.data()),
            _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh)))),
        _mm512_set1_epi32(4 << 16));
    const __mmask32 negative = _mm512_test_epi16_mask(nibble_lanes, _mm512_set1_epi16(0x800));
    AddPairs(a, p, [&](int ib) {
      // The groups' index bits 8-10: each nibble's low three bits (1.07x against the scalar
      // arithmetic per index).
      const uint32_t h = Word(b.qh + 2 * ib);
      const __m512i q = PackedEntries8(
          kIq1SGrid.data(), PackedIndices<kIq1HighBits>(b.qs + 4 * ib, _pext_u32(h, 0x7777u)),
          PackedIndices<kIq1HighBits>(b.qs + 4 * ib + 4, _pext_u32(h >> 16, 0x7777u)));
      return SignedPair(Iq1PairEighths(q, static_cast<__mmask8>(negative >> (4 * ib))),
                        PairScales(scales, ib));
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
