// Internal to tensor/: the scalar ("generic") kernels of every weight type, one function per
// (type, operation). They define shardlm's numerics: the ISA files (kernels_avx*.cc) may call
// them for tails and must reproduce quantize_act bit for bit.
//
// Conventions (the TypeTraits signatures, type_traits.h):
//   DequantizeRowX(src, dst, n)       dst[0..n) floats from n elements of X
//   QuantizeRowX(src, dst, n)         weights: ggml's reference quantizer (quantize_row_*_ref)
//   QuantizeActX(src, dst, n)         activations: llama.cpp's x86 quantize_row_* for X
//   VecDotXY(n, w, a, out)            *out = dot(row of X, row of act type Y)
// n is a multiple of the block size everywhere (checked by callers, DCHECKed here).
// Formulas follow ggml-quants.c (dequant, quantizers) and, for the dot products of quantized
// types, llama.cpp's x86 AVX2 kernels (ggml-cpu arch/x86/quants.c, and llamafile's tinyBLAS
// for Q8_0/Q5_0, which has the same float order): integer sums are exact, float operations
// run in their order (FmaLanes / HorizontalSum8 below). With SHARDLM_ISA=generic the fixture
// goldens then match llama.cpp bit for bit on most quantized prompts (all of Q4_1, Q5_0,
// Q5_1; most of Q8_0, Q3_K, Q4_K, Q5_K, Q6_K; the rest differ by cascades from elsewhere).
// Known gap: llama.cpp repacks Q4_0 matrices whose row count is a multiple of 8 and then
// accumulates one float per row, fma(Σ block ints, d_w·d_a, acc) block by block (checked
// on the fixtures); Q2_K's repacked order may differ likewise (not reproduced here).
// Non-goals: speed (ISA files), types outside type_traits.h's list.
#pragma once

#include <cstdint>

#include "tensor/quant_blocks.h"
#include "tensor/type_traits.h"

namespace shardlm::internal {

// Each fills `traits` if traits.type is one of its family's types, else leaves it alone.
void FillGenericFloatKernels(TypeTraits& traits);    // kernels_generic_float.cc
void FillGenericLegacyKernels(TypeTraits& traits);   // kernels_generic_legacy.cc
void FillGenericKQuantKernels(TypeTraits& traits);   // kernels_generic_kquants.cc
void FillGenericIQuantKernels(TypeTraits& traits);   // kernels_generic_iquants.cc
void FillGenericGridKernels(TypeTraits& traits);     // kernels_generic_grids.cc
void FillGenericTernaryKernels(TypeTraits& traits);  // kernels_generic_ternary.cc

// F32 / F16 / BF16 (kernels_generic_float.cc). Dot products accumulate in double, like
// ggml's scalar ggml_vec_dot_f32/f16/bf16 (products are rounded to float first).
void DequantizeRowF32(const void* src, float* dst, int64_t n);
void DequantizeRowF16(const void* src, float* dst, int64_t n);
void DequantizeRowBF16(const void* src, float* dst, int64_t n);
void QuantizeRowF32(const float* src, void* dst, int64_t n);
void QuantizeRowF16(const float* src, void* dst, int64_t n);
void QuantizeRowBF16(const float* src, void* dst, int64_t n);
void VecDotF32(int64_t n, const void* w, const void* a, float* out);
void VecDotF16(int64_t n, const void* w, const void* a, float* out);
void VecDotBF16(int64_t n, const void* w, const void* a, float* out);

// Legacy 32-element blocks (kernels_generic_legacy.cc).
void DequantizeRowQ4_0(const void* src, float* dst, int64_t n);
void DequantizeRowQ4_1(const void* src, float* dst, int64_t n);
void DequantizeRowQ5_0(const void* src, float* dst, int64_t n);
void DequantizeRowQ5_1(const void* src, float* dst, int64_t n);
void DequantizeRowQ8_0(const void* src, float* dst, int64_t n);
void QuantizeRowQ4_0(const float* src, void* dst, int64_t n);
void QuantizeRowQ4_1(const float* src, void* dst, int64_t n);
void QuantizeRowQ5_0(const float* src, void* dst, int64_t n);
void QuantizeRowQ5_1(const float* src, void* dst, int64_t n);
void QuantizeRowQ8_0(const float* src, void* dst, int64_t n);
// x86 activation quantizers: d = amax/127 (fp16), q = round-half-even(x · (127/amax)).
// Q8_1 adds s = fp16(d · Σq) with d before its fp16 rounding.
void QuantizeActQ8_0(const float* src, void* dst, int64_t n);
void QuantizeActQ8_1(const float* src, void* dst, int64_t n);
void VecDotQ4_0Q8_0(int64_t n, const void* w, const void* a, float* out);
void VecDotQ4_1Q8_1(int64_t n, const void* w, const void* a, float* out);
void VecDotQ5_0Q8_0(int64_t n, const void* w, const void* a, float* out);
void VecDotQ5_1Q8_1(int64_t n, const void* w, const void* a, float* out);
void VecDotQ8_0Q8_0(int64_t n, const void* w, const void* a, float* out);

// Non-linear ("i-quant") types (kernels_generic_iquants.cc). IQ4_NL: 32-element blocks of
// table indices, dotted with Q8_0 activations like Q4_0 (table values instead of q − 8).
void DequantizeRowIq4Nl(const void* src, float* dst, int64_t n);
void QuantizeRowIq4Nl(const float* src, void* dst, int64_t n);
void VecDotIq4NlQ8_0(int64_t n, const void* w, const void* a, float* out);
// IQ4_XS: the same levels in 256-element super-blocks with a 6-bit scale per 32, dotted with
// Q8_K activations: each sub-block's exact sum times its scale into the 8 lanes, one fused
// multiply-add by d_w·d_a per super-block.
void DequantizeRowIq4Xs(const void* src, float* dst, int64_t n);
void QuantizeRowIq4Xs(const float* src, void* dst, int64_t n);
void VecDotIq4XsQ8_K(int64_t n, const void* w, const void* a, float* out);
// The 6-bit scale ls (0..63) of sub-block ib of an IQ4_XS super-block (value scale ls − 32).
int Iq4XsScale(uint16_t scales_h, const uint8_t* scales_l, int ib);
// MXFP4: IQ4_NL's shape with FP4 values (kMxfp4Values) under a power-of-two scale.
void DequantizeRowMxfp4(const void* src, float* dst, int64_t n);
void QuantizeRowMxfp4(const float* src, void* dst, int64_t n);
void VecDotMxfp4Q8_0(int64_t n, const void* w, const void* a, float* out);

// Grid i-quants, dotted with Q8_K (kernels_generic_grids.cc; quantizers in
// quantize_grids.cc, not llama-quantize's search: see there).
void DequantizeRowIq2Xxs(const void* src, float* dst, int64_t n);
void DequantizeRowIq2Xs(const void* src, float* dst, int64_t n);
void DequantizeRowIq2S(const void* src, float* dst, int64_t n);
void DequantizeRowIq3Xxs(const void* src, float* dst, int64_t n);
void DequantizeRowIq3S(const void* src, float* dst, int64_t n);
void DequantizeRowIq1S(const void* src, float* dst, int64_t n);
void DequantizeRowIq1M(const void* src, float* dst, int64_t n);
void QuantizeRowIq2Xxs(const float* src, void* dst, int64_t n);
void QuantizeRowIq2Xs(const float* src, void* dst, int64_t n);
void QuantizeRowIq2S(const float* src, void* dst, int64_t n);
void QuantizeRowIq3Xxs(const float* src, void* dst, int64_t n);
void QuantizeRowIq3S(const float* src, void* dst, int64_t n);
void QuantizeRowIq1S(const float* src, void* dst, int64_t n);
void QuantizeRowIq1M(const float* src, void* dst, int64_t n);
void VecDotIq2XxsQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotIq2XsQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotIq2SQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotIq3XxsQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotIq3SQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotIq1SQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotIq1MQ8_K(int64_t n, const void* w, const void* a, float* out);

// Ternary types, dotted with Q8_K (kernels_generic_ternary.cc).
void DequantizeRowTq1_0(const void* src, float* dst, int64_t n);
void DequantizeRowTq2_0(const void* src, float* dst, int64_t n);
void QuantizeRowTq1_0(const float* src, void* dst, int64_t n);
void QuantizeRowTq2_0(const float* src, void* dst, int64_t n);
void VecDotTq1_0Q8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotTq2_0Q8_K(int64_t n, const void* w, const void* a, float* out);
// The digits (0, 1, 2 for −1, 0, 1) of a block's 256 elements, in element order.
void DigitsTq1(const BlockTq1_0& b, int8_t* q);
void DigitsTq2(const BlockTq2_0& b, int8_t* q);

// K-quants, 256-element super-blocks (kernels_generic_kquants.cc, quantize_kquants.cc).
void DequantizeRowQ2_K(const void* src, float* dst, int64_t n);
void DequantizeRowQ3_K(const void* src, float* dst, int64_t n);
void DequantizeRowQ4_K(const void* src, float* dst, int64_t n);
void DequantizeRowQ5_K(const void* src, float* dst, int64_t n);
void DequantizeRowQ6_K(const void* src, float* dst, int64_t n);
void QuantizeRowQ2_K(const float* src, void* dst, int64_t n);
void QuantizeRowQ3_K(const float* src, void* dst, int64_t n);
void QuantizeRowQ4_K(const float* src, void* dst, int64_t n);
void QuantizeRowQ5_K(const float* src, void* dst, int64_t n);
void QuantizeRowQ6_K(const float* src, void* dst, int64_t n);
// Q8_K (x86 uses ggml's reference): iscale = -127/max (max = the signed element of largest
// magnitude), q = min(127, round-half-even(iscale·x)), d = 1/iscale, bsums per 16.
void QuantizeActQ8_K(const float* src, void* dst, int64_t n);
void VecDotQ2_KQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotQ3_KQ8_K(int64_t n, const void* w, const void* a, float* out);
// Unpacked Q2_K / Q3_K quants of one super-block in element order (the dot products' view:
// Q2_K's 0..3, Q3_K's −4..3), and Q3_K's 16 6-bit scales as bytes (still biased by 32).
void UnpackQ2(const BlockQ2_K& b, int8_t* q);
void UnpackQ3(const BlockQ3_K& b, int8_t* q);
void UnpackQ3Scales(const uint8_t* packed, int8_t* scales);
void VecDotQ4_KQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotQ5_KQ8_K(int64_t n, const void* w, const void* a, float* out);
void VecDotQ6_KQ8_K(int64_t n, const void* w, const void* a, float* out);

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K scales array.
inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// The float side of llama.cpp's x86 (AVX2) quantized dot products, which the generic kernels
// reproduce so that logits match llama.cpp's bit for bit where the rest of the graph does:
// integer products go to 8 int32 lanes, lane l holding the elements e of each 32-element
// group with (e % 32) / 4 == l (what maddubs+madd / dpbusd produce); each lane is
// accumulated across blocks with one fused multiply-add by the block scale; the 8 lanes are
// reduced as hsum_float_8 does: (lane i+4 + lane i), then (0 + 2) + (1 + 3).
inline int LaneOf(int e) { return (e & 31) >> 2; }

inline void FmaLanes(float d, const int32_t* lanes, float* acc) {
  for (int l = 0; l < 8; ++l) acc[l] = __builtin_fmaf(d, static_cast<float>(lanes[l]), acc[l]);
}

// One 32-element block of a dot product in that order: the exact integer products of weights q
// and activations qa go to 8 lanes, then acc[l] = fma(d, lane l, acc[l]) with d = d_w · d_a.
inline void BlockLanes(const int* q, const int8_t* qa, float d, float* acc) {
  int32_t lanes[8] = {};
  for (int e = 0; e < 32; ++e) lanes[LaneOf(e)] += q[e] * qa[e];
  FmaLanes(d, lanes, acc);
}

// lanes[l] += Σ over the 8 32-element groups of a super-block of scale16[e / 16] · q[e] · qa[e],
// for the elements e with LaneOf(e) == l (lane l: elements 4l..4l+3 of each group; elements 0..15
// of a group share scale16[2g], 16..31 scale16[2g+1]).
inline void AddScaledLanes(const int8_t* q, const int8_t* qa, const int* scale16, int32_t* lanes) {
  for (int g = 0; g < 8; ++g) {
    for (int l = 0; l < 8; ++l) {
      int sum = 0;
      for (int k = 4 * l; k < 4 * l + 4; ++k) sum += q[32 * g + k] * qa[32 * g + k];
      lanes[l] += scale16[2 * g + l / 4] * sum;
    }
  }
}

inline float HorizontalSum8(const float* acc) {
  float s4[4];
  for (int i = 0; i < 4; ++i) s4[i] = acc[4 + i] + acc[i];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// The element of x[0..n) of largest magnitude, its sign kept (the first of equal magnitudes;
// 0 when every element is 0): the quantizers scale by it, as ggml's do.
inline float SignedAbsMax(const float* x, int n) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = __builtin_fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

// Round to nearest, ties to even, for |x| <= 2^22 (ggml's nearest_int, the float magic add).
inline int NearestInt(float x) {
  const float shifted = x + 12582912.f;  // 1.5 · 2^23: the sum's low mantissa bits hold round(x)
  uint32_t bits;
  __builtin_memcpy(&bits, &shifted, sizeof(bits));
  return static_cast<int>(bits & 0x007FFFFFu) - 0x00400000;
}

}  // namespace shardlm::internal
