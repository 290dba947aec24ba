// Quant block layouts, bit-compatible with GGUF (ggml-common.h). One packed struct per type,
// its size pinned by static_assert, so a tensor in an mmapped file is an array of these.
//
// Goals: the exact byte layout of every weight type shardlm computes, plus the activation
// block types (Q8_1, Q8_K) that llama.cpp quantizes activations to before a dot product.
// Non-goals: any arithmetic (dequant.h, quantize.h, kernels).
#pragma once

#include <cstdint>

namespace shardlm {

// Elements per block: the legacy types use 32, the K-quants a super-block of 256.
inline constexpr int kQK = 32;
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleSize = 12;  // 8 6-bit scales + 8 6-bit mins, packed

using fp16_t = uint16_t;  // IEEE half, raw bits
using bf16_t = uint16_t;  // bfloat16, raw bits

#pragma pack(push, 1)
struct BlockQ4_0 {
  fp16_t d;             // scale
  uint8_t qs[kQK / 2];  // low nibble: elements 0..15, high nibble: 16..31; value = d·(q−8)
};
struct BlockQ4_1 {
  fp16_t d, m;  // value = d·q + m
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  fp16_t d;
  uint8_t qh[4];        // 5th bit of each element (bit j for element j)
  uint8_t qs[kQK / 2];  // value = d·(q−16)
};
struct BlockQ5_1 {
  fp16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  fp16_t d;
  int8_t qs[kQK];
};
struct BlockQ8_1 {  // activations for Q4_1/Q5_1
  fp16_t d;         // scale
  fp16_t s;         // fp16(d_f32 · Σ qs)
  int8_t qs[kQK];
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low 4 bits scale, high 4 bits min, per 16 elements
  uint8_t qs[kQK_K / 4];       // 2-bit quants
  fp16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // high bit
  uint8_t qs[kQK_K / 4];     // low 2 bits
  uint8_t scales[12];        // 16 6-bit scales
  fp16_t d;
};
struct BlockQ4_K {
  fp16_t d, dmin;
  uint8_t scales[kKScaleSize];  // 8 scales + 8 mins, 6 bits each
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  fp16_t d, dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // 8-bit scales per 16 elements
  fp16_t d;
};
// IQ4_NL: 4-bit indices into a fixed non-linear table of 16 int8 levels (kIq4NlValues), one
// fp16 scale per 32 elements; low nibbles hold elements 0-15, high nibbles 16-31.
struct BlockIq4Nl {
  fp16_t d;  // value = d · kIq4NlValues[q]
  uint8_t qs[kQK / 2];
};
// IQ4_XS: IQ4_NL's levels in 256-element super-blocks of 8 sub-blocks of 32, each with a 6-bit
// scale (ls − 32, ls = scales_l nibble | 2 bits of scales_h << 4) under one fp16 scale.
struct BlockIq4Xs {
  fp16_t d;  // value = d · (ls − 32) · kIq4NlValues[q]
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];  // per sub-block of 32: 16 bytes, low nibbles first
};
// The grid types: each group of 8 (IQ1, IQ2) or 4 (IQ3) elements is one entry of a fixed grid
// of magnitudes (tensor/iquant_grids.h), with per-element signs and integer scales per 16 or 32
// elements under one fp16 scale per 256. Layouts and value formulas are ggml's.
struct BlockIq2Xxs {
  fp16_t d;
  // Per 32 elements, two uint32: bytes 0-3 of the first = grid indices of the four groups;
  // the second = four 7-bit sign codes (bits 7g..7g+6) and the scale ls in bits 28-31.
  // value = d · (2·ls + 1) / 8 · grid · sign
  uint16_t qs[kQK_K / 8];
};
struct BlockIq2Xs {
  fp16_t d;
  uint16_t qs[kQK_K / 8];      // per group of 8: 9-bit grid index, 7-bit sign code
  uint8_t scales[kQK_K / 32];  // per 32: low nibble first 16 elements, high nibble the rest
};
struct BlockIq2S {
  fp16_t d;
  uint8_t qs[kQK_K / 4];       // 32 low bytes of the 10-bit grid indices, then 32 sign bytes
  uint8_t qh[kQK_K / 32];      // per 32: bits 2g, 2g+1 = the index's bits 8-9 of group g
  uint8_t scales[kQK_K / 32];  // as IQ2_XS
};
struct BlockIq3Xxs {
  fp16_t d;
  // 64 grid indices (groups of 4), then per 32 elements a uint32 as IQ2_XXS's second word.
  // value = d · (2·ls + 1) / 4 · grid · sign
  uint8_t qs[3 * kQK_K / 8];
};
struct BlockIq3S {
  fp16_t d;
  uint8_t qs[kQK_K / 4];       // low 8 bits of the 9-bit grid indices (groups of 4)
  uint8_t qh[kQK_K / 32];      // per 32: bit g = bit 8 of group g's index
  uint8_t signs[kQK_K / 8];    // one bit per element
  uint8_t scales[kQK_K / 64];  // per 64: low nibble first 32; value = d · (2·s + 1) · grid
};
struct BlockIq1S {
  fp16_t d;
  uint8_t qs[kQK_K / 8];  // low 8 bits of the 11-bit grid indices (groups of 8)
  // Per 32: bits 3g..3g+2 = index bits 8-10 of group g, bits 12-14 the scale s, bit 15 the
  // delta's sign. value = d · (2·s + 1) · (grid ± 1/8), grid in {−1, 0, 1}
  uint16_t qh[kQK_K / 32];
};
struct BlockIq1M {
  uint8_t qs[kQK_K / 8];  // low 8 bits of the 11-bit grid indices
  // Per group of 8: a nibble (groups in order, low nibble first): bits 0-2 = index bits 8-10,
  // bit 3 = the delta's sign.
  uint8_t qh[kQK_K / 16];
  // 16 3-bit scales (per 16 elements, in the low 12 bits of four uint16) and, in their top
  // nibbles, the fp16 super-block scale. value = d · (2·s + 1) · (grid ± 1/8)
  uint8_t scales[kQK_K / 32];
};
// Ternary: values d · {−1, 0, 1}.
struct BlockTq1_0 {
  // Five trits per byte (base 3, the first most significant, scaled to fill 0..255): bytes
  // 0-31 hold elements m + 32n (n < 5), bytes 32-47 elements 160 + m + 16n; qh the last 16,
  // element 240 + j + 4m in trit m of byte j.
  uint8_t qs[48];
  uint8_t qh[4];
  fp16_t d;
};
struct BlockTq2_0 {
  uint8_t
      qs[kQK_K / 4];  // 2 bits per element (0, 1, 2 = −1, 0, 1): byte 32j+m, bits 2l = 128j+32l+m
  fp16_t d;
};
// MXFP4 (OCP microscaling): 32 FP4 (E2M1) values under a power-of-two scale.
struct BlockMxfp4 {
  uint8_t e;            // E8M0 exponent; value = 2^(e − 128) · kMxfp4Values[q]
  uint8_t qs[kQK / 2];  // low nibble: elements 0..15, high nibble: 16..31
};
struct BlockQ8_K {  // activations for all K-quants
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sum of qs per 16 elements
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockIq4Xs) == 136);
static_assert(sizeof(BlockIq2Xxs) == 66);
static_assert(sizeof(BlockIq2Xs) == 74);
static_assert(sizeof(BlockIq2S) == 82);
static_assert(sizeof(BlockIq3Xxs) == 98);
static_assert(sizeof(BlockIq3S) == 110);
static_assert(sizeof(BlockIq1S) == 50);
static_assert(sizeof(BlockIq1M) == 56);
static_assert(sizeof(BlockTq1_0) == 54);
static_assert(sizeof(BlockTq2_0) == 66);
static_assert(sizeof(BlockMxfp4) == 17);

// The IQ4_NL (and IQ4_XS) levels, ascending: denser near zero, where weights cluster.
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The FP4 (E2M1) values of MXFP4, doubled to integers (the block scale halves them back).
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

}  // namespace shardlm
