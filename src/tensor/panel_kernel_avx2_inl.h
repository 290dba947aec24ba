// Internal to the AVX2 panel kernel files (panels_blocks_avx2.cc, panels_kquants_avx2.cc,
// compiled with the avx2 flags): what their kernels share. A 64-byte panel vector (panels.h) is
// two 256-bit halves, rows 0-7 and rows 8-15; a kernel's RunHalf computes one half over the whole
// panel, ByHalves runs both (the second pass reads the lines the first brought in) and stores
// the rows asked for.
//
// Anonymous namespace: each including file gets its own copies, compiled for its ISA.
#pragma once

#include <immintrin.h>

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

// K::RunHalf<NC>(n, panel, act, act_stride, half, f) computes rows 8·half .. 8·half + 7 of
// NC tokens into f (lane i: row 8·half + i).
template <class K>
struct ByHalves {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    for (int half = 0; half < 2 && 8 * half < nr; ++half) {
      __m256 f[NC];
      K::template RunHalf<NC>(n, panel, act, act_stride, half, f);
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
  }
};

template <class K>
void Install(TypeTraits& traits) {
  InstallPanelKernel<K, kMaxTokens>(traits);
}

}  // namespace
}  // namespace shardlm::internal::panels
