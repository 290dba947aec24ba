// Attention row kernels (q·k dot, p·v accumulate, f16 → f32 rows) with one fixed arithmetic
// order shared by every ISA, so generic, AVX2 and AVX-512 give bitwise-equal results.
//
// Order: Dot splits [0, n16) (n16 = n rounded down to 16) into 16 lanes, lane j taking the
// elements i ≡ j (mod 16) in increasing i with a fused multiply-add; the lanes are summed by
// the fixed tree of SumLanes; the tail [n16, n) is then added with fused multiply-adds in
// order. Axpy computes y[i] = fma(a, x[i], y[i]) per element; AxpyRows applies that for
// several rows in order, keeping y in registers. The *_tile forms run several queries over
// the same rows with the same per-element arithmetic. HalfRow converts exactly. Softmax
// scales, takes the max, exponentiates with ExpNonPositive (fused multiply-adds in a fixed
// order), sums the exponentials in double over the same 16 lanes + SumLanes tree + tail as
// Dot, and multiplies by the float reciprocal of the sum.
// Goals: attention that keeps up with the matmuls; ISA chosen once (DetectIsa).
// Non-goals: other element types.
//
// Thread safety: the table is immutable after first use.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "tensor/type_traits.h"

namespace shardlm {

struct AttentionKernels {
  float (*dot)(const float* a, const float* b, int n) = nullptr;
  // out[r] = dot(q, rows[r], n) for r < n_rows, each bitwise equal to `dot`.
  void (*dot_rows)(const float* q, const float* const* rows, int n_rows, int n,
                   float* out) = nullptr;
  void (*axpy)(float a, const float* x, float* y, int n) = nullptr;  // y += a·x
  void (*half_row)(const uint16_t* src, float* dst, int n) = nullptr;
  // y += Σ_r w[r]·rows[r] for r = 0, 1, ... in order: per element exactly n_rows axpy calls.
  void (*axpy_rows)(const float* w, const float* const* rows, int n_rows, float* y,
                    int n) = nullptr;
  // Several queries against the same rows (register blocking over queries × rows):
  // outs[q][r] = dot(qs[q], rows[r], n), each bitwise equal to `dot`.
  void (*dot_tile)(const float* const* qs, int n_q, const float* const* rows, int n_rows, int n,
                   float* const* outs) = nullptr;
  // ys[q] += Σ_r ws[q][r]·rows[r], each bitwise equal to axpy_rows(ws[q], rows, n_rows, ys[q]).
  void (*axpy_tile)(const float* const* ws, int n_q, const float* const* rows, int n_rows,
                    float* const* ys, int n) = nullptr;
  // x[i] ← exp(s_i − m) / Σ_j exp(s_j − m) with s_i = x[i]·scale and m = max_j s_j (n >= 1).
  void (*softmax)(float* x, int n, float scale) = nullptr;
};

// Kernels for DetectIsa().
const AttentionKernels& GetAttentionKernels();
// Kernels for one ISA (tests), or nullptr when this CPU lacks it.
const AttentionKernels* GetAttentionKernelsFor(Isa isa);

namespace internal {
// The lane reduction every ISA uses: ((l0+l8)+(l4+l12)) + ((l2+l10)+(l6+l14)) + ... as a
// balanced tree over lane pairs (j, j+8), then (j, j+4), (j, j+2), (j, j+1).
template <typename T>
inline T SumLanes(const T* lanes) {
  T s8[8], s4[4], s2[2];
  for (int j = 0; j < 8; ++j) s8[j] = lanes[j] + lanes[j + 8];
  for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
  for (int j = 0; j < 2; ++j) s2[j] = s4[j] + s4[j + 2];
  return s2[0] + s2[1];
}

// exp(x) for x <= 0, the same bits on every ISA: x is clamped to kExpLowest (exp(−87) ≈
// 1.6e-38 is below anything a softmax row of sum >= 1 can show), k = round(x·log2 e) by
// adding and removing 1.5·2^23 (t = fma(x, log2 e, 1.5·2^23)), r = x − k·ln 2 in two fused
// steps (ln 2 split so that k·kExpLn2Hi is exact), e^r by its degree-7 Taylor polynomial in
// Horner form with fused multiply-adds (|r| <= ln 2 / 2: the next term is below 2e-9 of the
// result), times 2^k built from the exponent bits. Within 2 ulp of exp in float.
inline constexpr float kExpLowest = -87.0f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpRound = 12582912.0f;  // 1.5 · 2^23
inline constexpr float kExpLn2Hi = 0.693359375f;
inline constexpr float kExpLn2Lo = -2.12194440e-4f;
// Horner coefficients, highest degree first: 1/7!, 1/6!, ..., 1/1!, 1/0!.
inline constexpr float kExpPoly[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                      1.0f / 6,    0.5f,       1.0f,       1.0f};

inline float ExpNonPositive(float x) {
  x = x > kExpLowest ? x : kExpLowest;  // maxps(x, lowest): NaN becomes lowest too
  const float t = std::fma(x, kExpLog2e, kExpRound);
  const float k = t - kExpRound;
  const int32_t ki = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kExpRound);
  float r = std::fma(-k, kExpLn2Hi, x);
  r = std::fma(-k, kExpLn2Lo, r);
  float p = kExpPoly[0];
  for (int i = 1; i < 8; ++i) p = std::fma(p, r, kExpPoly[i]);
  return p * std::bit_cast<float>((ki + 127) << 23);
}
void FillAttentionAvx2(AttentionKernels& k);    // attention_kernels_avx2.cc
void FillAttentionAvx512(AttentionKernels& k);  // attention_kernels_avx512.cc
}  // namespace internal

}  // namespace shardlm
