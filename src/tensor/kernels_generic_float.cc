// Generic kernels of the plain float weight types F32, F16 and BF16.
//
// Goals: activations are converted the way llama.cpp does before its dot product (F16
// weights: activations to fp16, round to nearest even; BF16: to bf16; F32: kept); the dot
// products accumulate products (rounded to float) in double, like ggml's scalar path.
// Non-goals: speed (the ISA files override vec_dot).
#include <cstring>

#include "base/check.h"
#include "tensor/fp16.h"
#include "tensor/kernels_generic.h"

namespace shardlm::internal {

void DequantizeRowF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeRowF16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const fp16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(x[i]);
}

void DequantizeRowBF16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const bf16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(x[i]);
}

void QuantizeRowF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void QuantizeRowF16(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<fp16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToFp16(src[i]);
}

void QuantizeRowBF16(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<bf16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToBf16(src[i]);
}

void VecDotF32(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  *out = static_cast<float>(sum);
}

void VecDotF16(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const fp16_t*>(w);
  const auto* y = static_cast<const fp16_t*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(Fp16ToFp32(x[i]) * Fp16ToFp32(y[i]));
  *out = static_cast<float>(sum);
}

void VecDotBF16(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const bf16_t*>(w);
  const auto* y = static_cast<const bf16_t*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(Bf16ToFp32(x[i]) * Bf16ToFp32(y[i]));
  *out = static_cast<float>(sum);
}

void FillGenericFloatKernels(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kF32:
      traits.act_type = GgmlType::kF32;
      traits.dequantize_row = DequantizeRowF32;
      traits.quantize_row = traits.quantize_act = QuantizeRowF32;
      traits.vec_dot = VecDotF32;
      return;
    case GgmlType::kF16:
      traits.act_type = GgmlType::kF16;
      traits.dequantize_row = DequantizeRowF16;
      traits.quantize_row = traits.quantize_act = QuantizeRowF16;
      traits.vec_dot = VecDotF16;
      return;
    case GgmlType::kBF16:
      traits.act_type = GgmlType::kBF16;
      traits.dequantize_row = DequantizeRowBF16;
      traits.quantize_row = traits.quantize_act = QuantizeRowBF16;
      traits.vec_dot = VecDotBF16;
      return;
    default:
      return;
  }
}

}  // namespace shardlm::internal
