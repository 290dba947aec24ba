// Tests of the scalar fp16 / bf16 conversions (tensor/fp16.h): exhaustive fp16 round trips,
// known values, rounding ties, subnormals, overflow and NaN, and agreement with the F16C
// instruction (what llama.cpp uses on x86) on many random floats when the CPU has it.
#include "tensor/fp16.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace shardlm {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

TEST(Fp16, ExhaustiveRoundTripIsIdentityForNonNan) {
  int nan_count = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<fp16_t>(h));
    ASSERT_EQ(Bits(f), Bits(Fp16ToFp32Compute(static_cast<fp16_t>(h)))) << "h=" << h;
    const bool is_nan = ((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF) != 0;
    if (is_nan) {
      ++nan_count;
      EXPECT_TRUE(std::isnan(f));
      // Quiet NaNs come back unchanged; signalling ones come back quieted.
      EXPECT_EQ(Fp32ToFp16(f), h | 0x200) << "h=" << h;
      continue;
    }
    ASSERT_EQ(Fp32ToFp16(f), h) << "h=" << h << " f=" << f;
  }
  EXPECT_EQ(nan_count, 2 * 1023);
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xC000);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(0.0f), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(Fp32ToFp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_FLOAT_EQ(Fp16ToFp32(0x3555), 0.333251953125f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
}

TEST(Fp16, RoundsTiesToEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3·2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): goes up.
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Just above the half rounds up.
  EXPECT_EQ(Fp32ToFp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  // Subnormal ties: 2^-25 -> 0, 3·2^-25 -> 2·2^-24 (even), 2^-25 + tiny -> 2^-24.
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(Fp32ToFp16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(Fp32ToFp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  // Overflow: 65519.99 stays finite, 65520 (the tie) goes to inf.
  EXPECT_EQ(Fp32ToFp16(65519.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);
}

TEST(Fp16, NanStaysQuietNan) {
  const fp16_t h = Fp32ToFp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(h & 0x7C00, 0x7C00);
  EXPECT_NE(h & 0x3FF, 0);
  EXPECT_NE(h & 0x200, 0);
  // A float NaN whose payload lives only in the low bits still converts to a NaN.
  EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(FromBits(0x7F800001)))));
}

__attribute__((target("f16c"))) uint16_t HardwareFp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}

__attribute__((target("f16c"))) float HardwareFp32(uint16_t h) { return _cvtsh_ss(h); }

TEST(Fp16, MatchesF16cOnRandomFloats) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU has no F16C";
  std::mt19937 rng(7);
  int checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns, biased towards the fp16 range (exponent 100..150).
    uint32_t u = rng();
    if (i % 2 == 0) u = (u & 0x807FFFFFu) | ((100u + rng() % 51u) << 23);
    const float f = FromBits(u);
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToFp16(f), HardwareFp16(f)) << "f=" << f << " bits=" << std::hex << u;
    ++checked;
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF) != 0) continue;
    ASSERT_EQ(Bits(Fp16ToFp32(static_cast<fp16_t>(h))),
              Bits(HardwareFp32(static_cast<uint16_t>(h))));
  }
  EXPECT_GT(checked, 1900000);
}

// The values and round trips the F16 KV cache relies on (its rows are written with
// Fp32ToFp16's rounding and read back with Fp16ToFp32).
TEST(Fp16, HalfRoundTripAndRounding) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3c00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xc000);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(1e6f), 0x7c00);
  EXPECT_EQ(Fp32ToFp16(5.9604645e-8f), 0x0001);       // smallest subnormal
  EXPECT_EQ(Fp32ToFp16(1.0f + 1.0f / 2048), 0x3c00);  // tie → even
  EXPECT_EQ(Fp32ToFp16(1.0f + 3.0f / 2048), 0x3c02);  // tie → even (up)
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    ASSERT_EQ(Fp32ToFp16(Fp16ToFp32(uint16_t(h))), h) << h;
    ASSERT_EQ(Fp32ToFp16(-Fp16ToFp32(uint16_t(h))), h | 0x8000) << h;
  }
}

TEST(Bf16, KnownValuesAndTies) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Fp32ToBf16(-2.5f), 0xC020);
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(Fp32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3·2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: up to even.
  EXPECT_EQ(Fp32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(Fp32ToBf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  // Largest finite float rounds to inf (as ggml does), inf stays inf.
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
}

TEST(Bf16, NanIsForcedQuiet) {
  // A signalling NaN whose payload would be truncated away must not become inf.
  const bf16_t h = Fp32ToBf16(FromBits(0x7F800001));
  EXPECT_TRUE(std::isnan(Bf16ToFp32(h)));
  EXPECT_EQ(h, 0x7F80 | 64);
  EXPECT_EQ(Fp32ToBf16(FromBits(0xFFC00000)), 0xFFC0);
}

TEST(Bf16, RoundTripIsIdentity) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Bf16ToFp32(static_cast<bf16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToBf16(f), h) << "h=" << h;
  }
}

}  // namespace
}  // namespace shardlm
