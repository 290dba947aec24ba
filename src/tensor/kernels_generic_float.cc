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
namespace {

// Rows of 16-bit values may start at odd addresses (a row of odd length inside a tensor,
// a padded activation buffer): load and store through memcpy, never a uint16_t pointer.
uint16_t Load16(const void* base, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + 2 * i, sizeof(v));
  return v;
}

void Store16(void* base, int64_t i, uint16_t v) {
  std::memcpy(static_cast<uint8_t*>(base) + 2 * i, &v, sizeof(v));
}

float LoadF32(const void* base, int64_t i) {
  float v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + 4 * i, sizeof(v));
  return v;
}

}  // namespace

void DequantizeRowF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeRowF16(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(Load16(src, i));
}

void DequantizeRowBF16(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(Load16(src, i));
}

void QuantizeRowF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void QuantizeRowF16(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Store16(dst, i, Fp32ToFp16(src[i]));
}

void QuantizeRowBF16(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Store16(dst, i, Fp32ToBf16(src[i]));
}

void VecDotF32(int64_t n, const void* w, const void* a, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(LoadF32(w, i) * LoadF32(a, i));
  *out = static_cast<float>(sum);
}

void VecDotF16(int64_t n, const void* w, const void* a, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(Fp16ToFp32(Load16(w, i)) * Fp16ToFp32(Load16(a, i)));
  }
  *out = static_cast<float>(sum);
}

void VecDotBF16(int64_t n, const void* w, const void* a, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(Bf16ToFp32(Load16(w, i)) * Bf16ToFp32(Load16(a, i)));
  }
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
