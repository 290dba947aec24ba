// Internal to the activation quantizer files (act_avx2.cc, act_avx512.cc, compiled with at least
// the avx2/f16c flags): what they share around each ISA's one-block quantizer. The Q8_0 and
// Q8_1 rows are loops over 32-element blocks; the registration picks the quantizer by the
// weight type's act_type.
//
// Anonymous namespace: each including file gets its own copies, compiled for its ISA.
#pragma once

#include <cstring>

#include "tensor/intrinsics.h"
#include "tensor/kernels_impl.h"
#include "tensor/quant_blocks.h"

namespace shardlm::internal::act {
namespace {

// Round to nearest even through F16C, what the generic Fp32ToFp16 mirrors.
inline fp16_t F32ToFp16(float f) {
  return static_cast<fp16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// An ISA's one-block quantizer: 32 floats at x to qs and fp16(d) like the generic
// QuantizeActBlock; returns d (f32) and, when sum is not null, Σ qs through it.
using BlockFn = float (*)(const float* x, int8_t* qs, fp16_t* d_half, int* sum);

template <BlockFn kBlock>
void QuantizeActQ8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    fp16_t d;
    kBlock(src + i * kQK, y[i].qs, &d, nullptr);
    std::memcpy(&y[i].d, &d, sizeof(d));
  }
}

template <BlockFn kBlock>
void QuantizeActQ8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    fp16_t d_half;
    int sum = 0;
    const float d = kBlock(src + i * kQK, y[i].qs, &d_half, &sum);
    const fp16_t s = F32ToFp16(d * static_cast<float>(sum));
    std::memcpy(&y[i].d, &d_half, sizeof(d_half));
    std::memcpy(&y[i].s, &s, sizeof(s));
  }
}

// Sets the type's quantize_act where its act_type is Q8_0, Q8_1 or Q8_K.
template <BlockFn kBlock, void (*kQ8_K)(const float*, void*, int64_t)>
void InstallActQuantizers(TypeTraits& traits) {
  switch (traits.act_type) {
    case GgmlType::kQ8_0:
      traits.quantize_act = QuantizeActQ8_0<kBlock>;
      break;
    case GgmlType::kQ8_1:
      traits.quantize_act = QuantizeActQ8_1<kBlock>;
      break;
    case GgmlType::kQ8_K:
      traits.quantize_act = kQ8_K;
      break;
    default:
      break;
  }
}

}  // namespace
}  // namespace shardlm::internal::act
