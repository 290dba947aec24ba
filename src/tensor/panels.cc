// Repacking GGUF rows into 16-row panels (panels.h).
#include "tensor/panels.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "tensor/fp16.h"
#include "tensor/kernels_generic.h"

namespace shardlm {
namespace {

// The 256 quants of a Q4_K row block (Q5_K's low 4 bits) in column order: low nibbles of
// qs[32c .. 32c+32) are columns 64c .. 64c+32, high nibbles the next 32. Decoded a whole block at a
// time, in loops the compiler vectorizes: one column at a time (a function of the column index)
// took most of the load time of a Q4_K_M or Q6_K model (1.5-1.7 s of a 0.6B one on two Zen 3
// cores).
template <class Block>
void NibbleQuants(const Block& b, uint8_t (&q)[kQK_K]) {
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      q[64 * chunk + l] = b.qs[32 * chunk + l] & 15;
      q[64 * chunk + 32 + l] = b.qs[32 * chunk + l] >> 4;
    }
  }
}

// Scale and min of sub-block j from the 12 packed bytes (6 bits each).
void Q4KScaleMin(const uint8_t* q, int j, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 256 quants (0..63) of a Q6_K row block in column order: per 128-column half h, ql[64h + l]
// holds columns 128h + l (low nibble) and 128h + 64 + l (high nibble) for l < 64; qh[32h + l]
// holds the top bits of columns 128h + l + 32k at bits 2k (k = 0..3).
void Q6KQuants(const BlockQ6_K& b, uint8_t (&q)[kQK_K]) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    uint8_t* out = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      out[l] = uint8_t((ql[l] & 15) | ((qh[l] & 3) << 4));
      out[32 + l] = uint8_t((ql[32 + l] & 15) | (((qh[l] >> 2) & 3) << 4));
      out[64 + l] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      out[96 + l] = uint8_t((ql[32 + l] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

// The 256 quants (0..31) of a Q5_K row block: Q4_K's nibbles, and the 5th bit of column
// 64c + l at bit 2c (l < 32) or 2c + 1 (l ≥ 32) of qh[l % 32].
void Q5KQuants(const BlockQ5_K& b, uint8_t (&q)[kQK_K]) {
  NibbleQuants(b, q);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      q[64 * chunk + l] |= ((b.qh[l] >> (2 * chunk)) & 1) << 4;
      q[64 * chunk + 32 + l] |= ((b.qh[l] >> (2 * chunk + 1)) & 1) << 4;
    }
  }
}

// Q4_K and Q5_K (Quants: a block's 4- or 5-bit quants): the low 4 bits, the 5th bits where the
// panel has them, the 6-bit scales and mins unpacked.
template <class Block, class Panel, void (*Quants)(const Block&, uint8_t (&)[kQK_K])>
void RepackScaleMin(const Block* const* rows, int n_rows, Panel* p) {
  std::memset(p, 0, sizeof(*p));
  for (int r = 0; r < n_rows; ++r) {
    const Block& b = *rows[r];
    uint8_t q[kQK_K];
    Quants(b, q);
    for (int pair = 0; pair < 32; ++pair) {
      for (int e = 0; e < 4; ++e) {
        const int lo = q[8 * pair + e], hi = q[8 * pair + 4 + e];
        p->qs[pair][4 * r + e] = uint8_t((lo & 15) | ((hi & 15) << 4));
        if constexpr (requires { p->qh; }) {
          p->qh[2 * pair] |= uint64_t(lo >> 4) << (4 * r + e);
          p->qh[2 * pair + 1] |= uint64_t(hi >> 4) << (4 * r + e);
        }
      }
    }
    for (int j = 0; j < 8; ++j) Q4KScaleMin(b.scales, j, &p->scales[j][r], &p->mins[j][r]);
    p->d[r] = b.d;
    p->dmin[r] = b.dmin;
  }
}

void RepackQ6K(const BlockQ6_K* const* rows, int n_rows, PanelQ6_K* p) {
  std::memset(p, 0, sizeof(*p));
  for (int r = 0; r < n_rows; ++r) {
    const BlockQ6_K& b = *rows[r];
    uint8_t q[kQK_K];
    Q6KQuants(b, q);
    for (int g = 0; g < 16; ++g) {
      for (int e = 0; e < 4; ++e) {
        const int fourth = q[16 * g + 12 + e];
        for (int i = 0; i < 3; ++i) {
          const int top = (fourth >> (2 * i)) & 3;
          p->q[g][i][4 * r + e] = uint8_t(q[16 * g + 4 * i + e] | (top << 6));
        }
      }
    }
    for (int t = 0; t < 8; ++t) {
      p->scales[t][r][0] = b.scales[2 * t];
      p->scales[t][r][1] = b.scales[2 * t + 1];
    }
    p->d[r] = b.d;
  }
}

// Rows' blocks 2k, 2k + 1 → panel block k; the panel's value for (row, column) is the row's.
void RepackQ80(const BlockQ8_0* const* rows, int n_rows, PanelQ8_0* p) {
  std::memset(p, 0, sizeof(*p));
  for (int r = 0; r < n_rows; ++r) {
    for (int k = 0; k < 2; ++k) {
      const BlockQ8_0& b = rows[r][k];
      for (int g = 0; g < 8; ++g) {
        for (int e = 0; e < 4; ++e) p->u[k][g][4 * r + e] = uint8_t(b.qs[4 * g + e] + 128);
      }
      p->d[k][r] = b.d;
    }
  }
}

// The 4-bit index of column j of a 32-element block (low nibbles: 0..15, high: 16..31).
int NibbleQuant(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

// The indices of 32 columns of row r (their 16 GGUF bytes) into panel qs (IQ4_NL's layout).
void RepackNibbles(const uint8_t* row_qs, int r, uint8_t (*qs)[64]) {
  for (int pair = 0; pair < 4; ++pair) {
    for (int e = 0; e < 4; ++e) {
      const int lo = NibbleQuant(row_qs, 8 * pair + e);
      const int hi = NibbleQuant(row_qs, 8 * pair + 4 + e);
      qs[pair][4 * r + e] = uint8_t(lo | (hi << 4));
    }
  }
}

// The 5th bits of 32 columns of row r (a Q5 block's qh: bit j for column j) into the panel's
// masks.
void RepackHighBits(const uint8_t* row_qh, int r, uint64_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, row_qh, sizeof(bits));
  for (int g = 0; g < 8; ++g) {
    for (int e = 0; e < 4; ++e) qh[g] |= uint64_t((bits >> (4 * g + e)) & 1) << (4 * r + e);
  }
}

// The 32-element block types but Q8_0, two GGUF blocks per panel block: the 4 low bits, and
// whichever of d, m, the 5th bits and e the block has.
template <class Block, class Panel>
void RepackSmallBlocks(const Block* const* rows, int n_rows, Panel* p) {
  std::memset(p, 0, sizeof(*p));
  for (int r = 0; r < n_rows; ++r) {
    for (int k = 0; k < 2; ++k) {
      const Block& b = rows[r][k];
      RepackNibbles(b.qs, r, p->qs[k]);
      if constexpr (requires { b.d; }) p->d[k][r] = b.d;
      if constexpr (requires { b.m; }) p->m[k][r] = b.m;
      if constexpr (requires { b.qh; }) RepackHighBits(b.qh, r, p->qh[k]);
      if constexpr (requires { b.e; }) p->e[k][r] = b.e;
    }
  }
}

void RepackIq4Xs(const BlockIq4Xs* const* rows, int n_rows, PanelIq4Xs* p) {
  std::memset(p, 0, sizeof(*p));
  for (int r = 0; r < n_rows; ++r) {
    const BlockIq4Xs& b = *rows[r];
    for (int j = 0; j < 8; ++j) {
      RepackNibbles(b.qs + 16 * j, r, p->qs[j]);
      p->scales[j][r] = int8_t(internal::Iq4XsScale(b.scales_h, b.scales_l, j) - 32);
    }
    p->d[r] = b.d;
  }
}

// 2-bit digits of 256 columns (q[column] in 0..3) of row r into a panel's [16][64] layout.
void PackDigits2(const int8_t* q, int r, uint8_t (*dst)[64]) {
  for (int i = 0; i < 16; ++i) {
    for (int e = 0; e < 4; ++e) {
      for (int l = 0; l < 4; ++l)
        dst[i][4 * r + e] |= uint8_t((q[16 * i + 4 * l + e] & 3) << (2 * l));
    }
  }
}

void RepackQ2K(const BlockQ2_K* const* rows, int n_rows, PanelQ2_K* p) {
  std::memset(p, 0, sizeof(*p));
  int8_t q[kQK_K];
  for (int r = 0; r < n_rows; ++r) {
    internal::UnpackQ2(*rows[r], q);
    PackDigits2(q, r, p->q);
    for (int i = 0; i < 16; ++i) p->scales[i][r] = rows[r]->scales[i];
    p->d[r] = rows[r]->d;
    p->dmin[r] = rows[r]->dmin;
  }
}

void RepackQ3K(const BlockQ3_K* const* rows, int n_rows, PanelQ3_K* p) {
  std::memset(p, 0, sizeof(*p));
  int8_t q[kQK_K];
  int8_t scales[16];
  for (int r = 0; r < n_rows; ++r) {
    internal::UnpackQ3(*rows[r], q);  // −4..3
    for (int c = 0; c < kQK_K; ++c) {
      const int u = q[c] + 4;
      q[c] = int8_t(u & 3);
      p->qh[c / 4] |= uint64_t(u >> 2) << (4 * r + c % 4);
    }
    PackDigits2(q, r, p->q);
    internal::UnpackQ3Scales(rows[r]->scales, scales);
    for (int i = 0; i < 16; ++i) p->scales[i][r] = int8_t(scales[i] - 32);
    p->d[r] = rows[r]->d;
  }
}

// The digits of rows' blocks into a ternary panel.
template <class Block, void (*Digits)(const Block&, int8_t*)>
void RepackTernary(const Block* const* rows, int n_rows, PanelTernary* p) {
  std::memset(p, 0, sizeof(*p));
  int8_t q[kQK_K];
  for (int r = 0; r < n_rows; ++r) {
    Digits(*rows[r], q);
    PackDigits2(q, r, p->q);
    p->d[r] = rows[r]->d;
  }
}

// Repacks with Repack(each row's first GGUF block of a panel block, rows, panel block); a
// panel block spans kColumns columns, kBlocks GGUF blocks of each row.
template <class Block, class Panel, int64_t kColumns, int64_t kBlocks,
          void (*Repack)(const Block* const*, int, Panel*)>
void RepackAll(const void* src, int64_t row_bytes, int64_t rows, int64_t cols, int64_t first_panel,
               int64_t end_panel, void* dst) {
  const int64_t units = cols / kColumns;
  auto* panels = static_cast<Panel*>(dst);
  const Block* block_rows[kPanelRows];
  for (int64_t panel = first_panel; panel < end_panel; ++panel) {
    const int64_t r0 = panel * kPanelRows;
    const int n_rows = int(std::min<int64_t>(kPanelRows, rows - r0));
    for (int64_t u = 0; u < units; ++u) {
      for (int r = 0; r < n_rows; ++r) {
        block_rows[r] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(src) +
                                                       (r0 + r) * row_bytes) +
                        kBlocks * u;
      }
      Repack(block_rows, n_rows, &panels[panel * units + u]);
    }
  }
}

// A panel format: its block's bytes and columns, and the repack of rows into it.
struct PanelFormat {
  GgmlType type;
  int64_t block_bytes;
  int64_t columns;
  void (*repack)(const void* src, int64_t row_bytes, int64_t rows, int64_t cols,
                 int64_t first_panel, int64_t end_panel, void* dst);
};

// Repack(each row's first GGUF block of a panel block, rows, panel block) over kBlocks GGUF
// blocks of kColumns columns per panel block.
template <class Block, class Panel, int64_t kColumns, int64_t kBlocks,
          void (*Repack)(const Block* const*, int, Panel*)>
constexpr PanelFormat Format(GgmlType type) {
  return {type, int64_t(sizeof(Panel)), kColumns,
          &RepackAll<Block, Panel, kColumns, kBlocks, Repack>};
}

// Every type with panels: the 256-element types one GGUF block per panel block, the 32-element
// ones two.
constexpr PanelFormat kFormats[] = {
    Format<BlockQ2_K, PanelQ2_K, kQK_K, 1, RepackQ2K>(GgmlType::kQ2_K),
    Format<BlockQ3_K, PanelQ3_K, kQK_K, 1, RepackQ3K>(GgmlType::kQ3_K),
    Format<BlockQ4_K, PanelQ4_K, kQK_K, 1,
           RepackScaleMin<BlockQ4_K, PanelQ4_K, NibbleQuants<BlockQ4_K>>>(GgmlType::kQ4_K),
    Format<BlockQ5_K, PanelQ5_K, kQK_K, 1, RepackScaleMin<BlockQ5_K, PanelQ5_K, Q5KQuants>>(
        GgmlType::kQ5_K),
    Format<BlockQ6_K, PanelQ6_K, kQK_K, 1, RepackQ6K>(GgmlType::kQ6_K),
    Format<BlockIq4Xs, PanelIq4Xs, kQK_K, 1, RepackIq4Xs>(GgmlType::kIq4Xs),
    Format<BlockTq1_0, PanelTernary, kQK_K, 1, RepackTernary<BlockTq1_0, internal::DigitsTq1>>(
        GgmlType::kTq1_0),
    Format<BlockTq2_0, PanelTernary, kQK_K, 1, RepackTernary<BlockTq2_0, internal::DigitsTq2>>(
        GgmlType::kTq2_0),
    Format<BlockQ8_0, PanelQ8_0, 2 * kQK, 2, RepackQ80>(GgmlType::kQ8_0),
    Format<BlockQ4_0, PanelNibbles, 2 * kQK, 2, RepackSmallBlocks<BlockQ4_0, PanelNibbles>>(
        GgmlType::kQ4_0),
    Format<BlockQ4_1, PanelQ4_1, 2 * kQK, 2, RepackSmallBlocks<BlockQ4_1, PanelQ4_1>>(
        GgmlType::kQ4_1),
    Format<BlockQ5_0, PanelQ5_0, 2 * kQK, 2, RepackSmallBlocks<BlockQ5_0, PanelQ5_0>>(
        GgmlType::kQ5_0),
    Format<BlockQ5_1, PanelQ5_1, 2 * kQK, 2, RepackSmallBlocks<BlockQ5_1, PanelQ5_1>>(
        GgmlType::kQ5_1),
    Format<BlockIq4Nl, PanelNibbles, 2 * kQK, 2, RepackSmallBlocks<BlockIq4Nl, PanelNibbles>>(
        GgmlType::kIq4Nl),
    Format<BlockMxfp4, PanelMxfp4, 2 * kQK, 2, RepackSmallBlocks<BlockMxfp4, PanelMxfp4>>(
        GgmlType::kMxfp4),
};

// The format of `type`, nullptr for types without panels.
const PanelFormat* FormatOf(GgmlType type) {
  for (const PanelFormat& f : kFormats) {
    if (f.type == type) return &f;
  }
  return nullptr;
}

// The format of `type`, which must have panels and cols a multiple of its columns.
const PanelFormat& CheckedFormat(GgmlType type, int64_t cols) {
  const PanelFormat* f = FormatOf(type);
  SHARDLM_CHECK(f != nullptr && cols % f->columns == 0);
  return *f;
}

}  // namespace

bool HasPanelLayout(GgmlType type) { return FormatOf(type) != nullptr; }

int64_t PanelColumns(GgmlType type) {
  const PanelFormat* f = FormatOf(type);
  SHARDLM_CHECK(f != nullptr);
  return f->columns;
}

int64_t PanelStrideBytes(GgmlType type, int64_t cols) {
  const PanelFormat& f = CheckedFormat(type, cols);
  return cols / f.columns * f.block_bytes;
}

int64_t PanelMatrixBytes(GgmlType type, int64_t rows, int64_t cols) {
  return (rows + kPanelRows - 1) / kPanelRows * PanelStrideBytes(type, cols);
}

void RepackPanels(GgmlType type, const void* src, int64_t row_bytes, int64_t rows, int64_t cols,
                  int64_t first_panel, int64_t end_panel, void* dst) {
  CheckedFormat(type, cols).repack(src, row_bytes, rows, cols, first_panel, end_panel, dst);
}

void FillQ8_0ActSide(void* act_row, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(act_row);
  auto* side = reinterpret_cast<PanelActSide*>(static_cast<uint8_t*>(act_row) +
                                               n / kQK * int64_t(sizeof(BlockQ8_0)));
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) sum += blocks[b].qs[j];
    side[b] = {Fp16ToFp32(blocks[b].d), -128 * sum};
  }
}

}  // namespace shardlm
