// AVX-512 kernels for the float weight types: F32 (F32 activations), F16 (activations in
// fp16, as llama.cpp does on x86: both sides widened to f32 and fused-multiply-added) and
// BF16 (bf16 activations, vdpbf16ps pairs with f32 accumulation). Registered by
// kernels_avx512.cc.
//
// Goals: decode at memory speed; prefill reuses each weight vector across the tile's
// tokens. Every (row, token) pair runs the same op sequence in any tile (simd_tile.h).
// A row length that is not a multiple of the vector width is finished with one masked
// (zero-filling) step, which adds exact zeros. F16 rows convert both ways (dequantize_row,
// quantize_act: also the F16 KV cache's) with vcvtph2ps / vcvtps2ph.
// Non-goals: F32 and BF16 activation conversion (generic quantize_act).

#include <cstring>

#include "tensor/intrinsics.h"
#include "tensor/quant_blocks.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

// Element policies. Full(p, i) loads one step (kStep elements from element i of row p)
// with plain loads; Tail(p, i, left) the last, partial step with a zero-filling masked
// load. Masked loads only at the tail: on Zen 4 a masked load that misses the cache
// streams ~3x slower (F32 decode measured 9.8 → 29 GB/s with plain loads).
// Fma(acc, w, a) accumulates one step into 16 f32 lanes.
struct F32Elems {
  using Vec = __m512;
  static constexpr int kStep = 16;
  static constexpr int kBytes = 4;  // per element
  static Vec Full(const uint8_t* p, int64_t i) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + i);
  }
  static Vec Tail(const uint8_t* p, int64_t i, int64_t left) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1),
                                 reinterpret_cast<const float*>(p) + i);
  }
  static __m512 Fma(__m512 acc, Vec w, Vec a) { return _mm512_fmadd_ps(w, a, acc); }
};
struct F16Elems {
  using Vec = __m512;
  static constexpr int kStep = 16;
  static constexpr int kBytes = 2;
  static Vec Full(const uint8_t* p, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(reinterpret_cast<const fp16_t*>(p) + i)));
  }
  static Vec Tail(const uint8_t* p, int64_t i, int64_t left) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << left) - 1),
                                                    reinterpret_cast<const fp16_t*>(p) + i));
  }
  static __m512 Fma(__m512 acc, Vec w, Vec a) { return _mm512_fmadd_ps(w, a, acc); }
};
// BF16: vdpbf16ps adds two exact bf16 products per f32 lane, 32 elements per instruction.
struct Bf16Elems {
  using Vec = __m512i;
  static constexpr int kStep = 32;
  static constexpr int kBytes = 2;
  static Vec Full(const uint8_t* p, int64_t i) {
    return _mm512_loadu_si512(reinterpret_cast<const bf16_t*>(p) + i);
  }
  static Vec Tail(const uint8_t* p, int64_t i, int64_t left) {
    return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << left) - 1),
                                    reinterpret_cast<const bf16_t*>(p) + i);
  }
  static __m512 Fma(__m512 acc, Vec w, Vec a) {
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)a);
  }
};

// One f32 accumulator of 16 lanes per pair, one Fma per step; the tail step runs the same
// Fma on zero-filled vectors.
template <class E>
struct FloatKernel {
  template <int NR, int NC, bool kTail>
  static void Step(const uint8_t* w, int64_t w_stride, const uint8_t* act, int64_t act_stride,
                   int64_t i, int64_t left, __m512 (&acc)[NR][NC]) {
    typename E::Vec wv[NR];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
      wv[r] = kTail ? E::Tail(w + r * w_stride, i, left) : E::Full(w + r * w_stride, i);
      simd::PrefetchNextTile<NR>(w + r * w_stride + i * E::kBytes, w_stride, 64);
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
      const typename E::Vec av =
          kTail ? E::Tail(act + c * act_stride, i, left) : E::Full(act + c * act_stride, i);
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) acc[r][c] = E::Fma(acc[r][c], wv[r], av);
    }
  }

  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    __m512 acc[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + E::kStep <= n; i += E::kStep) {
      Step<NR, NC, false>(w, w_stride, act, act_stride, i, 0, acc);
    }
    if (i < n) Step<NR, NC, true>(w, w_stride, act, act_stride, i, n - i, acc);
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c)
        out[r * out_stride + c] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

// F16 rows ↔ F32, round to nearest even: the bits of the generic Fp16ToFp32 / Fp32ToFp16
// for every input, NaN payloads included (both quiet a NaN and keep its top bits).
void DequantizeRowF16Avx512(const void* src, float* dst, int64_t n) {
  // Rows may sit at odd addresses (padded activation rows): unaligned loads, memcpy tails.
  const auto* h = static_cast<const uint8_t*>(src);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(
        dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 2 * i))));
  }
  for (; i < n; ++i) {
    fp16_t one;
    std::memcpy(&one, h + 2 * i, 2);
    dst[i] = _cvtsh_ss(one);
  }
}

void QuantizeActF16Avx512(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + 2 * i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) {
    const fp16_t one = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(h + 2 * i, &one, 2);
  }
}

}  // namespace

// Tiles of 4 rows x 4 tokens: 16 accumulators + 4 weight vectors + 1 activation vector
// stay in the 32 zmm registers; 8 loads feed 16 FMAs.
void FillFloatAvx512(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kF32:
      simd::Install<FloatKernel<F32Elems>, 4, 4>(traits);
      break;
    case GgmlType::kF16:
      simd::Install<FloatKernel<F16Elems>, 4, 4>(traits);
      traits.dequantize_row = DequantizeRowF16Avx512;
      traits.quantize_act = QuantizeActF16Avx512;
      break;
    case GgmlType::kBF16:
      simd::Install<FloatKernel<Bf16Elems>, 4, 4>(traits);
      break;
    default:
      break;
  }
}

}  // namespace shardlm::internal
