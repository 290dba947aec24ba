// Generic kernels of the legacy 32-element block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and of
// their activation types Q8_0 / Q8_1.
//
// Goals: dequantization bit-identical to ggml's dequantize_row_*; weight quantizers equal
// to ggml's quantize_row_*_ref; activation quantizers equal to llama.cpp's x86 AVX path
// (id = 127/amax, round half to even), so every ISA sees the same quantized activations;
// dot products in llama.cpp's x86 float order (kernels_generic.h): exact integer sums.
// Non-goals: speed (the ISA files override vec_dot and may override quantize_act).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "tensor/fp16.h"
#include "tensor/kernels_generic.h"
#include "tensor/quant_blocks.h"

namespace shardlm::internal {
namespace {

void MinMax(const float* x, int count, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < count; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

uint32_t LoadQh(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return bits;
}

// The 5th bit of element j (0..15) and j + 16 of a Q5 block, as 0 or 16.
int HighBitLo(uint32_t qh, int j) { return static_cast<int>(((qh >> j) << 4) & 0x10); }
int HighBitHi(uint32_t qh, int j) { return static_cast<int>((qh >> (j + 12)) & 0x10); }

// x86 activation block: d = amax/127, q = rne(x · 127/amax). Returns d before its fp16
// rounding; stores fp16(d) in *d_out (memcpy: d_out points into a packed block, maybe
// unaligned).
float QuantizeActBlock(const float* x, int8_t* qs, void* d_out) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const float ax = std::fabs(x[j]);
    amax = ax > amax ? ax : amax;  // maxps (no fmaxf call); NaN-free inputs assumed
  }
  const float d = amax / 127.f;
  const fp16_t d_half = Fp32ToFp16(d);
  std::memcpy(d_out, &d_half, sizeof(d_half));
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  // Round half to even, as _mm256_round_ps(_MM_ROUND_NEAREST) does (|x·id| <= 127).
  for (int j = 0; j < kQK; ++j) qs[j] = static_cast<int8_t>(NearestInt(x[j] * id));
  return d;
}

}  // namespace

void DequantizeRowQ4_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[i * kQK + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      dst[i * kQK + j + kQK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeRowQ4_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float m = Fp16ToFp32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[i * kQK + j] = (x[i].qs[j] & 0x0F) * d + m;
      dst[i * kQK + j + kQK / 2] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

void DequantizeRowQ5_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint32_t qh = LoadQh(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[i * kQK + j] = (((x[i].qs[j] & 0x0F) | HighBitLo(qh, j)) - 16) * d;
      dst[i * kQK + j + kQK / 2] = (((x[i].qs[j] >> 4) | HighBitHi(qh, j)) - 16) * d;
    }
  }
}

void DequantizeRowQ5_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float m = Fp16ToFp32(x[i].m);
    const uint32_t qh = LoadQh(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[i * kQK + j] = ((x[i].qs[j] & 0x0F) | HighBitLo(qh, j)) * d + m;
      dst[i * kQK + j + kQK / 2] = ((x[i].qs[j] >> 4) | HighBitHi(qh, j)) * d + m;
    }
  }
}

void DequantizeRowQ8_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = x[i].qs[j] * d;
  }
}

void QuantizeRowQ4_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = SignedAbsMax(x, kQK) / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int hi =
          std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kQK / 2] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void QuantizeRowQ4_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float min, max;
    MinMax(x, kQK, &min, &max);
    const float d = (max - min) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int hi =
          std::min(15, static_cast<int>(static_cast<int8_t>((x[j + kQK / 2] - min) * id + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void QuantizeRowQ5_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = SignedAbsMax(x, kQK) / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int hi =
          std::min(31, static_cast<int>(static_cast<int8_t>(x[j + kQK / 2] * id + 16.5f)));
      y[i].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= ((static_cast<uint32_t>(lo) & 0x10u) >> 4) << j;
      qh |= ((static_cast<uint32_t>(hi) & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void QuantizeRowQ5_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float min, max;
    MinMax(x, kQK, &min, &max);
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint32_t lo = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
      const uint32_t hi = static_cast<uint8_t>((x[j + kQK / 2] - min) * id + 0.5f);
      y[i].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= ((lo & 0x10u) >> 4) << j;
      qh |= ((hi & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void QuantizeRowQ8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void QuantizeActQ8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) QuantizeActBlock(src + i * kQK, y[i].qs, &y[i].d);
}

void QuantizeActQ8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = QuantizeActBlock(src + i * kQK, y[i].qs, &y[i].d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += y[i].qs[j];
    y[i].s = Fp32ToFp16(d * static_cast<float>(sum));
  }
}

void VecDotQ4_0Q8_0(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int q[kQK];
    for (int j = 0; j < kQK / 2; ++j) {
      q[j] = (x[ib].qs[j] & 0x0F) - 8;
      q[j + kQK / 2] = (x[ib].qs[j] >> 4) - 8;
    }
    BlockLanes(q, y[ib].qs, Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d), acc);
  }
  *out = HorizontalSum8(acc);
}

// Q4_1/Q5_1: the weight-min term m·s is summed separately (plain multiply-add, as llama.cpp
// does) and added after the lane reduction.
void VecDotQ4_1Q8_1(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float acc[8] = {};
  float summs = 0;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    summs += Fp16ToFp32(x[ib].m) * Fp16ToFp32(y[ib].s);
    int q[kQK];
    for (int j = 0; j < kQK / 2; ++j) {
      q[j] = x[ib].qs[j] & 0x0F;
      q[j + kQK / 2] = x[ib].qs[j] >> 4;
    }
    BlockLanes(q, y[ib].qs, Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d), acc);
  }
  *out = HorizontalSum8(acc) + summs;
}

void VecDotQ5_0Q8_0(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const uint32_t qh = LoadQh(x[ib].qh);
    int q[kQK];
    for (int j = 0; j < kQK / 2; ++j) {
      q[j] = ((x[ib].qs[j] & 0x0F) | HighBitLo(qh, j)) - 16;
      q[j + kQK / 2] = ((x[ib].qs[j] >> 4) | HighBitHi(qh, j)) - 16;
    }
    BlockLanes(q, y[ib].qs, Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d), acc);
  }
  *out = HorizontalSum8(acc);
}

void VecDotQ5_1Q8_1(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float acc[8] = {};
  float summs = 0;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    summs += Fp16ToFp32(x[ib].m) * Fp16ToFp32(y[ib].s);
    const uint32_t qh = LoadQh(x[ib].qh);
    int q[kQK];
    for (int j = 0; j < kQK / 2; ++j) {
      q[j] = (x[ib].qs[j] & 0x0F) | HighBitLo(qh, j);
      q[j + kQK / 2] = (x[ib].qs[j] >> 4) | HighBitHi(qh, j);
    }
    BlockLanes(q, y[ib].qs, Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d), acc);
  }
  *out = HorizontalSum8(acc) + summs;
}

void VecDotQ8_0Q8_0(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = x[ib].qs[j];
    BlockLanes(q, y[ib].qs, Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d), acc);
  }
  *out = HorizontalSum8(acc);
}

void FillGenericLegacyKernels(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kQ4_0:
      traits = {traits.type,     GgmlType::kQ8_0, kQK,           DequantizeRowQ4_0,
                QuantizeRowQ4_0, QuantizeActQ8_0, VecDotQ4_0Q8_0};
      return;
    case GgmlType::kQ4_1:
      traits = {traits.type,     GgmlType::kQ8_1, kQK,           DequantizeRowQ4_1,
                QuantizeRowQ4_1, QuantizeActQ8_1, VecDotQ4_1Q8_1};
      return;
    case GgmlType::kQ5_0:
      traits = {traits.type,     GgmlType::kQ8_0, kQK,           DequantizeRowQ5_0,
                QuantizeRowQ5_0, QuantizeActQ8_0, VecDotQ5_0Q8_0};
      return;
    case GgmlType::kQ5_1:
      traits = {traits.type,     GgmlType::kQ8_1, kQK,           DequantizeRowQ5_1,
                QuantizeRowQ5_1, QuantizeActQ8_1, VecDotQ5_1Q8_1};
      return;
    case GgmlType::kQ8_0:
      traits = {traits.type,     GgmlType::kQ8_0, kQK,           DequantizeRowQ8_0,
                QuantizeRowQ8_0, QuantizeActQ8_0, VecDotQ8_0Q8_0};
      return;
    default:
      return;
  }
}

}  // namespace shardlm::internal
