// AVX2 kernels for F32 weights (F32 activations) and F16 weights (fp16 activations, both
// widened with vcvtph2ps and fused-multiply-added in f32), and F16 rows converted both ways
// (dequantize_row, quantize_act: also the F16 KV cache's). Registered by kernels_avx2.cc.
//
// Goals: memory speed at decode, load reuse in a small tile for prefill, the same per-pair
// op sequence in every tile (simd_tile.h). A row tail shorter than 8 elements is copied
// into a zero-padded buffer, which adds exact zeros. Non-goals: BF16 on AVX2 (generic).
#include <cstring>

#include "tensor/simd_avx2_inl.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

using avx2::ReduceAdd;

// Load(p, i, left) → 8 floats of elements [i, i + 8) of row p, zeros past `left`.
struct F32Load {
  static constexpr int kBytes = 4;  // per element
  static __m256 Load(const uint8_t* p, int64_t i, int64_t left) {
    const float* src = reinterpret_cast<const float*>(p) + i;
    if (left >= 8) return _mm256_loadu_ps(src);
    float tail[8] = {};
    std::memcpy(tail, src, left * sizeof(float));
    return _mm256_loadu_ps(tail);
  }
};
struct F16Load {
  static constexpr int kBytes = 2;
  static __m256 Load(const uint8_t* p, int64_t i, int64_t left) {
    const fp16_t* src = reinterpret_cast<const fp16_t*>(p) + i;
    if (left >= 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    fp16_t tail[8] = {};
    std::memcpy(tail, src, left * sizeof(fp16_t));
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tail)));
  }
};

// F16 rows ↔ F32 with F16C, round to nearest even: the bits of the generic Fp16ToFp32 /
// Fp32ToFp16 for every input, NaN payloads included (both quiet a NaN and keep its top bits).
void DequantizeRowF16Avx2(const void* src, float* dst, int64_t n) {
  // Rows may sit at odd addresses (padded activation rows): unaligned loads, memcpy tails.
  const auto* h = static_cast<const uint8_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 2 * i))));
  }
  for (; i < n; ++i) {
    fp16_t one;
    std::memcpy(&one, h + 2 * i, 2);
    dst[i] = _cvtsh_ss(one);
  }
}

void QuantizeActF16Avx2(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) {
    const fp16_t one = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(h + 2 * i, &one, 2);
  }
}

template <class L>
struct FloatKernel {
  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    __m256 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
      __m256 wv[NR];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        wv[r] = L::Load(w + r * w_stride, i, n - i);
        simd::PrefetchNextTile<NR>(w + r * w_stride + i * L::kBytes, w_stride, 32);
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const __m256 av = L::Load(act + c * act_stride, i, n - i);
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) acc[r][c] =
            _mm256_fmadd_ps(wv[r], av, acc[r][c]);
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = ReduceAdd(acc[r][c]);
  }
};

}  // namespace

// Tile 3 rows x 4 tokens: 12 accumulators + 3 weight vectors + 1 activation vector = the
// 16 ymm registers.
void FillFloatAvx2(TypeTraits& traits) {
  if (traits.type == GgmlType::kF32) simd::Install<FloatKernel<F32Load>, 3, 4>(traits);
  if (traits.type == GgmlType::kF16) {
    simd::Install<FloatKernel<F16Load>, 3, 4>(traits);
    traits.dequantize_row = DequantizeRowF16Avx2;
    traits.quantize_act = QuantizeActF16Avx2;
  }
}

}  // namespace shardlm::internal
