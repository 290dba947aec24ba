// Weight quantizers of the K-quants Q2_K..Q6_K: reimplementations of ggml's reference
// quantizers (quantize_row_q*_K_ref), which is what llama-quantize runs without an imatrix.
//
// Goals: the same search (per-group scale/min fits, then 4/6/8-bit scale quantization, then
// requantization against the rounded scales), with the same float operations in the same
// order, so files written by `gguf synth` look like llama-quantize's; used by tests as the
// "realistic" input of dequantization and dot products.
// Non-goals: imatrix-weighted quantization (quantize_row_*_impl), speed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "tensor/fp16.h"
#include "tensor/kernels_generic.h"
#include "tensor/quant_blocks.h"

namespace shardlm::internal {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Scale (and min, as a positive number) of `n` values quantized to [0, nmax] with a weighted
// least-squares refinement over `nstep` candidate scales (ggml's make_qkx2_quants). Kept as
// one function, statement for statement, so its float operations stay in ggml's order
// (llama_compat_test.cc checks the bytes against llama-quantize's).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                     bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Σ w·x·l and Σ w·l² (w = x²) of the levels l = clamp(round(iscale·x), -nmax, nmax-1) that
// the symmetric fits of MakeQxQuants and MakeQ3Quants score a scale by, summed in ggml's order.
struct SymmetricFit {
  float sumlx = 0;
  float suml2 = 0;
};

// Fits x to the levels of `iscale`; when L is not null, stores each level plus `bias` in it.
SymmetricFit FitSymmetricLevels(int n, int nmax, const float* x, float iscale, int8_t* L,
                                int bias) {
  SymmetricFit fit;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    if (L != nullptr) L[i] = static_cast<int8_t>(l + bias);
    const float w = x[i] * x[i];
    fit.sumlx += w * x[i] * l;
    fit.suml2 += w * l * l;
  }
  return fit;
}

// The signed element of largest magnitude of a group the symmetric fits scale by, or nullopt
// with L zeroed when the group is all (near) zeros, which both fits give scale 0.
std::optional<float> SymmetricGroupMax(int n, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, 0);
    return std::nullopt;
  }
  return max;
}

// Symmetric scale of `n` values quantized to [-nmax, nmax-1], stored as L = l + nmax, with the
// x²-weighted refinement of ggml's make_qx_quants(rmse_type = 1, qw = NULL).
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  const std::optional<float> max = SymmetricGroupMax(n, x, L);
  if (!max) return 0.f;
  const SymmetricFit first = FitSymmetricLevels(n, nmax, x, -nmax / *max, L, nmax);
  float scale = first.suml2 ? first.sumlx / first.suml2 : 0.0f;
  float best = scale * first.sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(nmax + 0.1f * is) / *max;
    const SymmetricFit trial = FitSymmetricLevels(n, nmax, x, iscale, nullptr, 0);
    if (trial.suml2 > 0 && trial.sumlx * trial.sumlx > best * trial.suml2) {
      FitSymmetricLevels(n, nmax, x, iscale, L, nmax);  // keeps this scale's levels
      scale = trial.sumlx / trial.suml2;
      best = scale * trial.sumlx;
    }
  }
  return scale;
}

// Q3_K's group fit (ggml's make_q3_quants with do_rmse): coordinate descent on x²-weighted
// error, 5 passes at most. L = l + nmax on return.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  const std::optional<float> max = SymmetricGroupMax(n, x, L);
  if (!max) return 0.f;
  const SymmetricFit first = FitSymmetricLevels(n, nmax, x, -nmax / *max, L, 0);
  float sumlx = first.sumlx, suml2 = first.suml2;
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = NearestInt(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Fits each 16-element group of a super-block with `fit` (MakeQ3Quants or MakeQxQuants) to
// levels in L and a scale in scales; returns the signed scale of largest magnitude, which the
// block's 8-bit (Q6_K) or 6-bit (Q3_K) scales are quantized against.
float FitGroupsOf16(float (*fit)(int, int, const float*, int8_t*), int nmax, const float* x,
                    int8_t* L, float* scales) {
  for (int j = 0; j < kQK_K / 16; ++j) scales[j] = fit(16, nmax, x + 16 * j, L + 16 * j);
  return SignedAbsMax(scales, kQK_K / 16);
}

// Requantizes a 16-element group against its rounded scale d (d != 0):
// L = clamp(round(x / d), -nmax, nmax-1) + nmax.
void RequantizeGroupOf16(const float* x, float d, int nmax, int8_t* L) {
  for (int ii = 0; ii < 16; ++ii) {
    const int l = NearestInt(x[ii] / d);
    L[ii] = static_cast<int8_t>(std::max(-nmax, std::min(nmax - 1, l)) + nmax);
  }
}

// Packs 2-bit values: byte l of each 32-byte chunk holds elements l, l+32, l+64, l+96.
void Pack2Bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
    }
  }
}

// Q3_K scale j (6 bits, biased by 32): low 4 bits in a nibble of bytes 0..7, high 2 bits in
// bytes 8..11. `scales` must start zeroed.
void PackQ3Scale(int j, int biased, uint8_t* scales) {
  if (j < 8) {
    scales[j] = static_cast<uint8_t>(biased & 0xF);
  } else {
    scales[j - 8] |= static_cast<uint8_t>((biased & 0xF) << 4);
  }
  scales[j % 4 + 8] |= static_cast<uint8_t>((biased >> 4) << (2 * (j / 4)));
}

int UnpackQ3Scale(int j, const uint8_t* scales) {
  const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  return (low | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

// Q3_K quants L (0..7): bit 2 of element j goes to hmask[j % 32] bit j / 32, the low two
// bits to qs (Pack2Bit).
void PackQ3Quants(const int8_t* L, uint8_t* hmask, uint8_t* qs) {
  std::memset(hmask, 0, kQK_K / 8);
  uint8_t low[kQK_K];
  for (int j = 0; j < kQK_K; ++j) {
    int l = L[j];
    if (l > 3) {
      hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
      l -= 4;
    }
    low[j] = static_cast<uint8_t>(l);
  }
  Pack2Bit(low, qs);
}

// Q4_K/Q5_K: fits 8 groups of 32 with make_qkx2_quants and packs the 6-bit scales and
// mins; then requantizes against the rounded scales into L (values 0..nmax).
void QuantizeK4StyleBlock(const float* x, int nmax, float rdelta_min, int nstep, uint8_t* L,
                          uint8_t* packed_scales, void* d_out, void* dmin_out) {
  uint8_t laux[32];
  float weights[32], mins[kQK_K / 32], scales[kQK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], laux,
                               rdelta_min, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      packed_scales[j] = ls;
      packed_scales[j + 4] = lm;
    } else {
      packed_scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed_scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed_scales[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  // d_out/dmin_out point into a packed block (maybe unaligned): store through memcpy.
  const fp16_t d_half = Fp32ToFp16(max_scale / 63.f);
  const fp16_t dmin_half = Fp32ToFp16(max_min / 63.f);
  std::memcpy(d_out, &d_half, sizeof(d_half));
  std::memcpy(dmin_out, &dmin_half, sizeof(dmin_half));
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    GetScaleMinK4(j, packed_scales, &sc, &m);
    const float d = Fp16ToFp32(d_half) * sc;
    if (!d) continue;
    const float dm = Fp16ToFp32(dmin_half) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

void QuantizeBlockQ2_K(const float* x, BlockQ2_K& y) {
  constexpr float kQ4Scale = 15.f;
  uint8_t L[kQK_K], laux[16];
  float weights[16], mins[kQK_K / 16], scales[kQK_K / 16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK_K / 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], laux, -0.5f, 0.1f,
                               15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  if (max_scale > 0) {
    const float iscale = kQ4Scale / max_scale;
    for (int j = 0; j < kQK_K / 16; ++j) {
      y.scales[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
    }
    y.d = Fp32ToFp16(max_scale / kQ4Scale);
  } else {
    std::fill(y.scales, y.scales + kQK_K / 16, 0);
    y.d = Fp32ToFp16(0.f);
  }
  if (max_min > 0) {
    const float iscale = kQ4Scale / max_min;
    for (int j = 0; j < kQK_K / 16; ++j) {
      y.scales[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
    }
    y.dmin = Fp32ToFp16(max_min / kQ4Scale);
  } else {
    y.dmin = Fp32ToFp16(0.f);
  }
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float d = Fp16ToFp32(y.d) * (y.scales[j] & 0xF);
    if (!d) continue;
    const float dm = Fp16ToFp32(y.dmin) * (y.scales[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt((x[16 * j + ii] + dm) / d);
      L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
    }
  }
  Pack2Bit(L, y.qs);
}

void QuantizeBlockQ3_K(const float* x, BlockQ3_K& y) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  const float max_scale = FitGroupsOf16(MakeQ3Quants, 4, x, L, scales);
  std::memset(y.scales, 0, 12);
  if (max_scale) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < kQK_K / 16; ++j) {
      const int8_t l = static_cast<int8_t>(NearestInt(iscale * scales[j]));
      PackQ3Scale(j, std::max<int>(-32, std::min<int>(31, l)) + 32, y.scales);
    }
    y.d = Fp32ToFp16(1 / iscale);
  } else {
    y.d = Fp32ToFp16(0.f);
  }
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float d = Fp16ToFp32(y.d) * UnpackQ3Scale(j, y.scales);
    if (d) RequantizeGroupOf16(x + 16 * j, d, 4, L + 16 * j);
  }
  PackQ3Quants(L, y.hmask, y.qs);
}

void QuantizeBlockQ4_K(const float* x, BlockQ4_K& y) {
  uint8_t L[kQK_K];
  QuantizeK4StyleBlock(x, 15, -1.f, 20, L, y.scales, &y.d, &y.dmin);
  uint8_t* q = y.qs;
  for (int j = 0; j < kQK_K; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
}

void QuantizeBlockQ5_K(const float* x, BlockQ5_K& y) {
  uint8_t L[kQK_K];
  QuantizeK4StyleBlock(x, 31, -0.5f, 15, L, y.scales, &y.d, &y.dmin);
  uint8_t* qh = y.qh;
  uint8_t* ql = y.qs;
  std::memset(qh, 0, kQK_K / 8);
  uint8_t m1 = 1, m2 = 2;
  for (int chunk = 0; chunk < kQK_K; chunk += 64) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[chunk + j];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      int l2 = L[chunk + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
    ql += 32;
  }
}

void QuantizeBlockQ6_K(const float* x, BlockQ6_K& y) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  const float max_scale = FitGroupsOf16(MakeQxQuants, 32, x, L, scales);
  if (std::fabs(max_scale) < kGroupMaxEps) {
    std::memset(&y, 0, sizeof(BlockQ6_K));
    return;
  }
  const float iscale = -128.f / max_scale;
  y.d = Fp32ToFp16(1 / iscale);
  for (int ib = 0; ib < kQK_K / 16; ++ib) {
    y.scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  }
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float d = Fp16ToFp32(y.d) * y.scales[j];
    if (d) RequantizeGroupOf16(x + 16 * j, d, 32, L + 16 * j);
  }
  uint8_t* ql = y.ql;
  uint8_t* qh = y.qh;
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF;
      const uint8_t q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF;
      const uint8_t q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                   ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

// Quantizes a row of n elements, n a multiple of kQK_K, one super-block at a time.
template <typename Block, void (*kQuantizeBlock)(const float*, Block&)>
void QuantizeRowOfBlocks(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) kQuantizeBlock(src + i * kQK_K, y[i]);
}

}  // namespace

void QuantizeRowQ2_K(const float* src, void* dst, int64_t n) {
  QuantizeRowOfBlocks<BlockQ2_K, QuantizeBlockQ2_K>(src, dst, n);
}

void QuantizeRowQ3_K(const float* src, void* dst, int64_t n) {
  QuantizeRowOfBlocks<BlockQ3_K, QuantizeBlockQ3_K>(src, dst, n);
}

void QuantizeRowQ4_K(const float* src, void* dst, int64_t n) {
  QuantizeRowOfBlocks<BlockQ4_K, QuantizeBlockQ4_K>(src, dst, n);
}

void QuantizeRowQ5_K(const float* src, void* dst, int64_t n) {
  QuantizeRowOfBlocks<BlockQ5_K, QuantizeBlockQ5_K>(src, dst, n);
}

void QuantizeRowQ6_K(const float* src, void* dst, int64_t n) {
  QuantizeRowOfBlocks<BlockQ6_K, QuantizeBlockQ6_K>(src, dst, n);
}

}  // namespace shardlm::internal
