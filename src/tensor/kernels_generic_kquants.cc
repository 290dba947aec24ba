// Generic kernels of the K-quants Q2_K..Q6_K (256-element super-blocks) and of their
// activation type Q8_K: dequantization, activation quantization and dot products.
// The weight quantizers live in quantize_kquants.cc.
//
// Goals: dequantization bit-identical to ggml's dequantize_row_*; Q8_K equal to ggml's
// quantize_row_q8_K_ref (what x86 uses); dot products in the float order of llama.cpp's x86
// AVX2 kernels (kernels_generic.h), including how each type folds in the mins via bsums.
// Non-goals: speed (the ISA files override vec_dot).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/kernels_generic.h"
#include "tensor/quant_blocks.h"

namespace shardlm::internal {
namespace {

constexpr uint32_t kKMask1 = 0x3f3f3f3f;
constexpr uint32_t kKMask2 = 0x0f0f0f0f;
constexpr uint32_t kKMask3 = 0x03030303;

// Q4_K/Q5_K: 8 scales then 8 mins, 6 bits each, unpacked to bytes.
void UnpackK4ScalesMins(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  uint32_t utmp[4];
  std::memcpy(utmp, packed, 12);
  utmp[3] = ((utmp[2] >> 4) & kKMask2) | (((utmp[1] >> 6) & kKMask3) << 4);
  const uint32_t uaux = utmp[1] & kKMask1;
  utmp[1] = (utmp[2] & kKMask2) | (((utmp[0] >> 6) & kKMask3) << 4);
  utmp[2] = uaux;
  utmp[0] &= kKMask1;
  std::memcpy(scales, &utmp[0], 8);
  std::memcpy(mins, &utmp[2], 8);
}

// The 256 signed 6-bit values of a Q6_K block, in element order, minus 32.
void UnpackQ6(const BlockQ6_K& b, int8_t* a) {
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  for (int chunk = 0; chunk < kQK_K; chunk += 128) {
    for (int l = 0; l < 32; ++l) {
      a[l + 0] = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      a[l + 32] = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      a[l + 64] = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      a[l + 96] = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
    }
    a += 128;
    ql += 64;
    qh += 32;
  }
}

void UnpackQ4K(const BlockQ4_K& b, int8_t* q) {
  for (int j = 0; j < kQK_K / 64; ++j) {
    for (int l = 0; l < 32; ++l) {
      q[64 * j + l] = static_cast<int8_t>(b.qs[32 * j + l] & 0xF);
      q[64 * j + 32 + l] = static_cast<int8_t>(b.qs[32 * j + l] >> 4);
    }
  }
}

void UnpackQ5K(const BlockQ5_K& b, int8_t* q) {
  for (int j = 0; j < kQK_K / 64; ++j) {
    for (int l = 0; l < 32; ++l) {
      const int h0 = (b.qh[l] >> (2 * j)) & 1, h1 = (b.qh[l] >> (2 * j + 1)) & 1;
      q[64 * j + l] = static_cast<int8_t>((b.qs[32 * j + l] & 0xF) | (h0 << 4));
      q[64 * j + 32 + l] = static_cast<int8_t>((b.qs[32 * j + l] >> 4) | (h1 << 4));
    }
  }
}

// Σ_j mins[j] · (bsums[2j] + bsums[2j+1]) as ggml's madd of mins by pairwise-added bsums:
// 4 lanes, lane k covering mins 2k and 2k+1.
void MinLanes4(const uint8_t* mins, const BlockQ8_K& y, int32_t* lanes) {
  for (int k = 0; k < 4; ++k) {
    lanes[k] = mins[2 * k] * (y.bsums[4 * k] + y.bsums[4 * k + 1]) +
               mins[2 * k + 1] * (y.bsums[4 * k + 2] + y.bsums[4 * k + 3]);
  }
}

}  // namespace

void UnpackQ3Scales(const uint8_t* packed, int8_t* scales) {
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kKMask2) | (((tmp >> 4) & kKMask3) << 4);
  aux[3] = ((aux[1] >> 4) & kKMask2) | (((tmp >> 6) & kKMask3) << 4);
  aux[0] = (aux[0] & kKMask2) | (((tmp >> 0) & kKMask3) << 4);
  aux[1] = (aux[1] & kKMask2) | (((tmp >> 2) & kKMask3) << 4);
  std::memcpy(scales, aux, 16);
}

void UnpackQ2(const BlockQ2_K& b, int8_t* q) {
  for (int e = 0; e < kQK_K; ++e) {
    q[e] = static_cast<int8_t>((b.qs[e / 128 * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3);
  }
}

void UnpackQ3(const BlockQ3_K& b, int8_t* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int low = (b.qs[e / 128 * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
    q[e] = static_cast<int8_t>(low - (high ? 0 : 4));
  }
}

void DequantizeRowQ2_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int chunk = 0; chunk < kQK_K; chunk += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * (sc & 0xF);
          const float ml = min * (sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *dst++ = dl * static_cast<int8_t>((q[l + 16 * half] >> shift) & 3) - ml;
          }
        }
      }
      q += 32;
    }
  }
}

void DequantizeRowQ3_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = Fp16ToFp32(x[i].d);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    int8_t scales[16];
    UnpackQ3Scales(x[i].scales, scales);
    uint8_t m = 1;
    int is = 0;
    for (int chunk = 0; chunk < kQK_K; chunk += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * (scales[is++] - 32);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            *dst++ = dl * (static_cast<int8_t>((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
          }
        }
        m <<= 1;
      }
      q += 32;
    }
  }
}

void DequantizeRowQ4_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    for (int is = 0; is < 8; is += 2) {
      uint8_t sc, m;
      GetScaleMinK4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      GetScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}

void DequantizeRowQ5_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2) {
      uint8_t sc, m;
      GetScaleMinK4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      GetScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

void DequantizeRowQ6_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    int8_t a[kQK_K];
    UnpackQ6(x[i], a);
    // ggml: y = d * sc * q, evaluated left to right (d·sc first).
    for (int j = 0; j < kQK_K; ++j) dst[j] = d * x[i].scales[j / 16] * a[j];
    dst += kQK_K;
  }
}

void QuantizeActQ8_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    const float max = SignedAbsMax(x, kQK_K);
    if (max == 0) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[g * 16 + l];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void VecDotQ2_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    // Mins first, into the same 8 lanes: lane l = min[2l]·bsums[2l] + min[2l+1]·bsums[2l+1].
    int32_t min_lanes[8];
    for (int l = 0; l < 8; ++l) {
      min_lanes[l] = (x[i].scales[2 * l] >> 4) * y[i].bsums[2 * l] +
                     (x[i].scales[2 * l + 1] >> 4) * y[i].bsums[2 * l + 1];
    }
    FmaLanes(-y[i].d * Fp16ToFp32(x[i].dmin), min_lanes, acc);
    int8_t q[kQK_K];
    UnpackQ2(x[i], q);
    int scale16[16];
    for (int g = 0; g < 16; ++g) scale16[g] = x[i].scales[g] & 0xF;
    int32_t lanes[8] = {};
    AddScaledLanes(q, y[i].qs, scale16, lanes);
    FmaLanes(y[i].d * Fp16ToFp32(x[i].d), lanes, acc);
  }
  *out = HorizontalSum8(acc);
}

void VecDotQ3_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t scales[16];
    UnpackQ3Scales(x[i].scales, scales);
    int scale16[16];
    for (int g = 0; g < 16; ++g) scale16[g] = scales[g] - 32;
    int8_t q[kQK_K];
    UnpackQ3(x[i], q);
    int32_t lanes[8] = {};
    AddScaledLanes(q, y[i].qs, scale16, lanes);
    FmaLanes(y[i].d * Fp16ToFp32(x[i].d), lanes, acc);
  }
  *out = HorizontalSum8(acc);
}

// Q4_K/Q5_K after unpacking: the scale lanes, plus the mins in 4 separate lanes (Q4_K) or
// one running sum (Q5_K), as llama.cpp's two kernels differ there.
void K4ScaleLanes(const int8_t* q, const uint8_t* scales, const int8_t* qa, int32_t* lanes) {
  int scale16[16];
  for (int g = 0; g < 16; ++g) scale16[g] = scales[g / 2];
  AddScaledLanes(q, qa, scale16, lanes);
}

void VecDotQ4_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float acc_m[4] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float dmin = -y[i].d * Fp16ToFp32(x[i].dmin);
    uint8_t scales[8], mins[8];
    UnpackK4ScalesMins(x[i].scales, scales, mins);
    int32_t min_lanes[4];
    MinLanes4(mins, y[i], min_lanes);
    for (int k = 0; k < 4; ++k) {
      acc_m[k] = __builtin_fmaf(dmin, static_cast<float>(min_lanes[k]), acc_m[k]);
    }
    int8_t q[kQK_K];
    UnpackQ4K(x[i], q);
    int32_t lanes[8] = {};
    K4ScaleLanes(q, scales, y[i].qs, lanes);
    FmaLanes(y[i].d * Fp16ToFp32(x[i].d), lanes, acc);
  }
  *out = HorizontalSum8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]));
}

void VecDotQ5_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float summs = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t scales[8], mins[8];
    UnpackK4ScalesMins(x[i].scales, scales, mins);
    int32_t min_lanes[4];
    MinLanes4(mins, y[i], min_lanes);
    const int32_t min_total = min_lanes[0] + min_lanes[1] + min_lanes[2] + min_lanes[3];
    summs += -y[i].d * Fp16ToFp32(x[i].dmin) * static_cast<float>(min_total);
    int8_t q[kQK_K];
    UnpackQ5K(x[i], q);
    int32_t lanes[8] = {};
    K4ScaleLanes(q, scales, y[i].qs, lanes);
    FmaLanes(y[i].d * Fp16ToFp32(x[i].d), lanes, acc);
  }
  *out = HorizontalSum8(acc) + summs;
}

// Q6_K: the lanes take the unsigned 6-bit values (0..63) and the -32 offset is removed per
// lane through bsums (lane l: 32 · (scale[2l]·bsums[2l] + scale[2l+1]·bsums[2l+1])). The
// total is the same as with q - 32 per element, the per-lane split is not, and the split is
// what the float accumulation sees: this form reproduces the fixture goldens of llama.cpp's
// build bit for bit, the per-element form does not.
void VecDotQ6_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    UnpackQ6(x[i], q);
    for (int e = 0; e < kQK_K; ++e) q[e] = static_cast<int8_t>(q[e] + 32);  // 0..63
    int scale16[16];
    for (int g = 0; g < 16; ++g) scale16[g] = x[i].scales[g];
    int32_t lanes[8] = {};
    AddScaledLanes(q, y[i].qs, scale16, lanes);
    for (int l = 0; l < 8; ++l) {
      lanes[l] -= 32 * (x[i].scales[2 * l] * y[i].bsums[2 * l] +
                        x[i].scales[2 * l + 1] * y[i].bsums[2 * l + 1]);
    }
    FmaLanes(y[i].d * Fp16ToFp32(x[i].d), lanes, acc);
  }
  *out = HorizontalSum8(acc);
}

void FillGenericKQuantKernels(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kQ2_K:
      traits = {traits.type,     GgmlType::kQ8_K, kQK_K,         DequantizeRowQ2_K,
                QuantizeRowQ2_K, QuantizeActQ8_K, VecDotQ2_KQ8_K};
      return;
    case GgmlType::kQ3_K:
      traits = {traits.type,     GgmlType::kQ8_K, kQK_K,         DequantizeRowQ3_K,
                QuantizeRowQ3_K, QuantizeActQ8_K, VecDotQ3_KQ8_K};
      return;
    case GgmlType::kQ4_K:
      traits = {traits.type,     GgmlType::kQ8_K, kQK_K,         DequantizeRowQ4_K,
                QuantizeRowQ4_K, QuantizeActQ8_K, VecDotQ4_KQ8_K};
      return;
    case GgmlType::kQ5_K:
      traits = {traits.type,     GgmlType::kQ8_K, kQK_K,         DequantizeRowQ5_K,
                QuantizeRowQ5_K, QuantizeActQ8_K, VecDotQ5_KQ8_K};
      return;
    case GgmlType::kQ6_K:
      traits = {traits.type,     GgmlType::kQ8_K, kQK_K,         DequantizeRowQ6_K,
                QuantizeRowQ6_K, QuantizeActQ8_K, VecDotQ6_KQ8_K};
      return;
    default:
      return;
  }
}

}  // namespace shardlm::internal
