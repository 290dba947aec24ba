// Generic kernels of the K-quants Q2_K..Q6_K (256-element super-blocks) and of their
// activation type Q8_K: dequantization, activation quantization and dot products.
// The weight quantizers live in quantize_kquants.cc.
//
// Goals: dequantization bit-identical to ggml's dequantize_row_*; Q8_K equal to ggml's
// quantize_row_q8_K_ref (what x86 uses); dot products per ggml-cpu's *_generic, including
// their 8-lane float accumulation for Q3_K..Q6_K and the bsums trick for the mins.
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

// The 16 signed 6-bit scales of a Q3_K block, unpacked to bytes (still biased by 32).
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

// Σ over 16-element groups of scale[group] · Σ(q8·a), accumulated in 8 int lanes as ggml's
// generic kernels do (the lane split does not change the exact integer result, but the
// float accumulation below is per lane).
void AccumulateGroups16(const int8_t* q8, const int8_t* a, const int* group_scale, int32_t* aux32) {
  for (int g = 0; g < kQK_K / 16; ++g) {
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 8; ++l) {
        const int16_t prod = static_cast<int16_t>(q8[l] * a[l]);
        aux32[l] += group_scale[g] * prod;
      }
      q8 += 8;
      a += 8;
    }
  }
}

// Dot of one super-block's unpacked weights `a` (int8) with Q8_K quants, per ggml: 8 lanes
// of float sums, each += d · lane_int. Returns nothing: updates sums[8].
void AddLaneSums(float d, const int32_t* aux32, float* sums) {
  for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
}

float ReduceLanes(float sumf, const float* sums) {
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

}  // namespace

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

// The 256 signed 6-bit values of a Q6_K block, in element order, minus 32.
static void UnpackQ6(const BlockQ6_K& b, int8_t* a) {
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
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
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
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q2 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    const uint8_t* sc = x[i].scales;
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (sc[j] >> 4);
    const float dall = y[i].d * Fp16ToFp32(x[i].d);
    const float dmin = y[i].d * Fp16ToFp32(x[i].dmin);
    int isum = 0;
    int is = 0;
    for (int chunk = 0; chunk < kQK_K / 128; ++chunk) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const int d = sc[is++] & 0xF;
          int isuml = 0;
          for (int l = 16 * half; l < 16 * half + 16; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
          isum += d * isuml;
        }
        q8 += 32;
      }
      q2 += 32;
    }
    sumf += dall * isum - dmin * summs;
  }
  *out = sumf;
}

void VecDotQ3_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sums[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t aux8[kQK_K];
    int8_t* p = aux8;
    const uint8_t* q3 = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    for (int chunk = 0; chunk < kQK_K; chunk += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int l = 0; l < 32; ++l) {
          p[l] = static_cast<int8_t>(((q3[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        }
        p += 32;
        m <<= 1;
      }
      q3 += 32;
    }
    int8_t scales[16];
    UnpackQ3Scales(x[i].scales, scales);
    int group_scale[16];
    for (int g = 0; g < 16; ++g) group_scale[g] = scales[g] - 32;
    int32_t aux32[8] = {};
    AccumulateGroups16(y[i].qs, aux8, group_scale, aux32);
    AddLaneSums(Fp16ToFp32(x[i].d) * y[i].d, aux32, sums);
  }
  *out = ReduceLanes(0.0f, sums);
}

// Q4_K and Q5_K share everything but the unpacking of the quants.
static float DotK4Style(const int8_t* aux8, const uint8_t* packed_scales, float d_w, float dmin_w,
                        const BlockQ8_K& y, float* sums) {
  uint8_t scales[8], mins[8];
  UnpackK4ScalesMins(packed_scales, scales, mins);
  int sumi = 0;
  for (int j = 0; j < kQK_K / 16; ++j) sumi += y.bsums[j] * mins[j / 2];
  int group_scale[16];
  for (int g = 0; g < 16; ++g) group_scale[g] = scales[g / 2];
  int32_t aux32[8] = {};
  AccumulateGroups16(y.qs, aux8, group_scale, aux32);
  AddLaneSums(d_w * y.d, aux32, sums);
  const float dmin = dmin_w * y.d;
  return dmin * sumi;
}

void VecDotQ4_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sums[8] = {};
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t aux8[kQK_K];
    const uint8_t* q4 = x[i].qs;
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int l = 0; l < 32; ++l) aux8[64 * j + l] = static_cast<int8_t>(q4[l] & 0xF);
      for (int l = 0; l < 32; ++l) aux8[64 * j + 32 + l] = static_cast<int8_t>(q4[l] >> 4);
      q4 += 32;
    }
    sumf -= DotK4Style(aux8, x[i].scales, Fp16ToFp32(x[i].d), Fp16ToFp32(x[i].dmin), y[i], sums);
  }
  *out = ReduceLanes(sumf, sums);
}

void VecDotQ5_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sums[8] = {};
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t aux8[kQK_K];
    const uint8_t* q4 = x[i].qs;
    const uint8_t* hm = x[i].qh;
    uint8_t m = 1;
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int l = 0; l < 32; ++l) {
        aux8[64 * j + l] = static_cast<int8_t>((q4[l] & 0xF) + (hm[l] & m ? 16 : 0));
      }
      m <<= 1;
      for (int l = 0; l < 32; ++l) {
        aux8[64 * j + 32 + l] = static_cast<int8_t>((q4[l] >> 4) + (hm[l] & m ? 16 : 0));
      }
      m <<= 1;
      q4 += 32;
    }
    sumf -= DotK4Style(aux8, x[i].scales, Fp16ToFp32(x[i].d), Fp16ToFp32(x[i].dmin), y[i], sums);
  }
  *out = ReduceLanes(sumf, sums);
}

void VecDotQ6_KQ8_K(int64_t n, const void* w, const void* a, float* out) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sums[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t aux8[kQK_K];
    UnpackQ6(x[i], aux8);
    int group_scale[16];
    for (int g = 0; g < 16; ++g) group_scale[g] = x[i].scales[g];
    int32_t aux32[8] = {};
    AccumulateGroups16(y[i].qs, aux8, group_scale, aux32);
    AddLaneSums(Fp16ToFp32(x[i].d) * y[i].d, aux32, sums);
  }
  *out = ReduceLanes(0.0f, sums);
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
