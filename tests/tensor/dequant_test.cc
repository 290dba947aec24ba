// Tests of dequantize_row for every weight type against values computed element by element
// from the GGUF bit layout (ggml-common.h), written here independently of the kernels'
// loop structure. Scales are powers of two, so every expected value is exact and the
// comparison is bitwise whatever the evaluation order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/fp16.h"
#include "tensor/iquant_grids.h"
#include "tensor/quant_blocks.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

template <typename Block>
Block RandomBlock(uint32_t seed) {
  Block b;
  std::mt19937 rng(seed);
  auto* bytes = reinterpret_cast<uint8_t*>(&b);
  for (size_t i = 0; i < sizeof(Block); ++i) bytes[i] = static_cast<uint8_t>(rng());
  return b;
}

std::vector<float> Dequantize(GgmlType type, const void* block, int64_t n) {
  std::vector<float> out(n);
  GetTypeTraitsFor(type, Isa::kGeneric)->dequantize_row(block, out.data(), n);
  return out;
}

// Dequantizes `block` (n elements of `type`) and checks element e against expected(e).
template <typename Block, typename Expected>
void ExpectDequantized(GgmlType type, const Block& block, int n, Expected expected) {
  const std::vector<float> y = Dequantize(type, &block, n);
  for (int e = 0; e < n; ++e) EXPECT_EQ(y[e], expected(e)) << e;
}

int Nibble(const uint8_t* qs, int byte, bool high) { return high ? qs[byte] >> 4 : qs[byte] & 15; }
int Bit(const uint8_t* bits, int index) { return (bits[index / 8] >> (index % 8)) & 1; }

TEST(Dequant, Q4_0) {
  auto b = RandomBlock<BlockQ4_0>(1);
  b.d = Fp32ToFp16(0.5f);
  ExpectDequantized(GgmlType::kQ4_0, b, 32,
                    [&](int e) { return (Nibble(b.qs, e % 16, e >= 16) - 8) * 0.5f; });
}

TEST(Dequant, Q4_1) {
  auto b = RandomBlock<BlockQ4_1>(2);
  b.d = Fp32ToFp16(0.25f);
  b.m = Fp32ToFp16(-1.0f);
  ExpectDequantized(GgmlType::kQ4_1, b, 32,
                    [&](int e) { return Nibble(b.qs, e % 16, e >= 16) * 0.25f - 1.0f; });
}

TEST(Dequant, Q5_0) {
  auto b = RandomBlock<BlockQ5_0>(3);
  b.d = Fp32ToFp16(2.0f);
  ExpectDequantized(GgmlType::kQ5_0, b, 32, [&](int e) {
    const int q = Nibble(b.qs, e % 16, e >= 16) | (Bit(b.qh, e) << 4);  // qh bit e: element e
    return (q - 16) * 2.0f;
  });
}

TEST(Dequant, Q5_1) {
  auto b = RandomBlock<BlockQ5_1>(4);
  b.d = Fp32ToFp16(0.125f);
  b.m = Fp32ToFp16(0.5f);
  ExpectDequantized(GgmlType::kQ5_1, b, 32, [&](int e) {
    const int q = Nibble(b.qs, e % 16, e >= 16) | (Bit(b.qh, e) << 4);
    return q * 0.125f + 0.5f;
  });
}

// IQ4_NL: each nibble (low: elements 0-15, high: 16-31) indexes the table of 16 levels.
TEST(Dequant, Iq4Nl) {
  auto b = RandomBlock<BlockIq4Nl>(6);
  b.d = Fp32ToFp16(0.5f);
  const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  ExpectDequantized(GgmlType::kIq4Nl, b, 32,
                    [&](int e) { return levels[Nibble(b.qs, e % 16, e >= 16)] * 0.5f; });
}

// IQ4_XS: sub-block ib's scale is ls − 32 (low 4 bits in scales_l, high 2 in scales_h) times d.
TEST(Dequant, Iq4Xs) {
  auto b = RandomBlock<BlockIq4Xs>(7);
  b.d = Fp32ToFp16(0.25f);
  const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  ExpectDequantized(GgmlType::kIq4Xs, b, 256, [&](int e) {
    const int ib = e / 32;
    const int ls =
        ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    return levels[Nibble(b.qs + 16 * ib, e % 16, e % 32 >= 16)] * 0.25f * (ls - 32);
  });
}

// The grid types: element e is in group e / 8 (IQ3: grid entry e / 4), its magnitude is byte
// e % 8 (e % 4) of the group's grid entry, its sign a stored bit (or, for the 7-bit sign codes,
// the parity of the other seven).
int GridByte(uint64_t entry, int k) { return static_cast<int>((entry >> (8 * k)) & 0xFF); }
uint32_t Word32(const void* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
// Element k's sign (±1) from a 7-bit code whose missing eighth bit makes the negatives even.
float EvenSign(uint32_t code, int k) {
  code &= 127;
  const int bit = k < 7 ? (code >> k) & 1 : __builtin_popcount(code) & 1;
  return bit ? -1.0f : 1.0f;
}

TEST(Dequant, Iq2Xxs) {
  auto b = RandomBlock<BlockIq2Xxs>(8);
  b.d = Fp32ToFp16(0.5f);
  ExpectDequantized(GgmlType::kIq2Xxs, b, 256, [&](int e) {
    const uint32_t indices = Word32(b.qs + 4 * (e / 32)), codes = Word32(b.qs + 4 * (e / 32) + 2);
    const int l = e % 32 / 8;
    const float db = 0.5f * (0.5f + static_cast<float>(codes >> 28)) * 0.25f;
    return db * GridByte(kIq2XxsGrid[(indices >> (8 * l)) & 255], e % 8) *
           EvenSign(codes >> (7 * l), e % 8);
  });
}

// Scales of IQ2_XS / IQ2_S: a nibble per 16 elements.
float Iq2Db(const uint8_t* scales, int e, float d) {
  const int s = (scales[e / 32] >> (4 * (e % 32 / 16))) & 15;
  return d * (0.5f + static_cast<float>(s)) * 0.25f;
}

TEST(Dequant, Iq2Xs) {
  auto b = RandomBlock<BlockIq2Xs>(9);
  b.d = Fp32ToFp16(0.25f);
  ExpectDequantized(GgmlType::kIq2Xs, b, 256, [&](int e) {
    const uint16_t q = b.qs[e / 8];
    return Iq2Db(b.scales, e, 0.25f) * GridByte(kIq2XsGrid[q & 511], e % 8) *
           EvenSign(q >> 9, e % 8);
  });
}

TEST(Dequant, Iq2S) {
  auto b = RandomBlock<BlockIq2S>(10);
  b.d = Fp32ToFp16(0.25f);
  ExpectDequantized(GgmlType::kIq2S, b, 256, [&](int e) {
    const int g = e / 8;
    const int index = b.qs[g] | (((b.qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
    const float sign = (b.qs[32 + g] >> (e % 8)) & 1 ? -1.0f : 1.0f;
    return Iq2Db(b.scales, e, 0.25f) * GridByte(kIq2SGrid[index], e % 8) * sign;
  });
}

TEST(Dequant, Iq3Xxs) {
  auto b = RandomBlock<BlockIq3Xxs>(11);
  b.d = Fp32ToFp16(0.5f);
  ExpectDequantized(GgmlType::kIq3Xxs, b, 256, [&](int e) {
    const uint32_t codes = Word32(b.qs + 64 + 4 * (e / 32));
    const float db = 0.5f * (0.5f + static_cast<float>(codes >> 28)) * 0.5f;
    return db * GridByte(kIq3XxsGrid[b.qs[e / 4]], e % 4) *
           EvenSign(codes >> (7 * (e % 32 / 8)), e % 8);
  });
}

TEST(Dequant, Iq3S) {
  auto b = RandomBlock<BlockIq3S>(12);
  b.d = Fp32ToFp16(0.125f);
  ExpectDequantized(GgmlType::kIq3S, b, 256, [&](int e) {
    const int g4 = e / 4;  // grid entry; bit g4 % 8 of qh[e / 32] is its index's bit 8
    const int index = b.qs[g4] | (((b.qh[e / 32] >> (g4 % 8)) & 1) << 8);
    const int s = (b.scales[e / 64] >> (4 * (e % 64 / 32))) & 15;
    const float sign = (b.signs[e / 8] >> (e % 8)) & 1 ? -1.0f : 1.0f;
    return 0.125f * static_cast<float>(1 + 2 * s) * GridByte(kIq3SGrid[index], e % 4) * sign;
  });
}

// IQ1: d · (2s + 1) · (grid value in {−1, 0, 1} ± 1/8).
TEST(Dequant, Iq1S) {
  auto b = RandomBlock<BlockIq1S>(13);
  b.d = Fp32ToFp16(0.5f);
  ExpectDequantized(GgmlType::kIq1S, b, 256, [&](int e) {
    const int qh = b.qh[e / 32], l = e % 32 / 8;
    const int index = b.qs[e / 8] | (((qh >> (3 * l)) & 7) << 8);
    const float shift = qh & 0x8000 ? -0.125f : 0.125f;
    const auto v = static_cast<int8_t>(GridByte(kIq1SGrid[index], e % 8));
    return 0.5f * static_cast<float>(2 * ((qh >> 12) & 7) + 1) * (v + shift);
  });
}

TEST(Dequant, Iq1M) {
  auto b = RandomBlock<BlockIq1M>(14);
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  const uint16_t d = Fp32ToFp16(0.25f);
  for (int i = 0; i < 4; ++i)
    sc[i] = static_cast<uint16_t>((sc[i] & 0x0FFF) | (((d >> (4 * i)) & 15) << 12));
  std::memcpy(b.scales, sc, 8);
  ExpectDequantized(GgmlType::kIq1M, b, 256, [&](int e) {
    const int g = e / 8;
    const int nibble = (b.qh[g / 2] >> (4 * (g % 2))) & 15;
    const int index = b.qs[g] | ((nibble & 7) << 8);
    const int s = (sc[e / 64] >> (3 * (e % 64 / 16))) & 7;
    const float shift = nibble & 8 ? -0.125f : 0.125f;
    const auto v = static_cast<int8_t>(GridByte(kIq1SGrid[index], e % 8));
    return 0.25f * static_cast<float>(2 * s + 1) * (v + shift);
  });
}

// TQ1_0: a byte's trits as a base-3 fraction of 256, the first trit most significant.
int TritOf(uint8_t byte, int n) {
  int value = byte * 243 / 256;  // undoes the rounded-up scaling to 0..255 (exact)
  int trits[5];
  for (int k = 4; k >= 0; --k) trits[k] = value % 3, value /= 3;
  return trits[n];
}

TEST(Dequant, Tq1_0) {
  BlockTq1_0 b{};
  std::mt19937 rng(15);
  int digits[256];
  // Valid bytes only (what a quantizer writes): 5 random trits each, 4 for the qh bytes.
  auto pack = [&](int n_trits) {
    int value = 0;
    for (int k = 0; k < n_trits; ++k) value = value * 3 + static_cast<int>(rng() % 3);
    if (n_trits == 4) value *= 3;
    return static_cast<uint8_t>((value * 256 + 242) / 243);
  };
  for (int m = 0; m < 48; ++m) b.qs[m] = pack(5);
  for (int j = 0; j < 4; ++j) b.qh[j] = pack(4);
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 32; ++m) digits[32 * n + m] = TritOf(b.qs[m], n);
    for (int m = 0; m < 16; ++m) digits[160 + 16 * n + m] = TritOf(b.qs[32 + m], n);
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) digits[240 + 4 * n + j] = TritOf(b.qh[j], n);
  }
  b.d = Fp32ToFp16(0.5f);
  ExpectDequantized(GgmlType::kTq1_0, b, 256, [&](int e) { return 0.5f * (digits[e] - 1); });
}

TEST(Dequant, Tq2_0) {
  auto b = RandomBlock<BlockTq2_0>(16);
  for (uint8_t& q : b.qs) q &= 0x55;  // digits 0 and 1 (−1, 0) and, below, some 2s
  b.qs[3] = 0xAA;
  b.d = Fp32ToFp16(2.0f);
  ExpectDequantized(GgmlType::kTq2_0, b, 256, [&](int e) {
    const int digit = (b.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
    return 2.0f * (digit - 1);
  });
}

// MXFP4: FP4 (E2M1) values, doubled, under 2^(e − 128).
TEST(Dequant, Mxfp4) {
  auto b = RandomBlock<BlockMxfp4>(17);
  const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (uint8_t e : {uint8_t{127}, uint8_t{120}, uint8_t{131}}) {
    b.e = e;
    ExpectDequantized(GgmlType::kMxfp4, b, 32, [&](int i) {
      return fp4[Nibble(b.qs, i % 16, i >= 16)] * std::ldexp(1.0f, e - 127);
    });
  }
}

TEST(Dequant, Q8_0) {
  auto b = RandomBlock<BlockQ8_0>(5);
  b.d = Fp32ToFp16(-0.0625f);
  b.qs[0] = -128;
  b.qs[1] = 127;
  ExpectDequantized(GgmlType::kQ8_0, b, 32, [&](int e) { return b.qs[e] * -0.0625f; });
  EXPECT_EQ(Dequantize(GgmlType::kQ8_0, &b, 32)[0], 8.0f);  // -128 · -1/16
}

// 2-bit field of element e in a Q2_K/Q3_K qs array: 128-element chunks of 32 bytes; byte
// l holds elements l, l+32, l+64, l+96 of the chunk in bit pairs 0, 2, 4, 6.
int TwoBits(const uint8_t* qs, int e) {
  return (qs[e / 128 * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

TEST(Dequant, Q2_K) {
  auto b = RandomBlock<BlockQ2_K>(6);
  b.d = Fp32ToFp16(0.5f);
  b.dmin = Fp32ToFp16(0.25f);
  ExpectDequantized(GgmlType::kQ2_K, b, 256, [&](int e) {
    const int sc = b.scales[e / 16] & 15, m = b.scales[e / 16] >> 4;
    return 0.5f * sc * TwoBits(b.qs, e) - 0.25f * m;
  });
}

// Q3_K scales: 16 6-bit values; low 4 bits in the nibbles of bytes 0..7 (value j < 8: low
// nibble of byte j, else high nibble of byte j-8), high 2 bits in bytes 8..11 (value j:
// byte 8 + j%4, bits 2·(j/4)). Stored biased by 32.
int Q3Scale(const uint8_t* s, int j) {
  const int low = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

TEST(Dequant, Q3_K) {
  auto b = RandomBlock<BlockQ3_K>(7);
  b.d = Fp32ToFp16(0.25f);
  ExpectDequantized(GgmlType::kQ3_K, b, 256, [&](int e) {
    const int high = (b.hmask[e % 32] >> (e / 32)) & 1;  // 1 = no -4 offset
    const int q = TwoBits(b.qs, e) - (high ? 0 : 4);
    return 0.25f * Q3Scale(b.scales, e / 16) * q;
  });
}

// Q4_K/Q5_K scales: 8 scales and 8 mins of 6 bits in 12 bytes. j < 4: scale = byte j, min =
// byte j+4 (low 6 bits); j >= 4: low 4 bits in the nibbles of byte j+4, high 2 bits in the
// top bits of byte j-4 (scale) and byte j (min).
struct ScaleMin {
  int scale;
  int min;
};

ScaleMin K4ScaleMin(const uint8_t* s, int j) {
  if (j < 4) return {s[j] & 63, s[j + 4] & 63};
  return {(s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)};
}

// The low 4 bits of Q4_K/Q5_K element e: 64-element chunks of 32 bytes, low nibbles hold the
// first 32, high nibbles the next.
int K4Nibble(const uint8_t* qs, int e) { return Nibble(qs, e / 64 * 32 + e % 32, (e % 64) >= 32); }

TEST(Dequant, Q4_K) {
  auto b = RandomBlock<BlockQ4_K>(8);
  b.d = Fp32ToFp16(0.5f);
  b.dmin = Fp32ToFp16(0.125f);
  ExpectDequantized(GgmlType::kQ4_K, b, 256, [&](int e) {
    const auto [sc, m] = K4ScaleMin(b.scales, e / 32);
    return 0.5f * sc * K4Nibble(b.qs, e) - 0.125f * m;
  });
}

TEST(Dequant, Q5_K) {
  auto b = RandomBlock<BlockQ5_K>(9);
  b.d = Fp32ToFp16(0.25f);
  b.dmin = Fp32ToFp16(0.5f);
  ExpectDequantized(GgmlType::kQ5_K, b, 256, [&](int e) {
    const auto [sc, m] = K4ScaleMin(b.scales, e / 32);
    const int high = (b.qh[e % 32] >> (e / 32)) & 1;  // bit e/32 of qh[e % 32]
    return 0.25f * sc * (K4Nibble(b.qs, e) + 16 * high) - 0.5f * m;
  });
}

TEST(Dequant, Q6_K) {
  auto b = RandomBlock<BlockQ6_K>(10);
  b.d = Fp32ToFp16(0.0625f);
  ExpectDequantized(GgmlType::kQ6_K, b, 256, [&](int e) {
    // 128-element chunks: ql (64 bytes) holds low nibbles of quarters 0/1 and high nibbles
    // of quarters 2/3; qh (32 bytes) holds the top 2 bits of quarter k at bits 2k.
    const int chunk = e / 128, quarter = (e % 128) / 32, l = e % 32;
    const int low = Nibble(b.ql, chunk * 64 + l + 32 * (quarter % 2), quarter >= 2);
    const int high = (b.qh[chunk * 32 + l] >> (2 * quarter)) & 3;
    const int q = (low | (high << 4)) - 32;
    return 0.0625f * b.scales[e / 16] * q;
  });
}

TEST(Dequant, FloatTypes) {
  const float values[4] = {1.5f, -2.0f, 0.0f, 65504.0f};
  const fp16_t f16[4] = {0x3E00, 0xC000, 0x0000, 0x7BFF};
  const bf16_t bf16[4] = {0x3FC0, 0xC000, 0x0000, 0x477F};
  EXPECT_EQ(Dequantize(GgmlType::kF16, f16, 4), std::vector<float>(values, values + 4));
  const std::vector<float> b = Dequantize(GgmlType::kBF16, bf16, 4);
  EXPECT_EQ(b[0], 1.5f);
  EXPECT_EQ(b[1], -2.0f);
  EXPECT_EQ(b[3], 65280.0f);
  EXPECT_EQ(Dequantize(GgmlType::kF32, values, 4), std::vector<float>(values, values + 4));
}

}  // namespace
}  // namespace shardlm
