// Scalar conversions between float32 and the two 16-bit float formats GGUF uses.
//
// Goals: bit-exact with the hardware llama.cpp relies on, on every CPU, without intrinsics:
//   - fp32 -> fp16 rounds to nearest even, handles subnormals, overflows to inf, keeps NaN
//     as a quiet NaN with the top payload bits (what F16C's vcvtps2ph does);
//   - fp16 -> fp32 is exact (a 64K-entry table, built at compile time);
//   - fp32 -> bf16 rounds to nearest even and forces NaN quiet (ggml's GGML_FP32_TO_BF16);
//   - bf16 -> fp32 is a shift.
// Non-goals: vectorized conversion (kernels_avx*.cc), other float formats (fp8, e8m0).
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "tensor/quant_blocks.h"

namespace shardlm {

namespace internal {
// kFp16ToFp32Table[h] = the float value of the fp16 bit pattern h (fp16.cc).
extern const std::array<float, 65536> kFp16ToFp32Table;
}  // namespace internal

// Exact fp16 -> fp32 by bit manipulation; usable in constant expressions.
constexpr float Fp16ToFp32Compute(fp16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    // Zero or subnormal: mant · 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// fp32 -> fp16, round to nearest even (what F16C's vcvtps2ph with imm 0 does).
constexpr fp16_t Fp32ToFp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: quiet it, keep the top 9 payload bits
    return static_cast<fp16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  // 65520 (0x477FF000) is halfway between 65504 (max half) and 65536: ties go to even, inf.
  if (abs >= 0x477FF000u) return static_cast<fp16_t>(sign | 0x7C00u);
  if (abs < 0x38800000u) {  // below 2^-14: a half subnormal (or zero)
    if (abs <= 0x33000000u) return static_cast<fp16_t>(sign);  // <= 2^-25 rounds to 0
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // value / 2^-24 = mant >> shift
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<fp16_t>(sign | q);
  }
  uint32_t h = (abs >> 13) - (112u << 10);  // rebias the exponent from 127 to 15
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent
  return static_cast<fp16_t>(sign | h);
}

// fp16 -> fp32 through the table (hot paths: dequantization scales, F16 weights).
inline float Fp16ToFp32(fp16_t h) { return internal::kFp16ToFp32Table[h]; }

constexpr float Bf16ToFp32(bf16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// fp32 -> bf16, round to nearest even; NaN stays NaN and is forced quiet.
constexpr bf16_t Fp32ToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<bf16_t>((x >> 16) | 64u);
  return static_cast<bf16_t>((x + (0x7FFFu + ((x >> 16) & 1u))) >> 16);
}

}  // namespace shardlm
