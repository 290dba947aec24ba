// Generic kernels of the grid types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M
// (block layouts in quant_blocks.h, grids in iquant_grids.h).
//
// Every one decodes a super-block the same way: 256 signed grid values and an odd integer
// scale per 16 elements (GridBlock), plus, for IQ1, the sign of a ±1/8 shift per group of 8.
// Dequantization then follows ggml's float formulas; the dot product against Q8_K takes the
// K-quants' float side (exact integer lanes per super-block, one fused multiply-add by
// d_w·d_a), then the type's constant factor (the 1/8 of IQ2, the 1/4 of IQ3_XXS), as
// llama.cpp's x86 kernels do. IQ1's ±1/8 shift joins its values as integers: each element
// counts 8·grid ± 1 in the lanes, and the factor is 1/8.
//
// Goals: files from llama.cpp read as llama.cpp reads them. Non-goals: speed (ISA files).
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/iquant_grids.h"
#include "tensor/kernels_generic.h"
#include "tensor/quant_blocks.h"

namespace shardlm::internal {
namespace {

struct GridBlock {
  int8_t q[kQK_K];        // grid value × sign (IQ1: −1, 0, 1)
  int scale16[16];        // odd integer scale of each 16 elements
  int8_t shift_sign[32];  // IQ1: the sign of each group of 8's ±1/8 shift
};

uint32_t Word(const void* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// q[0..n) = the bytes of a grid entry, negated where `signs` has the element's bit.
template <typename Entry>
void SignedEntry(Entry entry, uint8_t signs, int n, int8_t* q) {
  for (int k = 0; k < n; ++k) {
    const int v = static_cast<int>((entry >> (8 * k)) & 0xFF);
    q[k] = static_cast<int8_t>((signs >> k) & 1 ? -v : v);
  }
}

void SetScale32(GridBlock* g, int ib, int scale) {
  g->scale16[2 * ib] = g->scale16[2 * ib + 1] = scale;
}

void DecodeIq2Xxs(const BlockIq2Xxs& b, GridBlock* g) {
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t indices = Word(b.qs + 4 * ib), codes = Word(b.qs + 4 * ib + 2);
    SetScale32(g, ib, 2 * static_cast<int>(codes >> 28) + 1);
    for (int l = 0; l < 4; ++l) {
      SignedEntry(kIq2XxsGrid[(indices >> (8 * l)) & 0xFF], EvenSigns(codes >> (7 * l)), 8,
                  g->q + 32 * ib + 8 * l);
    }
  }
}

// IQ2_XS / IQ2_S scales: per 32, low nibble for the first 16 elements.
void SetNibbleScales(const uint8_t* scales, GridBlock* g) {
  for (int ib = 0; ib < 8; ++ib) {
    g->scale16[2 * ib] = 2 * (scales[ib] & 0xF) + 1;
    g->scale16[2 * ib + 1] = 2 * (scales[ib] >> 4) + 1;
  }
}

void DecodeIq2Xs(const BlockIq2Xs& b, GridBlock* g) {
  SetNibbleScales(b.scales, g);
  for (int k = 0; k < 32; ++k) {
    SignedEntry(kIq2XsGrid[b.qs[k] & 511], EvenSigns(b.qs[k] >> 9), 8, g->q + 8 * k);
  }
}

void DecodeIq2S(const BlockIq2S& b, GridBlock* g) {
  SetNibbleScales(b.scales, g);
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * ib + l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300);
      SignedEntry(kIq2SGrid[index], signs[4 * ib + l], 8, g->q + 32 * ib + 8 * l);
    }
  }
}

void DecodeIq3Xxs(const BlockIq3Xxs& b, GridBlock* g) {
  const uint8_t* codes_of = b.qs + kQK_K / 4;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t codes = Word(codes_of + 4 * ib);
    SetScale32(g, ib, 2 * static_cast<int>(codes >> 28) + 1);
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = EvenSigns(codes >> (7 * l));
      int8_t* q = g->q + 32 * ib + 8 * l;
      SignedEntry(kIq3XxsGrid[b.qs[8 * ib + 2 * l]], signs, 4, q);
      SignedEntry(kIq3XxsGrid[b.qs[8 * ib + 2 * l + 1]], static_cast<uint8_t>(signs >> 4), 4,
                  q + 4);
    }
  }
}

void DecodeIq3S(const BlockIq3S& b, GridBlock* g) {
  for (int ib = 0; ib < 8; ++ib) {
    SetScale32(g, ib, 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1);
    for (int l = 0; l < 4; ++l) {
      const int i1 = b.qs[8 * ib + 2 * l] | ((b.qh[ib] << (8 - 2 * l)) & 256);
      const int i2 = b.qs[8 * ib + 2 * l + 1] | ((b.qh[ib] << (7 - 2 * l)) & 256);
      const uint8_t signs = b.signs[4 * ib + l];
      int8_t* q = g->q + 32 * ib + 8 * l;
      SignedEntry(kIq3SGrid[i1], signs, 4, q);
      SignedEntry(kIq3SGrid[i2], static_cast<uint8_t>(signs >> 4), 4, q + 4);
    }
  }
}

void Iq1Entry(int index, int8_t* q) { SignedEntry(kIq1SGrid[index], 0, 8, q); }

void DecodeIq1S(const BlockIq1S& b, GridBlock* g) {
  for (int ib = 0; ib < 8; ++ib) {
    const int qh = b.qh[ib];
    SetScale32(g, ib, 2 * ((qh >> 12) & 7) + 1);
    for (int l = 0; l < 4; ++l) {
      Iq1Entry(b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8), g->q + 32 * ib + 8 * l);
      g->shift_sign[4 * ib + l] = qh & 0x8000 ? -1 : 1;
    }
  }
}

// The fp16 scale of an IQ1_M super-block, spread over the top nibbles of its four scale words.
uint16_t Iq1MScaleBits(const uint16_t* sc) {
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) |
                               (sc[3] & 0xF000));
}

void DecodeIq1M(const BlockIq1M& b, GridBlock* g) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof(sc));
  for (int ib = 0; ib < 8; ++ib) {
    g->scale16[2 * ib] = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
    g->scale16[2 * ib + 1] = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
    for (int l = 0; l < 4; ++l) {
      const int nibble = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0xF;
      Iq1Entry(b.qs[4 * ib + l] | ((nibble & 7) << 8), g->q + 32 * ib + 8 * l);
      g->shift_sign[4 * ib + l] = nibble & 8 ? -1 : 1;
    }
  }
}

// ggml's dequantization: y = db · q with db per 16 elements from d and the odd scale s:
// IQ2: d·(s/2)·(1/4) (ggml's d·(0.5 + ls)·0.25), IQ3_XXS: d·(s/2)·(1/2), IQ3_S: d·s.
enum class DbForm { kIq2, kIq3Xxs, kIq3S };

float SubBlockScale(DbForm form, float d, int s) {
  switch (form) {
    case DbForm::kIq2:
      return d * (0.5f * static_cast<float>(s)) * 0.25f;
    case DbForm::kIq3Xxs:
      return d * (0.5f * static_cast<float>(s)) * 0.5f;
    case DbForm::kIq3S:
    default:
      return d * static_cast<float>(s);
  }
}

template <typename Block, void (*Decode)(const Block&, GridBlock*), DbForm kForm>
void DequantizeGrid(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    GridBlock g;
    Decode(x[i], &g);
    const float d = Fp16ToFp32(x[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      dst[i * kQK_K + e] = SubBlockScale(kForm, d, g.scale16[e / 16]) * g.q[e];
    }
  }
}

// IQ1: y = d·s · (grid ± 1/8).
template <typename Block, void (*Decode)(const Block&, GridBlock*)>
void DequantizeIq1(const void* src, float* dst, int64_t n, float (*scale_of)(const Block&)) {
  const auto* x = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    GridBlock g;
    Decode(x[i], &g);
    const float d = scale_of(x[i]);
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * static_cast<float>(g.scale16[e / 16]);
      const float shift = g.shift_sign[e / 8] < 0 ? -0.125f : 0.125f;
      dst[i * kQK_K + e] = dl * (static_cast<float>(g.q[e]) + shift);
    }
  }
}

float Iq1MScale(const BlockIq1M& b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof(sc));
  return Fp16ToFp32(Iq1MScaleBits(sc));
}

// The super-block scale d of the types that keep it in a field (all but IQ1_M).
template <typename Block>
float HeaderScale(const Block& b) {
  return Fp16ToFp32(b.d);
}

// factor · Σ_blocks fma(d_w·d_a, lanes).
template <typename Block, void (*Decode)(const Block&, GridBlock*),
          float (*kScaleOf)(const Block&) = HeaderScale<Block>>
float GridDot(int64_t n, const void* w, const void* a, float factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    GridBlock g;
    Decode(x[i], &g);
    int32_t lanes[8] = {};
    AddScaledLanes(g.q, y[i].qs, g.scale16, lanes);
    FmaLanes(kScaleOf(x[i]) * y[i].d, lanes, acc);
  }
  return factor * HorizontalSum8(acc);
}

// IQ1's values in eighths: 8·grid ± 1 (|·| <= 9), the shift joined to the value as an integer,
// so one lane sum holds both; the dot product's factor is then 1/8.
template <typename Block, void (*Decode)(const Block&, GridBlock*)>
void DecodeEighths(const Block& b, GridBlock* g) {
  Decode(b, g);
  for (int e = 0; e < kQK_K; ++e) {
    g->q[e] = static_cast<int8_t>(8 * g->q[e] + g->shift_sign[e / 8]);
  }
}

}  // namespace

void DequantizeRowIq2Xxs(const void* src, float* dst, int64_t n) {
  DequantizeGrid<BlockIq2Xxs, DecodeIq2Xxs, DbForm::kIq2>(src, dst, n);
}
void DequantizeRowIq2Xs(const void* src, float* dst, int64_t n) {
  DequantizeGrid<BlockIq2Xs, DecodeIq2Xs, DbForm::kIq2>(src, dst, n);
}
void DequantizeRowIq2S(const void* src, float* dst, int64_t n) {
  DequantizeGrid<BlockIq2S, DecodeIq2S, DbForm::kIq2>(src, dst, n);
}
void DequantizeRowIq3Xxs(const void* src, float* dst, int64_t n) {
  DequantizeGrid<BlockIq3Xxs, DecodeIq3Xxs, DbForm::kIq3Xxs>(src, dst, n);
}
void DequantizeRowIq3S(const void* src, float* dst, int64_t n) {
  DequantizeGrid<BlockIq3S, DecodeIq3S, DbForm::kIq3S>(src, dst, n);
}
void DequantizeRowIq1S(const void* src, float* dst, int64_t n) {
  DequantizeIq1<BlockIq1S, DecodeIq1S>(src, dst, n, HeaderScale<BlockIq1S>);
}
void DequantizeRowIq1M(const void* src, float* dst, int64_t n) {
  DequantizeIq1<BlockIq1M, DecodeIq1M>(src, dst, n, Iq1MScale);
}

void VecDotIq2XxsQ8_K(int64_t n, const void* w, const void* a, float* out) {
  *out = GridDot<BlockIq2Xxs, DecodeIq2Xxs>(n, w, a, 0.125f);
}
void VecDotIq2XsQ8_K(int64_t n, const void* w, const void* a, float* out) {
  *out = GridDot<BlockIq2Xs, DecodeIq2Xs>(n, w, a, 0.125f);
}
void VecDotIq2SQ8_K(int64_t n, const void* w, const void* a, float* out) {
  *out = GridDot<BlockIq2S, DecodeIq2S>(n, w, a, 0.125f);
}
void VecDotIq3XxsQ8_K(int64_t n, const void* w, const void* a, float* out) {
  *out = GridDot<BlockIq3Xxs, DecodeIq3Xxs>(n, w, a, 0.25f);
}
void VecDotIq3SQ8_K(int64_t n, const void* w, const void* a, float* out) {
  *out = GridDot<BlockIq3S, DecodeIq3S>(n, w, a, 1.0f);
}

void VecDotIq1SQ8_K(int64_t n, const void* w, const void* a, float* out) {
  *out = GridDot<BlockIq1S, DecodeEighths<BlockIq1S, DecodeIq1S>>(n, w, a, 0.125f);
}
void VecDotIq1MQ8_K(int64_t n, const void* w, const void* a, float* out) {
  *out = GridDot<BlockIq1M, DecodeEighths<BlockIq1M, DecodeIq1M>, Iq1MScale>(n, w, a, 0.125f);
}

void FillGenericGridKernels(TypeTraits& traits) {
  using Dequantize = void (*)(const void*, float*, int64_t);
  using Quantize = void (*)(const float*, void*, int64_t);
  using Dot = void (*)(int64_t, const void*, const void*, float*);
  struct Row {
    GgmlType type;
    Dequantize dequantize;
    Quantize quantize;
    Dot dot;
  };
  static constexpr Row kRows[] = {
      {GgmlType::kIq2Xxs, DequantizeRowIq2Xxs, QuantizeRowIq2Xxs, VecDotIq2XxsQ8_K},
      {GgmlType::kIq2Xs, DequantizeRowIq2Xs, QuantizeRowIq2Xs, VecDotIq2XsQ8_K},
      {GgmlType::kIq2S, DequantizeRowIq2S, QuantizeRowIq2S, VecDotIq2SQ8_K},
      {GgmlType::kIq3Xxs, DequantizeRowIq3Xxs, QuantizeRowIq3Xxs, VecDotIq3XxsQ8_K},
      {GgmlType::kIq3S, DequantizeRowIq3S, QuantizeRowIq3S, VecDotIq3SQ8_K},
      {GgmlType::kIq1S, DequantizeRowIq1S, QuantizeRowIq1S, VecDotIq1SQ8_K},
      {GgmlType::kIq1M, DequantizeRowIq1M, QuantizeRowIq1M, VecDotIq1MQ8_K},
  };
  for (const Row& row : kRows) {
    if (row.type != traits.type) continue;
    traits = {traits.type,  GgmlType::kQ8_K, kQK_K,  row.dequantize,
              row.quantize, QuantizeActQ8_K, row.dot};
    return;
  }
}

}  // namespace shardlm::internal
