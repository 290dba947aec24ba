// Generic kernels of the non-linear ("i-quant") weight types: IQ4_NL so far.
//
// IQ4_NL stores, per 32 elements, an fp16 scale and 4-bit indices into kIq4NlValues (16 int8
// levels, denser near zero). Its dot product takes Q8_0 activations, as Q4_0's does, with the
// table's level in place of q − 8: the integer sums are exact and the float side is the
// legacy types' (BlockLanes), so every ISA's kernel can give the same bits.
//
// The quantizer is the usual search for the scale: start from the one that maps the largest
// magnitude onto the table's end, try 2·kScaleTries + 1 scales around it, keep the one with
// the least weighted squared error (weights x², as without an importance matrix), then pick
// each element's nearest level for the scale kept.
//
// Goals: dequantization and dot products that read llama.cpp's files as llama.cpp does.
// Non-goals: importance-matrix quantization, speed (the ISA files).
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/kernels_generic.h"
#include "tensor/quant_blocks.h"

namespace shardlm::internal {
namespace {

constexpr int kScaleTries = 7;

// Index of the level of kIq4NlValues nearest to x (the lower one on a tie).
int NearestLevel(float x) {
  const int8_t* v = kIq4NlValues;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;  // v[lo] <= x < v[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < v[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - v[lo] < v[hi] - x ? lo : hi;
}

// Σ w·q·x and Σ w·q² over the block for the levels nearest to x·inverse_scale.
void FitScale(const float* x, float inverse_scale, float* sum_qx, float* sum_q2) {
  *sum_qx = 0;
  *sum_q2 = 0;
  for (int j = 0; j < kQK; ++j) {
    const float q = kIq4NlValues[NearestLevel(inverse_scale * x[j])];
    const float w = x[j] * x[j];
    *sum_qx += w * q * x[j];
    *sum_q2 += w * q * q;
  }
}

void QuantizeBlockIq4Nl(const float* x, BlockIq4Nl* y) {
  const float max = SignedAbsMax(x, kQK);
  std::memset(y->qs, 0, sizeof(y->qs));
  y->d = Fp32ToFp16(0.0f);
  if (std::fabs(max) < 1e-15f) return;
  // The largest magnitude onto the table's far end (−127, or 113 mirrored).
  float d = -max / kIq4NlValues[0];
  float sum_qx, sum_q2;
  FitScale(x, 1.0f / d, &sum_qx, &sum_q2);
  if (sum_q2 > 0) d = sum_qx / sum_q2;
  float best = d * sum_qx;
  for (int t = -kScaleTries; t <= kScaleTries; ++t) {
    FitScale(x, (t + kIq4NlValues[0]) / max, &sum_qx, &sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      d = sum_qx / sum_q2;
      best = d * sum_qx;
    }
  }
  y->d = Fp32ToFp16(d);
  const float inverse = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = NearestLevel(inverse * x[j]);
    const int hi = NearestLevel(inverse * x[j + kQK / 2]);
    y->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// The block's 32 levels in element order.
void Levels(const BlockIq4Nl& b, int* q) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = kIq4NlValues[b.qs[j] & 0x0F];
    q[j + kQK / 2] = kIq4NlValues[b.qs[j] >> 4];
  }
}

}  // namespace

void DequantizeRowIq4Nl(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    int q[kQK];
    Levels(x[i], q);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * static_cast<float>(q[j]);
  }
}

void QuantizeRowIq4Nl(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIq4Nl*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) QuantizeBlockIq4Nl(src + i * kQK, &y[i]);
}

void VecDotIq4NlQ8_0(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int q[kQK];
    Levels(x[ib], q);
    BlockLanes(q, y[ib].qs, Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d), acc);
  }
  *out = HorizontalSum8(acc);
}

void FillGenericIQuantKernels(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kIq4Nl:
      traits = {traits.type,     GgmlType::kQ8_0, kQK, DequantizeRowIq4Nl, QuantizeRowIq4Nl,
                QuantizeActQ8_0, VecDotIq4NlQ8_0};
      return;
    default:
      return;
  }
}

}  // namespace shardlm::internal
