// Internal to the AVX2 panel kernel files (panels_blocks_avx2.cc, panels_kquants_avx2.cc,
// compiled with the avx2 flags): what their kernels share. A 64-byte panel vector (panels.h) is
// two 256-bit halves, rows 0-7 and rows 8-15; a kernel's AddBlock computes one half of one panel
// block, ByHalves runs it over the panel's blocks and both halves and stores the rows asked for.
//
// Anonymous namespace: each including file gets its own copies, compiled for its ISA.
#pragma once

#include "tensor/intrinsics.h"
#include "tensor/panel_dispatch_inl.h"
#include "tensor/panels.h"
#include "tensor/simd_avx2_inl.h"
#include "tensor/simd_tile.h"
#include "tensor/type_traits.h"

namespace shardlm::internal::panels {
namespace {

// Tokens per call: a half's int16 sums and float accumulators (2 per token) and the unpacked
// pair fit the 16 ymm registers at 4.
constexpr int kMaxTokens = 4;

__m256i Bcast32(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Ends the compiler's freedom to reassociate the integer sums it accumulates in v: with a
// block's groups and tokens unrolled, GCC rewrote Σ over groups into a tree of products that
// are all live at once, and spilled and reloaded ~110 ymm values per panel block. Placed
// after each group, the sums run in order in registers. No instruction is emitted.
inline void InRegister(__m256i& v) { __asm__("" : "+x"(v)); }

// The 8 rows' scales of block k of a panel, half `half`, as floats.
inline __m256 HalfFp16(const fp16_t* d, int half) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + 8 * half)));
}

// The two 4-bit fields of a pair vector's half `half` (qs[4r + e]: low nibble = one group of
// 4 columns, high = the next; panels.h), rows 8·half .. 8·half + 7.
inline void HalfNibbles(const uint8_t* pair_vector, int half, __m256i (&q)[2]) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i raw = avx2::Load32(pair_vector + 32 * half);
  q[0] = _mm256_and_si256(raw, nibble);
  q[1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble);
}

// Signed levels of 8 rows (magnitude = |level|) times a token's 4 activation bytes at act, as
// vpmaddubsw's int16 pairs: the magnitudes against the activations with the levels' signs
// (vpsignb). Exact while no activation byte is −128 (the Q8_0 and Q8_K quantizers round to
// ±127); a level of −128 is exact too (its magnitude 0x80 is 128 to the unsigned side), pairs
// of at most 2·128·127 < 2^15.
inline __m256i SignedPairs(__m256i magnitude, __m256i level, const int8_t* act) {
  return _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(Bcast32(act), level));
}

// The high bits of a group of 4 columns whose 64-bit mask is at `mask` (bit 4r + e: column e of
// row r; the 5th bits of Q5_0, Q5_1 and Q5_K, Q3_K's 3rd), rows of half `half`, as `value` in each
// byte lane whose bit is set: byte k of the half vector takes mask byte k / 8 (vpshufb) and tests
// bit k % 8. The half's 32 bits are broadcast straight from the panel (little-endian: half h at
// byte 4h); passing the mask by value, GCC shifted it in a general register and moved it over,
// three more instructions per group in decode's Q5_0 kernel.
inline __m256i HighBits(const uint64_t* mask, int half, char value) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  const __m256i bytes =
      _mm256_shuffle_epi8(Bcast32(reinterpret_cast<const uint8_t*>(mask) + 4 * half), spread);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit),
                          _mm256_set1_epi8(value));
}

// Tokens up to which ByHalves computes both halves of a block in one pass over the panel.
constexpr int kOnePassTokens = 2;

// InRegister in the tiles (NC > kOnePassTokens), where several tokens' sums compete for the
// registers; decode's one or two tokens keep the compiler's schedule (Q4_K's decode kernel
// took 1.08x the time with the barrier).
template <int NC>
inline void TileInRegister(__m256i& v) {
  if constexpr (NC > kOnePassTokens) InRegister(v);
}

// Runs kernel K over a panel, K::Panel being its blocks of K::kColumns columns each:
// K::AddBlock<NC>(n, p, b, act, act_stride, half, f) adds block b (at p) of rows
// 8·half .. 8·half + 7 for NC tokens into f (lane i: row 8·half + i).
// Up to kOnePassTokens tokens (decode) both halves of a block are computed together, so that
// the panel streams from memory in one pass. Two passes, one per half, held Q6_K decode from
// DRAM at ~10 GB/s per thread against the row kernels' ~14 (Zen 3), with or without
// prefetching the next panel during the second. Above kOnePassTokens two halves'
// accumulators do not fit the registers: one half at a time, the second pass reading the
// lines the first brought in (there the kernels are bound by their multiplies, not memory).
// Decode asks for the block two ahead in two parts, one before each half: the whole block at
// once held Q4_K and Q6_K panels at ~10 GB/s per thread from DRAM against ~12-14 in two parts
// (Zen 3); every other line, or 16 slices spread through the block, did no better.
template <class K>
struct ByHalves {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const auto* blocks = reinterpret_cast<const typename K::Panel*>(panel);
    const int64_t nb = n / K::kColumns;
    const int halves = nr > 8 ? 2 : 1;
    if constexpr (NC <= kOnePassTokens) {
      __m256 f[2][NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[0][c] = f[1][c] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        PrefetchAhead<2>(blocks + b, 0);
        K::template AddBlock<NC>(n, blocks + b, b, act, act_stride, 0, f[0]);
        PrefetchAhead<2>(blocks + b, 1);
        if (halves == 2) K::template AddBlock<NC>(n, blocks + b, b, act, act_stride, 1, f[1]);
      }
      for (int half = 0; half < halves; ++half) StoreHalf(f[half], half, out, out_stride, nr);
    } else {
      for (int half = 0; half < halves; ++half) {
        __m256 f[NC];
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
          if (half == 0) PrefetchAhead(blocks + b);
          K::template AddBlock<NC>(n, blocks + b, b, act, act_stride, half, f);
        }
        StoreHalf(f, half, out, out_stride, nr);
      }
    }
  }

  // Rows 8·half .. min(nr, 8·half + 8) of each token's f into out.
  template <int NC>
  static void StoreHalf(const __m256 (&f)[NC], int half, float* out, int64_t out_stride, int nr) {
    const int rows = nr - 8 * half < 8 ? nr - 8 * half : 8;
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
      float* o = out + c * out_stride + 8 * half;
      if (rows == 8) {
        _mm256_storeu_ps(o, f[c]);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, f[c]);
        for (int r = 0; r < rows; ++r) o[r] = tmp[r];
      }
    }
  }
};

template <class K>
void Install(TypeTraits& traits) {
  InstallPanelKernel<K, kMaxTokens>(traits);
}

}  // namespace
}  // namespace shardlm::internal::panels
