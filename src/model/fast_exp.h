// exp for x <= 0 with the same bits on every ISA: the scalar form here, the 8- and 16-lane
// forms in fast_exp_simd.h (the same operations in the same order). Softmax (attention) and
// SiLU (the FFN's SwiGLU) use it.
//
// Goals: within 2 ulp of exp; identical results from generic, AVX2 and AVX-512 code.
// Non-goals: positive arguments (callers rewrite e.g. sigmoid(x) with exp(-|x|)).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace shardlm::internal {

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

}  // namespace shardlm::internal
