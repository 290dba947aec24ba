// Generic kernels of the 4-bit table types: IQ4_NL, IQ4_XS and MXFP4 (kernels_generic_grids.cc
// has the other i-quants).
//
// IQ4_NL stores, per 32 elements, an fp16 scale and 4-bit indices into kIq4NlValues (16 int8
// levels, denser near zero). Its dot product takes Q8_0 activations, as Q4_0's does, with the
// table's level in place of q − 8: the integer sums are exact and the float side is the
// legacy types' (BlockLanes), so every ISA's kernel can give the same bits.
//
// IQ4_XS has the same levels in 256-element super-blocks: a 6-bit scale per 32 elements under
// one fp16 scale, dotted with Q8_K activations (the K-quants' float side).
//
// The quantizer is the usual search for the scale: start from the one that maps the largest
// magnitude onto the table's end, try 2·kScaleTries + 1 scales around it, keep the one with
// the least weighted squared error (weights x², as without an importance matrix), then pick
// each element's nearest level for the scale kept (IQ4_XS: for the sub-block's 6-bit scale).
//
// MXFP4 is IQ4_NL's shape with FP4 (E2M1) values and a power-of-two scale per 32 (OCP
// microscaling); its quantizer is ggml's, byte for byte.
//
// Goals: dequantization and dot products that read llama.cpp's files as llama.cpp does.
// Non-goals: importance-matrix quantization, speed (the ISA files).
#include <algorithm>
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

// The scale of the least weighted squared error for the 32 elements x (0 for zeros).
float BestScale(const float* x) {
  const float max = SignedAbsMax(x, kQK);
  if (std::fabs(max) < 1e-15f) return 0.0f;
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
  return d;
}

// Each element's nearest level for scale d, packed in 16 bytes (low nibbles: elements 0-15).
void PackLevels(const float* x, float d, uint8_t* qs) {
  const float inverse = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = NearestLevel(inverse * x[j]);
    const int hi = NearestLevel(inverse * x[j + kQK / 2]);
    qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void QuantizeBlockIq4Nl(const float* x, BlockIq4Nl* y) {
  const float d = BestScale(x);
  y->d = Fp32ToFp16(d);
  PackLevels(x, d, y->qs);
}

// Each sub-block's best scale, then one fp16 scale for the super-block that maps the largest
// of them onto −32 and 6-bit multiples of it per sub-block, whose levels are chosen again.
void QuantizeBlockIq4Xs(const float* x, BlockIq4Xs* y) {
  float scales[kQK_K / kQK];
  float max_scale = 0, max_abs = 0;
  for (int ib = 0; ib < kQK_K / kQK; ++ib) {
    scales[ib] = BestScale(x + ib * kQK);
    if (std::fabs(scales[ib]) > max_abs) {
      max_abs = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  const float d = -max_scale / 32;
  y->d = Fp32ToFp16(d);
  y->scales_h = 0;
  std::memset(y->scales_l, 0, sizeof(y->scales_l));
  const float inverse = d != 0 ? 1.0f / d : 0.0f;
  for (int ib = 0; ib < kQK_K / kQK; ++ib) {
    const int l = std::min(31, std::max(-32, NearestInt(inverse * scales[ib])));
    PackLevels(x + ib * kQK, d * l, y->qs + ib * kQK / 2);
    const int ls = l + 32;
    y->scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
    y->scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
  }
}

// 32 elements' levels (of `values`: kIq4NlValues or kMxfp4Values) in element order from
// their 16 bytes.
void Levels(const uint8_t* qs, int* q, const int8_t* values = kIq4NlValues) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = values[qs[j] & 0x0F];
    q[j + kQK / 2] = values[qs[j] >> 4];
  }
}

// dst[0..32) = d · the levels of 32 elements (their 16 bytes).
void ScaledLevels(const uint8_t* qs, float d, float* dst, const int8_t* values = kIq4NlValues) {
  int q[kQK];
  Levels(qs, q, values);
  for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(q[j]);
}

// The MXFP4 block scale: 2^(e − 128), the half that undoes kMxfp4Values' doubling (e < 2 are
// subnormal floats).
float Mxfp4Scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return scale;
}

// ggml's MXFP4 quantizer: the exponent that puts the largest magnitude in [4, 8) times the
// scale (FP4's top octave, 4 and 6), then each element's nearest value (the first of ties).
void QuantizeBlockMxfp4(const float* x, BlockMxfp4* y) {
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  y->e = amax > 0 ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : 0;
  const float d = Mxfp4Scale(y->e);
  auto nearest = [d](float v) {
    int best = 0;
    float best_err = std::fabs(kMxfp4Values[0] * d - v);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(kMxfp4Values[i] * d - v);
      if (err < best_err) best = i, best_err = err;
    }
    return best;
  };
  for (int j = 0; j < kQK / 2; ++j) {
    y->qs[j] = static_cast<uint8_t>(nearest(x[j]) | (nearest(x[j + kQK / 2]) << 4));
  }
}

}  // namespace

int Iq4XsScale(uint16_t scales_h, const uint8_t* scales_l, int ib) {
  return ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
}

void DequantizeRowIq4Nl(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) ScaledLevels(x[i].qs, Fp16ToFp32(x[i].d), dst + i * kQK);
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
    Levels(x[ib].qs, q);
    BlockLanes(q, y[ib].qs, Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d), acc);
  }
  *out = HorizontalSum8(acc);
}

void DequantizeRowIq4Xs(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIq4Xs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int ib = 0; ib < kQK_K / kQK; ++ib) {
      const float dl = d * static_cast<float>(Iq4XsScale(x[i].scales_h, x[i].scales_l, ib) - 32);
      ScaledLevels(x[i].qs + ib * kQK / 2, dl, dst + i * kQK_K + ib * kQK);
    }
  }
}

void QuantizeRowIq4Xs(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIq4Xs*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) QuantizeBlockIq4Xs(src + i * kQK_K, &y[i]);
}

void VecDotIq4XsQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockIq4Xs*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t lanes[8] = {};
    for (int ib = 0; ib < kQK_K / kQK; ++ib) {
      const int scale = Iq4XsScale(x[i].scales_h, x[i].scales_l, ib) - 32;
      int q[kQK];
      Levels(x[i].qs + ib * kQK / 2, q);
      int32_t sums[8] = {};
      for (int e = 0; e < kQK; ++e) sums[LaneOf(e)] += q[e] * y[i].qs[ib * kQK + e];
      for (int l = 0; l < 8; ++l) lanes[l] += scale * sums[l];
    }
    FmaLanes(y[i].d * Fp16ToFp32(x[i].d), lanes, acc);
  }
  *out = HorizontalSum8(acc);
}

void DequantizeRowMxfp4(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockMxfp4*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    ScaledLevels(x[i].qs, Mxfp4Scale(x[i].e), dst + i * kQK, kMxfp4Values);
  }
}

void QuantizeRowMxfp4(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockMxfp4*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) QuantizeBlockMxfp4(src + i * kQK, &y[i]);
}

void VecDotMxfp4Q8_0(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int q[kQK];
    Levels(x[ib].qs, q, kMxfp4Values);
    BlockLanes(q, y[ib].qs, Fp16ToFp32(y[ib].d) * Mxfp4Scale(x[ib].e), acc);
  }
  *out = HorizontalSum8(acc);
}

void FillGenericIQuantKernels(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kIq4Nl:
      traits = {traits.type,     GgmlType::kQ8_0, kQK, DequantizeRowIq4Nl, QuantizeRowIq4Nl,
                QuantizeActQ8_0, VecDotIq4NlQ8_0};
      return;
    case GgmlType::kIq4Xs:
      traits = {traits.type,      GgmlType::kQ8_K, kQK_K,          DequantizeRowIq4Xs,
                QuantizeRowIq4Xs, QuantizeActQ8_K, VecDotIq4XsQ8_K};
      return;
    case GgmlType::kMxfp4:
      traits = {traits.type,     GgmlType::kQ8_0, kQK, DequantizeRowMxfp4, QuantizeRowMxfp4,
                QuantizeActQ8_0, VecDotMxfp4Q8_0};
      return;
    default:
      return;
  }
}

}  // namespace shardlm::internal
