// Weight panels: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4,
// TQ1_0 and TQ2_0 matrices repacked, 16 rows at a time, into the layout the batched kernels want
// (weights are mmapped and never copied, unless repacked: this is the repack).
//
// In a GGUF row block the 256 weights of one row are contiguous, so a kernel multiplies one
// row by one token at a time and pays for unpacking, scales and a float epilogue per (row,
// token) pair: ~9 int8 multiply-adds per instruction on Zen 4/5. A panel block interleaves
// 16 rows: four consecutive weights of 16 rows fill one 64-byte vector, so one vpdpbusd with
// four activation bytes broadcast computes 64 multiply-adds for 16 rows at once, the
// unpacking is shared by every token of the batch and the scales are applied to 16 rows per
// instruction. Measured (one thread, 3072 × 1024 Q4_K, 8 tokens): 0.10 ms against 0.43 for
// the row kernels.
//
// Layout of a repacked matrix: [panel = 16 rows][unit of PanelColumns(type) columns] blocks,
// each panel's blocks contiguous; a last partial panel is padded with zero rows (d = 0), whose
// outputs nobody reads. Element e of group g (4 columns: 4g..4g+3) of row r sits at byte
// 4r + e of a 64-byte vector.
//
// Goals: a repack that is exact (the panels hold the same numbers as the rows; values decode
// identically), few more bytes for decode to read (Q2_K, Q6_K, Q8_0 and the 32-element types
// but MXFP4: the same; Q5_K +2.3%, Q4_K +2.8%, IQ4_XS +2.9%, Q3_K +5.5%, MXFP4 +6%, TQ1_0 +22%),
// kernels whose output for a (row, token) pair does not depend on how many tokens share the
// call (per-lane arithmetic only).
// Non-goals: the grid i-quants (IQ1_*, IQ2_*, IQ3_*: a panel would not make their lookups
// cheaper, and a wider repacked format would grow the memory they are chosen to save; they
// keep their tile kernels), repacking at write time (the file on disk stays GGUF),
// dequantizing a panel row (the embedding lookup reads the file's rows).
//
// Thread safety: free functions, no state.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"
#include "tensor/quant_blocks.h"

namespace shardlm {

inline constexpr int kPanelRows = 16;

#pragma pack(push, 1)
// 16 rows × 256 columns of Q4_K. Value = d·scale_j·q − dmin·min_j, sub-block j = 32 columns.
struct PanelQ4_K {
  // [pair p][4r + e]: low nibble = column 8p + e, high nibble = column 8p + 4 + e.
  uint8_t qs[32][64];
  uint8_t scales[8][kPanelRows];  // [sub-block][row], 6 bits
  uint8_t mins[8][kPanelRows];    // [sub-block][row], 6 bits
  fp16_t d[kPanelRows];
  fp16_t dmin[kPanelRows];
};
// 16 rows × 256 columns of Q2_K. Value = d·scale_i·q − dmin·min_i, i = 16 columns.
struct PanelQ2_K {
  uint8_t q[16][64];  // [i][4r + e]: bits 2l, 2l + 1 = q of column 16i + 4l + e of row r
  uint8_t scales[16][kPanelRows];  // [i][row]: scale (low nibble) and min (high), as GGUF's
  fp16_t d[kPanelRows];
  fp16_t dmin[kPanelRows];
};
// 16 rows × 256 columns of Q3_K. Value = d·(scale_i − 32)·(u − 4), u = q + 4·h ∈ 0..7: q as
// PanelQ2_K's, h one 64-bit mask per group g of 4 columns (bit 4r + e: column 4g + e of row r).
// 32 bytes of padding: whole cache lines (+5.5% bytes).
struct PanelQ3_K {
  uint8_t q[16][64];
  uint64_t qh[64];
  int8_t scales[16][kPanelRows];  // scale − 32
  fp16_t d[kPanelRows];
  uint8_t padding[32];
};
// 16 rows × 256 columns of Q5_K: Q4_K's panel with each element's 5th bit, one 64-bit mask
// per group of 4 columns (bit 4r + e: column 4g + e of row r), a byte lane mask as it is.
struct PanelQ5_K {
  uint8_t qs[32][64];  // the low 4 bits, as PanelQ4_K's
  uint64_t qh[64];
  uint8_t scales[8][kPanelRows];
  uint8_t mins[8][kPanelRows];
  fp16_t d[kPanelRows];
  fp16_t dmin[kPanelRows];
};
// 16 rows × 256 columns of Q6_K. Value = d·scale_G·(q − 32), group G = 16 columns.
struct PanelQ6_K {
  // [G][i][4r + e], i < 3: bits 0-5 = the 6-bit quant of column 16G + 4i + e, bits 6-7 =
  // bits 2i, 2i + 1 of the quant of column 16G + 12 + e. Three vectors hold four, and the
  // kernel unpacks them with 9 vector ops (one AND each for the first three; shifts, two
  // bit selects and an AND for the fourth) where nibbles and a separate top-bits vector
  // took 17, which at 2 tokens per call was more than half of the kernel's work.
  uint8_t q[16][3][64];
  int8_t scales[8][kPanelRows][2];  // [t][row]: scales of groups 2t and 2t + 1
  fp16_t d[kPanelRows];
};
// 16 rows × 64 columns (two GGUF blocks) of Q8_0. Value = d_k·(u − 128), block k = 32 columns.
// Two blocks make 1088 bytes, 17 whole cache lines, so every vector load of a panel is aligned.
struct PanelQ8_0 {
  uint8_t u[2][8][64];  // [block k][group g][4r + e]: q + 128 of column 32k + 4g + e of row r
  fp16_t d[2][kPanelRows];
};
// 16 rows × 64 columns (two GGUF blocks) of IQ4_NL or Q4_0. Value = d_k·kIq4NlValues[q] or
// d_k·(q − 8).
struct PanelNibbles {
  // [block k][pair p][4r + e]: low nibble = column 32k + 8p + e, high = column 32k + 8p + 4 + e.
  uint8_t qs[2][4][64];
  fp16_t d[2][kPanelRows];
};
// 16 rows × 64 columns (two GGUF blocks) of Q4_1: value = d_k·q + m_k; qs as IQ4_NL's.
struct PanelQ4_1 {
  uint8_t qs[2][4][64];
  fp16_t d[2][kPanelRows];
  fp16_t m[2][kPanelRows];
};
// 16 rows × 64 columns of Q5_0 (value = d_k·(q − 16)) and of Q5_1 (d_k·q + m_k): q's low 4 bits
// as IQ4_NL's qs, its 5th bits one 64-bit mask per group of 4 columns (bit 4r + e: column
// 32k + 4g + e of row r), which becomes a byte lane mask as it is.
struct PanelQ5_0 {
  uint8_t qs[2][4][64];
  uint64_t qh[2][8];
  fp16_t d[2][kPanelRows];
};
struct PanelQ5_1 {
  uint8_t qs[2][4][64];
  uint64_t qh[2][8];
  fp16_t d[2][kPanelRows];
  fp16_t m[2][kPanelRows];
};
// 16 rows × 64 columns (two GGUF blocks) of MXFP4. Value = 2^(e_k − 128)·kMxfp4Values[q]; qs as
// IQ4_NL's. 32 bytes of padding keep every panel block on whole cache lines (+6% bytes).
struct PanelMxfp4 {
  uint8_t qs[2][4][64];
  uint8_t e[2][kPanelRows];
  uint8_t padding[32];
};
// 16 rows × 256 columns of IQ4_XS. Value = d·scale_j·kIq4NlValues[q], sub-block j = 32 columns;
// qs[j] as IQ4_NL's qs of one block. 32 bytes of padding: whole cache lines (+2.9% bytes).
struct PanelIq4Xs {
  uint8_t qs[8][4][64];
  int8_t scales[8][kPanelRows];  // ls − 32
  fp16_t d[kPanelRows];
  uint8_t padding[32];
};
// 16 rows × 256 columns of TQ2_0 or TQ1_0 (whose five trits per byte become 2 bits each here:
// +22% bytes, read at the memory's speed, where unpacking trits kept decode far below it).
// Value = d·(q − 1), q ∈ {0, 1, 2}. 32 bytes of padding: whole cache lines.
struct PanelTernary {
  uint8_t q[16][64];  // [i][4r + e]: bits 2l, 2l + 1 = q of column 16i + 4l + e of row r
  fp16_t d[kPanelRows];
  uint8_t padding[32];
};
#pragma pack(pop)

// What the panel kernels of Q8_0, IQ4_NL and MXFP4 read per Q8_0 activation block, after the
// row's blocks (TypeTraits::act_side): their weights are unsigned (w + 128) for
// vpdpbusd, so each block's sum starts at −128·Σq; and the block scale, converted once.
// Packed: it starts 34·(blocks) bytes into the row, on any 2-byte boundary.
#pragma pack(push, 1)
struct PanelActSide {
  float d;         // the block's fp16 d as float
  int32_t offset;  // −128 · Σ q over the block's 32 activations
};
#pragma pack(pop)
static_assert(sizeof(PanelActSide) == 8);
// Writes the PanelActSide of each block of a Q8_0 activation row of n elements after it.
void FillQ8_0ActSide(void* act_row, int64_t n);

static_assert(sizeof(PanelQ4_K) == 2368);
static_assert(sizeof(PanelQ6_K) == 16 * sizeof(BlockQ6_K));
static_assert(sizeof(PanelQ5_K) == 2880 && sizeof(PanelQ5_K) % 64 == 0);
static_assert(sizeof(PanelQ2_K) == 16 * sizeof(BlockQ2_K) && sizeof(PanelQ2_K) % 64 == 0);
static_assert(sizeof(PanelQ3_K) % 64 == 0);
static_assert(sizeof(PanelQ8_0) == 2 * 16 * sizeof(BlockQ8_0) && sizeof(PanelQ8_0) % 64 == 0);
static_assert(sizeof(PanelNibbles) == 2 * 16 * sizeof(BlockIq4Nl) &&
              sizeof(PanelNibbles) % 64 == 0 && sizeof(BlockQ4_0) == sizeof(BlockIq4Nl));
static_assert(sizeof(PanelQ4_1) == 2 * 16 * sizeof(BlockQ4_1) &&
              sizeof(PanelQ5_0) == 2 * 16 * sizeof(BlockQ5_0) &&
              sizeof(PanelQ5_1) == 2 * 16 * sizeof(BlockQ5_1));
static_assert(sizeof(PanelMxfp4) % 64 == 0 && sizeof(PanelIq4Xs) % 64 == 0 &&
              sizeof(PanelTernary) % 64 == 0);

// Whether `type` has a panel layout (the types named at the top); the kernels are per ISA
// (TypeTraits::panel_dot).
bool HasPanelLayout(GgmlType type);
// Columns of one panel block: 256 (the 256-element block types), 64 (the 32-element ones). Requires
// HasPanelLayout(type).
int64_t PanelColumns(GgmlType type);
// Bytes of one panel: cols / PanelColumns(type) blocks. Requires HasPanelLayout(type) and
// cols a multiple of PanelColumns(type).
int64_t PanelStrideBytes(GgmlType type, int64_t cols);
// Bytes of the whole repacked matrix (rows rounded up to whole panels).
int64_t PanelMatrixBytes(GgmlType type, int64_t rows, int64_t cols);
// Repacks rows [16·first_panel, 16·end_panel) of a GGUF matrix (rows of row_bytes bytes at
// src) into their panels at dst (the matrix's panel storage, PanelMatrixBytes long).
void RepackPanels(GgmlType type, const void* src, int64_t row_bytes, int64_t rows, int64_t cols,
                  int64_t first_panel, int64_t end_panel, void* dst);

}  // namespace shardlm
