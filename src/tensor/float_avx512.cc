// AVX-512 kernels for the float weight types: F32 (F32 activations), F16 (activations in
// fp16, as llama.cpp does on x86: both sides widened to f32 and fused-multiply-added) and
// BF16 (bf16 activations, vdpbf16ps pairs with f32 accumulation). Registered by
// kernels_avx512.cc.
//
// Goals: decode at memory speed; prefill reuses each weight vector across the tile's
// tokens. Every (row, token) pair runs the same op sequence in any tile (simd_tile.h).
// A row length that is not a multiple of the vector width is finished with masked
// (zero-filling) loads, which add exact zeros.
// Non-goals: activation conversion (generic quantize_act).
// GCC 12 flags its own intrinsics' "undefined upper half" idiom (__m512 __Y = __Y) at
// every inlined use; the warning is a known false positive, silenced for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "tensor/quant_blocks.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

// Loader policies: Load(p, i, mask) → 16 floats of elements [i, i + 16) of row p.
struct F32Load {
  static constexpr int kStep = 16;
  static __m512 Load(const uint8_t* p, int64_t i, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(p) + i);
  }
};
struct F16Load {
  static constexpr int kStep = 16;
  static __m512 Load(const uint8_t* p, int64_t i, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, reinterpret_cast<const fp16_t*>(p) + i));
  }
};

// F32 and F16: one f32 accumulator of 16 lanes per pair, one FMA per 16 elements.
template <class L>
struct FloatKernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    __m512 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += L::kStep) {
      const int64_t left = n - i;
      const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
      __m512 wv[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) wv[r] = L::Load(w + r * w_stride, i, mask);
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const __m512 av = L::Load(act + c * act_stride, i, mask);
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) acc[r][c] =
            _mm512_fmadd_ps(wv[r], av, acc[r][c]);
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

// BF16 weights · bf16 activations: vdpbf16ps adds two exact bf16 products per f32 lane,
// 32 elements per instruction.
struct Bf16Kernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    __m512 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
      const int64_t left = n - i;
      const __mmask32 mask = left >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << left) - 1);
      __m512i wv[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) wv[r] =
          _mm512_maskz_loadu_epi16(mask, reinterpret_cast<const bf16_t*>(w + r * w_stride) + i);
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const __m512i av = _mm512_maskz_loadu_epi16(
            mask, reinterpret_cast<const bf16_t*>(act + c * act_stride) + i);
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) acc[r][c] =
            _mm512_dpbf16_ps(acc[r][c], (__m512bh)wv[r], (__m512bh)av);
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

}  // namespace

// Tiles of 4 rows x 4 tokens: 16 accumulators + 4 weight vectors + 1 activation vector
// stay in the 32 zmm registers; 8 loads feed 16 FMAs.
void FillFloatAvx512(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kF32:
      simd::Install<FloatKernel<F32Load>, 4, 4, simd::Decode::kTile>(traits);
      break;
    case GgmlType::kF16:
      simd::Install<FloatKernel<F16Load>, 4, 4, simd::Decode::kTile>(traits);
      break;
    case GgmlType::kBF16:
      simd::Install<Bf16Kernel, 4, 4, simd::Decode::kTile>(traits);
      break;
    default:
      break;
  }
}

}  // namespace shardlm::internal
