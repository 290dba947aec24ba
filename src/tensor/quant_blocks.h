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

// The IQ4_NL (and IQ4_XS) levels, ascending: denser near zero, where weights cluster.
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace shardlm
