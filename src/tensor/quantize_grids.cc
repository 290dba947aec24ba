// Reference quantizers of the grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
// IQ1_M), for gguf synth and the tests.
//
// Not llama-quantize's search (which wants an importance matrix for most of these types):
// a simpler one that gives valid blocks of the expected accuracy. Per scale group (16 or 32
// elements) it tries scales around the one that maps the largest magnitude onto the grid's
// largest level; for each it rounds every element to its nearest level and takes the grid
// entry nearest to that combination (a table over all combinations, built once per grid),
// then refits the scale by least squares; the fit of least x²-weighted squared error wins.
// The super-block scale maps the largest group scale onto the largest odd integer scale,
// each group takes the nearest odd scale, and the entries are chosen again for it.
// Signs: the sign of each element; where a type stores 7 signs per 8 (the eighth makes the
// count of negatives even) and the count is odd, the element of least weight is flipped.
//
// Goals: every block decodes with kernels_generic_grids.cc's formulas to within the type's
// error. Non-goals: byte equality with llama-quantize, importance matrices, speed beyond
// what synthesizing a 0.6B model needs (seconds).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/fp16.h"
#include "tensor/iquant_grids.h"
#include "tensor/kernels_generic.h"
#include "tensor/quant_blocks.h"

namespace shardlm::internal {
namespace {

// A grid as the search sees it: each entry's value per element and, for every combination of
// per-element levels, the entry nearest to it.
class GridSearch {
 public:
  template <typename Entry, size_t N>
  GridSearch(const std::array<Entry, N>& grid, int width) : width_(width), values_(N * width) {
    for (size_t i = 0; i < N; ++i) {
      for (int k = 0; k < width; ++k) {
        const int v = static_cast<int8_t>((grid[i] >> (8 * k)) & 0xFF);
        values_[i * width + k] = v;
        if (std::find(levels_.begin(), levels_.end(), v) == levels_.end()) levels_.push_back(v);
      }
    }
    std::sort(levels_.begin(), levels_.end());
    int combinations = 1;
    for (int k = 0; k < width; ++k) combinations *= static_cast<int>(levels_.size());
    nearest_.resize(combinations);
    std::vector<int> level(width);
    for (int code = 0; code < combinations; ++code) {
      for (int k = 0, c = code; k < width; ++k, c /= static_cast<int>(levels_.size())) {
        level[k] = levels_[c % levels_.size()];
      }
      int best = 0;
      long best_distance = -1;
      for (size_t i = 0; i < N; ++i) {
        long distance = 0;
        for (int k = 0; k < width; ++k) {
          const long diff = values_[i * width + k] - level[k];
          distance += diff * diff;
        }
        if (best_distance < 0 || distance < best_distance) {
          best_distance = distance;
          best = static_cast<int>(i);
        }
      }
      nearest_[code] = static_cast<uint16_t>(best);
    }
  }

  int width() const { return width_; }
  int max_level() const { return levels_.back(); }
  const std::vector<int>& levels() const { return levels_; }
  int value(int entry, int k) const { return values_[entry * width_ + k]; }

  // The entry nearest to t[k]·inverse_scale − offset, k < width.
  int Nearest(const float* t, float inverse_scale, float offset) const {
    int code = 0;
    for (int k = width_ - 1; k >= 0; --k) {
      const float v = t[k] * inverse_scale - offset;
      size_t best = 0;
      for (size_t l = 1; l < levels_.size(); ++l) {
        if (std::fabs(v - static_cast<float>(levels_[l])) <
            std::fabs(v - static_cast<float>(levels_[best]))) {
          best = l;
        }
      }
      code = code * static_cast<int>(levels_.size()) + static_cast<int>(best);
    }
    return nearest_[code];
  }

 private:
  int width_;
  std::vector<int> values_;
  std::vector<int> levels_;
  std::vector<uint16_t> nearest_;
};

const GridSearch& Iq2XxsSearch() {
  static const GridSearch g(kIq2XxsGrid, 8);
  return g;
}
const GridSearch& Iq2XsSearch() {
  static const GridSearch g(kIq2XsGrid, 8);
  return g;
}
const GridSearch& Iq2SSearch() {
  static const GridSearch g(kIq2SGrid, 8);
  return g;
}
const GridSearch& Iq3XxsSearch() {
  static const GridSearch g(kIq3XxsGrid, 4);
  return g;
}
const GridSearch& Iq3SSearch() {
  static const GridSearch g(kIq3SGrid, 4);
  return g;
}
const GridSearch& Iq1Search() {
  static const GridSearch g(kIq1SGrid, 8);
  return g;
}

// Elements t[0..n) (n a multiple of the grid's width; weights w) as scale · (entry + offset):
// the entries and the weighted squared error.
float FitEntries(const GridSearch& grid, const float* t, const float* w, int n, float scale,
                 const float* offsets, int* entries) {
  const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
  float err = 0;
  for (int g = 0; g < n / grid.width(); ++g) {
    const float offset = offsets ? offsets[g] : 0.0f;
    entries[g] = grid.Nearest(t + g * grid.width(), inverse, offset);
    for (int k = 0; k < grid.width(); ++k) {
      const int e = g * grid.width() + k;
      const float diff = t[e] - scale * (static_cast<float>(grid.value(entries[g], k)) + offset);
      err += w[e] * diff * diff;
    }
  }
  return err;
}

// The scale of least weighted error for t[0..n) (see the file comment): the largest magnitude
// mapped near the grid's top two levels and near its smallest (a grid may lack a constant
// entry at its top level: IQ3_S has only 1, 1, 1, 1), each fit refined by least squares. (All
// eight levels of the IQ3 grids cost 2.7 times as much, for 1% less error.)
float BestScale(const GridSearch& grid, const float* t, const float* w, int n) {
  float amax = 0;
  for (int e = 0; e < n; ++e) amax = std::max(amax, std::fabs(t[e]));
  if (amax == 0) return 0;
  int entries[32 / 4];
  float best_scale = amax / static_cast<float>(grid.max_level()), best_err = INFINITY;
  const std::vector<int>& levels = grid.levels();
  const int tried[3] = {levels[levels.size() - 1], levels[levels.size() - 2], levels.front()};
  for (int level : tried) {
    for (int step = -3; step <= 3; ++step) {
      const float scale =
          amax / static_cast<float>(level) * (1.0f + 0.06f * static_cast<float>(step));
      float err = FitEntries(grid, t, w, n, scale, nullptr, entries);
      if (err < best_err) best_err = err, best_scale = scale;
      float sum_tv = 0, sum_vv = 0;
      for (int e = 0; e < n; ++e) {
        const float v = static_cast<float>(grid.value(entries[e / grid.width()], e % grid.width()));
        sum_tv += w[e] * t[e] * v;
        sum_vv += w[e] * v * v;
      }
      if (sum_vv > 0 && sum_tv > 0) {
        const float refit = sum_tv / sum_vv;
        err = FitEntries(grid, t, w, n, refit, nullptr, entries);
        if (err < best_err) best_err = err, best_scale = refit;
      }
    }
  }
  return best_scale;
}

// The signs of x[0..8) as bits; with `even`, the count of set bits made even by flipping the
// element of least |x|. t[k] = x[k] with the stored sign taken off (negative where flipped).
uint8_t Signs(const float* x, bool even, float* t) {
  uint8_t signs = 0;
  for (int k = 0; k < 8; ++k) signs |= static_cast<uint8_t>((x[k] < 0) << k);
  if (even && (__builtin_popcount(signs) & 1)) {
    int least = 0;
    for (int k = 1; k < 8; ++k) {
      if (std::fabs(x[k]) < std::fabs(x[least])) least = k;
    }
    signs ^= static_cast<uint8_t>(1 << least);
  }
  for (int k = 0; k < 8; ++k) t[k] = (signs >> k) & 1 ? -x[k] : x[k];
  return signs;
}

// One super-block's group scales on one fp16 scale: D = the largest / (2·max_odd + 1) / factor
// (stored as fp16), each group's odd scale 2k + 1 nearest to its own. Returns D's fp16 bits.
fp16_t SuperScale(const float* scales, int n_groups, int k_max, float factor, int* k) {
  float max_scale = 0;
  for (int g = 0; g < n_groups; ++g) max_scale = std::max(max_scale, scales[g]);
  const fp16_t bits = Fp32ToFp16(max_scale / static_cast<float>(2 * k_max + 1) / factor);
  const float d = Fp16ToFp32(bits);
  for (int g = 0; g < n_groups; ++g) {
    const float odd = d > 0 ? scales[g] / (d * factor) : 1.0f;
    k[g] = std::clamp(static_cast<int>(std::lround((odd - 1) / 2)), 0, k_max);
  }
  return bits;
}

struct Prepared {
  float t[kQK_K];  // the values the grid fits (magnitudes, one flipped where parity asks)
  float w[kQK_K];
  uint8_t signs[kQK_K / 8];
};

// Signs and weights of a super-block.
void Prepare(const float* x, bool signed_grid, bool even, Prepared* p) {
  for (int e = 0; e < kQK_K; ++e) p->w[e] = x[e] * x[e];
  for (int g = 0; g < kQK_K / 8; ++g) {
    if (signed_grid) {
      std::memcpy(p->t + 8 * g, x + 8 * g, 8 * sizeof(float));
      p->signs[g] = 0;
    } else {
      p->signs[g] = Signs(x + 8 * g, even, p->t + 8 * g);
    }
  }
}

// The IQ2/IQ3 search over a super-block: group scales per `group` elements, their odd integer
// scales k (4 bits) under the returned fp16 D, and the entries for the final scales.
fp16_t FitSuperBlock(const GridSearch& grid, const Prepared& p, int group, float factor, int* k,
                     int* entries) {
  const int n_groups = kQK_K / group;
  float scales[16];
  for (int g = 0; g < n_groups; ++g) {
    scales[g] = BestScale(grid, p.t + g * group, p.w + g * group, group);
  }
  const fp16_t bits = SuperScale(scales, n_groups, 15, factor, k);
  const float d = Fp16ToFp32(bits);
  for (int g = 0; g < n_groups; ++g) {
    FitEntries(grid, p.t + g * group, p.w + g * group, group,
               d * factor * static_cast<float>(2 * k[g] + 1), nullptr,
               entries + g * group / grid.width());
  }
  return bits;
}

void QuantizeIq2Xxs(const float* x, BlockIq2Xxs* y) {
  Prepared p;
  Prepare(x, false, true, &p);
  int k[8], entries[32];
  y->d = FitSuperBlock(Iq2XxsSearch(), p, 32, 0.125f, k, entries);
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t indices = 0, codes = static_cast<uint32_t>(k[ib]) << 28;
    for (int l = 0; l < 4; ++l) {
      indices |= static_cast<uint32_t>(entries[4 * ib + l]) << (8 * l);
      codes |= static_cast<uint32_t>(p.signs[4 * ib + l] & 127) << (7 * l);
    }
    std::memcpy(y->qs + 4 * ib, &indices, 4);
    std::memcpy(y->qs + 4 * ib + 2, &codes, 4);
  }
}

void QuantizeIq2Xs(const float* x, BlockIq2Xs* y) {
  Prepared p;
  Prepare(x, false, true, &p);
  int k[16], entries[32];
  y->d = FitSuperBlock(Iq2XsSearch(), p, 16, 0.125f, k, entries);
  for (int g = 0; g < 32; ++g) {
    y->qs[g] = static_cast<uint16_t>(entries[g] | ((p.signs[g] & 127) << 9));
  }
  for (int ib = 0; ib < 8; ++ib)
    y->scales[ib] = static_cast<uint8_t>(k[2 * ib] | (k[2 * ib + 1] << 4));
}

void QuantizeIq2S(const float* x, BlockIq2S* y) {
  Prepared p;
  Prepare(x, false, false, &p);
  int k[16], entries[32];
  y->d = FitSuperBlock(Iq2SSearch(), p, 16, 0.125f, k, entries);
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int g = 0; g < 32; ++g) {
    y->qs[g] = static_cast<uint8_t>(entries[g] & 0xFF);
    y->qs[kQK_K / 8 + g] = p.signs[g];
    y->qh[g / 4] |= static_cast<uint8_t>((entries[g] >> 8) << (2 * (g % 4)));
  }
  for (int ib = 0; ib < 8; ++ib)
    y->scales[ib] = static_cast<uint8_t>(k[2 * ib] | (k[2 * ib + 1] << 4));
}

void QuantizeIq3Xxs(const float* x, BlockIq3Xxs* y) {
  Prepared p;
  Prepare(x, false, true, &p);
  int k[8], entries[64];
  y->d = FitSuperBlock(Iq3XxsSearch(), p, 32, 0.25f, k, entries);
  for (int i = 0; i < 64; ++i) y->qs[i] = static_cast<uint8_t>(entries[i]);
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t codes = static_cast<uint32_t>(k[ib]) << 28;
    for (int l = 0; l < 4; ++l)
      codes |= static_cast<uint32_t>(p.signs[4 * ib + l] & 127) << (7 * l);
    std::memcpy(y->qs + kQK_K / 4 + 4 * ib, &codes, 4);
  }
}

void QuantizeIq3S(const float* x, BlockIq3S* y) {
  Prepared p;
  Prepare(x, false, false, &p);
  int k[8], entries[64];
  y->d = FitSuperBlock(Iq3SSearch(), p, 32, 1.0f, k, entries);
  std::memset(y->qh, 0, sizeof(y->qh));
  std::memset(y->scales, 0, sizeof(y->scales));
  for (int i = 0; i < 64; ++i) {
    y->qs[i] = static_cast<uint8_t>(entries[i] & 0xFF);
    y->qh[i / 8] |= static_cast<uint8_t>((entries[i] >> 8) << (i % 8));
  }
  std::memcpy(y->signs, p.signs, sizeof(y->signs));
  for (int ib = 0; ib < 8; ++ib) y->scales[ib / 2] |= static_cast<uint8_t>(k[ib] << (4 * (ib % 2)));
}

// IQ1: value = scale · (entry ± 1/8). For `group` elements sharing a scale and shifts per
// `shift_group` elements (IQ1_S: 32, one shift; IQ1_M: 8), the better shift of each.
struct Iq1Fit {
  int entries[kQK_K / 8];
  bool negative_shift[kQK_K / 8];  // per group of 8
};

// The shifts (per shift_group elements of t[0..n)) of least error for `scale`, and its error.
float FitShifts(const float* t, const float* w, int n, int shift_group, float scale, float* offsets,
                int* entries) {
  const GridSearch& grid = Iq1Search();
  float err = 0;
  for (int s = 0; s < n / shift_group; ++s) {
    float best = INFINITY, offsets_tried[2] = {0.125f, -0.125f};
    float chosen = 0.125f;
    for (float offset : offsets_tried) {
      float per_group[4];
      for (int g = 0; g < shift_group / 8; ++g) per_group[g] = offset;
      int tried[4];
      const float e = FitEntries(grid, t + s * shift_group, w + s * shift_group, shift_group, scale,
                                 per_group, tried);
      if (e < best) {
        best = e;
        chosen = offset;
        std::copy(tried, tried + shift_group / 8, entries + s * shift_group / 8);
      }
    }
    for (int g = 0; g < shift_group / 8; ++g) offsets[s * shift_group / 8 + g] = chosen;
    err += best;
  }
  return err;
}

// IQ1 group scales (`group` elements each) with their shifts, on a 3-bit odd scale under the
// returned fp16 D.
fp16_t FitIq1(const float* x, int group, int shift_group, int* k, Iq1Fit* fit) {
  float w[kQK_K];
  for (int e = 0; e < kQK_K; ++e) w[e] = x[e] * x[e];
  const int n_groups = kQK_K / group;
  float scales[16], offsets[kQK_K / 8];
  for (int g = 0; g < n_groups; ++g) {
    float amax = 0;
    for (int e = 0; e < group; ++e) amax = std::max(amax, std::fabs(x[g * group + e]));
    float best = INFINITY;
    scales[g] = 0;
    for (int step = 0; step <= 12 && amax > 0; ++step) {
      const float scale = amax / 1.125f * (0.6f + 0.05f * static_cast<float>(step));
      const float err = FitShifts(x + g * group, w + g * group, group, shift_group, scale,
                                  offsets + g * group / 8, fit->entries + g * group / 8);
      if (err < best) best = err, scales[g] = scale;
    }
  }
  const fp16_t bits = SuperScale(scales, n_groups, 7, 1.0f, k);
  const float d = Fp16ToFp32(bits);
  for (int g = 0; g < n_groups; ++g) {
    FitShifts(x + g * group, w + g * group, group, shift_group,
              d * static_cast<float>(2 * k[g] + 1), offsets + g * group / 8,
              fit->entries + g * group / 8);
  }
  for (int g = 0; g < kQK_K / 8; ++g) fit->negative_shift[g] = offsets[g] < 0;
  return bits;
}

void QuantizeIq1S(const float* x, BlockIq1S* y) {
  int k[8];
  Iq1Fit fit;
  y->d = FitIq1(x, 32, 32, k, &fit);
  for (int ib = 0; ib < 8; ++ib) {
    uint16_t qh = static_cast<uint16_t>((k[ib] << 12) | (fit.negative_shift[4 * ib] ? 0x8000 : 0));
    for (int l = 0; l < 4; ++l) {
      const int entry = fit.entries[4 * ib + l];
      y->qs[4 * ib + l] = static_cast<uint8_t>(entry & 0xFF);
      qh = static_cast<uint16_t>(qh | ((entry >> 8) << (3 * l)));
    }
    y->qh[ib] = qh;
  }
}

void QuantizeIq1M(const float* x, BlockIq1M* y) {
  int k[16];
  Iq1Fit fit;
  const fp16_t d = FitIq1(x, 16, 8, k, &fit);
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int g = 0; g < 32; ++g) {
    const int entry = fit.entries[g];
    y->qs[g] = static_cast<uint8_t>(entry & 0xFF);
    const int nibble = (entry >> 8) | (fit.negative_shift[g] ? 8 : 0);
    y->qh[g / 2] |= static_cast<uint8_t>(nibble << (4 * (g % 2)));
  }
  uint16_t sc[4] = {};
  for (int ib = 0; ib < 8; ++ib) {
    sc[ib / 2] |= static_cast<uint16_t>((k[2 * ib] | (k[2 * ib + 1] << 3)) << (6 * (ib % 2)));
  }
  for (int i = 0; i < 4; ++i) sc[i] |= static_cast<uint16_t>(((d >> (4 * i)) & 0xF) << 12);
  std::memcpy(y->scales, sc, sizeof(sc));
}

template <typename Block, void (*Quantize)(const float*, Block*)>
void QuantizeRows(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) Quantize(src + i * kQK_K, &y[i]);
}

}  // namespace

void QuantizeRowIq2Xxs(const float* src, void* dst, int64_t n) {
  QuantizeRows<BlockIq2Xxs, QuantizeIq2Xxs>(src, dst, n);
}
void QuantizeRowIq2Xs(const float* src, void* dst, int64_t n) {
  QuantizeRows<BlockIq2Xs, QuantizeIq2Xs>(src, dst, n);
}
void QuantizeRowIq2S(const float* src, void* dst, int64_t n) {
  QuantizeRows<BlockIq2S, QuantizeIq2S>(src, dst, n);
}
void QuantizeRowIq3Xxs(const float* src, void* dst, int64_t n) {
  QuantizeRows<BlockIq3Xxs, QuantizeIq3Xxs>(src, dst, n);
}
void QuantizeRowIq3S(const float* src, void* dst, int64_t n) {
  QuantizeRows<BlockIq3S, QuantizeIq3S>(src, dst, n);
}
void QuantizeRowIq1S(const float* src, void* dst, int64_t n) {
  QuantizeRows<BlockIq1S, QuantizeIq1S>(src, dst, n);
}
void QuantizeRowIq1M(const float* src, void* dst, int64_t n) {
  QuantizeRows<BlockIq1M, QuantizeIq1M>(src, dst, n);
}

}  // namespace shardlm::internal
