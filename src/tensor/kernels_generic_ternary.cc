// Generic kernels of the ternary types TQ1_0 and TQ2_0: values d · {−1, 0, 1}, 256 per
// block, packed five trits per byte (TQ1_0, 1.69 bits per weight) or 2 bits each (TQ2_0).
//
// Both dot products against Q8_K take the stored digit q ∈ {0, 1, 2} and subtract the
// activations' sum: Σ (q − 1)·a = Σ q·a − Σ a, where the second sum comes from the Q8_K block
// sums (per 32 elements, into the lane llama.cpp's x86 kernel puts it); exact integer lanes,
// one fused multiply-add by d_w·d_a per block. The quantizers are ggml's, byte for byte.
//
// Goals: files from llama.cpp read as llama.cpp reads them. Non-goals: speed (ISA files).
#include <cmath>

#include "tensor/fp16.h"
#include "tensor/kernels_generic.h"
#include "tensor/quant_blocks.h"

namespace shardlm::internal {
namespace {

constexpr uint8_t kPow3[6] = {1, 3, 9, 27, 81, 243};

// Trit n (0 = the most significant) of a TQ1_0 byte: the byte holds the five trits as a base-3
// fraction of 256, so multiplying by 3^n brings trit n to the top.
int Trit(uint8_t byte, int n) {
  const uint8_t shifted = static_cast<uint8_t>(byte * kPow3[n]);
  return (static_cast<uint16_t>(shifted) * 3) >> 8;
}

}  // namespace

void DigitsTq1(const BlockTq1_0& b, int8_t* q) {
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 32; ++m) q[32 * n + m] = static_cast<int8_t>(Trit(b.qs[m], n));
  }
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 16; ++m) q[160 + 16 * n + m] = static_cast<int8_t>(Trit(b.qs[32 + m], n));
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) q[240 + 4 * n + j] = static_cast<int8_t>(Trit(b.qh[j], n));
  }
}

void DigitsTq2(const BlockTq2_0& b, int8_t* q) {
  for (int j = 0; j < 2; ++j) {
    for (int l = 0; l < 4; ++l) {
      for (int m = 0; m < 32; ++m) {
        q[128 * j + 32 * l + m] = static_cast<int8_t>((b.qs[32 * j + m] >> (2 * l)) & 3);
      }
    }
  }
}

namespace {

template <typename Block, void (*Digits)(const Block&, int8_t*)>
void DequantizeTernary(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    Digits(x[i], q);
    const float d = Fp16ToFp32(x[i].d);
    for (int e = 0; e < kQK_K; ++e) dst[i * kQK_K + e] = static_cast<float>(q[e] - 1) * d;
  }
}

template <typename Block, void (*Digits)(const Block&, int8_t*)>
void DotTernary(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    Digits(x[i], q);
    int32_t lanes[8] = {};
    for (int e = 0; e < kQK_K; ++e) lanes[LaneOf(e)] += q[e] * y[i].qs[e];
    for (int l = 0; l < 8; ++l) lanes[l] -= y[i].bsums[2 * l] + y[i].bsums[2 * l + 1];
    FmaLanes(y[i].d * Fp16ToFp32(x[i].d), lanes, acc);
  }
  *out = HorizontalSum8(acc);
}

// The digit of x·inverse (ggml: lroundf, so ties away from zero), 0..2.
int Digit(float x, float inverse) { return static_cast<int>(std::lround(x * inverse)) + 1; }

float AbsMax(const float* x) {
  float amax = 0;
  for (int j = 0; j < kQK_K; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  return amax;
}

// Five (or four, shifted up one place) trits as a base-3 fraction of 256, rounded up.
uint8_t PackTrits(int value) { return static_cast<uint8_t>((value * 256 + 242) / 243); }

void QuantizeBlockTq1(const float* x, BlockTq1_0* y) {
  const float d = AbsMax(x);
  const float inverse = d != 0 ? 1.0f / d : 0.0f;
  y->d = Fp32ToFp16(d);
  for (int m = 0; m < 32; ++m) {
    int value = 0;
    for (int n = 0; n < 5; ++n) value = value * 3 + Digit(x[m + 32 * n], inverse);
    y->qs[m] = PackTrits(value);
  }
  for (int m = 0; m < 16; ++m) {
    int value = 0;
    for (int n = 0; n < 5; ++n) value = value * 3 + Digit(x[160 + m + 16 * n], inverse);
    y->qs[32 + m] = PackTrits(value);
  }
  for (int j = 0; j < 4; ++j) {
    int value = 0;
    for (int n = 0; n < 4; ++n) value = value * 3 + Digit(x[240 + j + 4 * n], inverse);
    y->qh[j] = PackTrits(value * 3);
  }
}

void QuantizeBlockTq2(const float* x, BlockTq2_0* y) {
  const float d = AbsMax(x);
  const float inverse = d != 0 ? 1.0f / d : 0.0f;
  y->d = Fp32ToFp16(d);
  for (int j = 0; j < 2; ++j) {
    for (int m = 0; m < 32; ++m) {
      int byte = 0;
      for (int l = 0; l < 4; ++l) byte |= (Digit(x[128 * j + 32 * l + m], inverse) & 3) << (2 * l);
      y->qs[32 * j + m] = static_cast<uint8_t>(byte);
    }
  }
}

template <typename Block, void (*Quantize)(const float*, Block*)>
void QuantizeTernary(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) Quantize(src + i * kQK_K, &y[i]);
}

}  // namespace

void DequantizeRowTq1_0(const void* src, float* dst, int64_t n) {
  DequantizeTernary<BlockTq1_0, DigitsTq1>(src, dst, n);
}
void DequantizeRowTq2_0(const void* src, float* dst, int64_t n) {
  DequantizeTernary<BlockTq2_0, DigitsTq2>(src, dst, n);
}
void QuantizeRowTq1_0(const float* src, void* dst, int64_t n) {
  QuantizeTernary<BlockTq1_0, QuantizeBlockTq1>(src, dst, n);
}
void QuantizeRowTq2_0(const float* src, void* dst, int64_t n) {
  QuantizeTernary<BlockTq2_0, QuantizeBlockTq2>(src, dst, n);
}
void VecDotTq1_0Q8_K(int64_t n, const void* w, const void* a, float* out) {
  DotTernary<BlockTq1_0, DigitsTq1>(n, w, a, out);
}
void VecDotTq2_0Q8_K(int64_t n, const void* w, const void* a, float* out) {
  DotTernary<BlockTq2_0, DigitsTq2>(n, w, a, out);
}

void FillGenericTernaryKernels(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kTq1_0:
      traits = {traits.type,      GgmlType::kQ8_K, kQK_K,          DequantizeRowTq1_0,
                QuantizeRowTq1_0, QuantizeActQ8_K, VecDotTq1_0Q8_K};
      return;
    case GgmlType::kTq2_0:
      traits = {traits.type,      GgmlType::kQ8_K, kQK_K,          DequantizeRowTq2_0,
                QuantizeRowTq2_0, QuantizeActQ8_K, VecDotTq2_0Q8_K};
      return;
    default:
      return;
  }
}

}  // namespace shardlm::internal
