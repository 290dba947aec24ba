// One traits row per weight type: how to dequantize and quantize a row, which activation
// type a dot product wants, and the dot product itself. matmul.cc and every model-level
// caller go through this table; ISA dispatch happens once, when the table is built.
//
// Determinism: a dot product's reduction order depends only on n (the row length), never on
// the caller, the thread, or how many rows/tokens are computed together. The row kernels
// and the multi-row kernels compute every output with that same order, so a token's result
// does not depend on what else shares its batch.
//
// Numerics follow llama.cpp's x86 CPU backend: activations are converted to `act_type`
// (Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4, Q8_1 for Q4_1/Q5_1, Q8_K for K-quants, IQ4_XS, the
// grid i-quants and the ternary types, F16 for F16, BF16 for BF16, F32 for F32), integer dot
// products per block are exact, accumulation is float32.
#pragma once

#include <cstdint>

#include "gguf/ggml_type.h"

namespace shardlm {

enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kSentinel = 3 };

struct TypeTraits {
  GgmlType type = GgmlType::kSentinel;
  GgmlType act_type = GgmlType::kSentinel;  // what activations are converted to
  int64_t block_size = 1;                   // elements per block of `type`
  // dst[0..n) = dequantized src row; n a multiple of block_size.
  void (*dequantize_row)(const void* src, float* dst, int64_t n) = nullptr;
  // Reference quantizer for weights (gguf synth, tests); nullptr where not provided.
  void (*quantize_row)(const float* src, void* dst, int64_t n) = nullptr;
  // Activation row → act_type blocks, the way llama.cpp does it on x86.
  void (*quantize_act)(const float* src, void* dst, int64_t n) = nullptr;
  // *out = dot(weight row, activation row), n elements.
  void (*vec_dot)(int64_t n, const void* w_row, const void* act_row, float* out) = nullptr;
  // Optional tile kernel for prefill: out[r * out_stride + c] = dot(w row r, act row c) for
  // r < nr, c < nc (nr <= tile_rows, nc <= tile_cols). Every element is bitwise equal to
  // what vec_dot gives for the same pair; it only reuses loads across rows and tokens.
  void (*vec_dot_tile)(int64_t n, const void* w, int64_t w_stride, int nr, const void* act,
                       int64_t act_stride, int nc, float* out, int64_t out_stride) = nullptr;
  int tile_rows = 1;
  int tile_cols = 1;
  // Optional kernel over weight panels (tensor/panels.h; set only where this ISA has one):
  // out[c * out_stride + r] = dot(panel row r, act row c) for r < nr <= kPanelRows,
  // c < nc <= panel_tokens; `panel` is the panel's first block. A pair's value does not
  // depend on nc. Where it is set, models repack this type's matrices into panels.
  void (*panel_dot)(int64_t n, const void* panel, const void* act, int64_t act_stride, int nc,
                    float* out, int64_t out_stride, int nr) = nullptr;
  int panel_tokens = 0;
  // Optional, for kernels that read more than act_type's blocks: ActRowBytes leaves
  // act_side_bytes per act_type block after the row's blocks, and QuantizeActRow fills them
  // with act_side(row, n) after quantize_act (the 32-element panels' PanelActSide in
  // tensor/panels.h). Alike for every type of one ISA with the same act_type: MatMul converts
  // once per act_type.
  void (*act_side)(void* act_row, int64_t n) = nullptr;
  int act_side_bytes = 0;
};

// The traits of a type for DetectIsa()'s ISA (the best this CPU supports, or a lower one
// forced by SHARDLM_ISA). Returns nullptr for types shardlm cannot compute.
const TypeTraits* GetTypeTraits(GgmlType type);
// The traits for a given ISA (tests compare every ISA against kGeneric); nullptr if the
// CPU lacks that ISA or the type is not computable.
const TypeTraits* GetTypeTraitsFor(GgmlType type, Isa isa);

// Bytes of one activation row of n elements converted by QuantizeActRow: act_type's blocks,
// then the kernels' side data (act_side_bytes per block) where the traits have it.
int64_t ActRowBytes(const TypeTraits& traits, int64_t n);
// The activation row every kernel of `traits` reads (vec_dot, vec_dot_tile, panel_dot):
// quantize_act, then the side data. dst holds ActRowBytes(traits, n).
void QuantizeActRow(const TypeTraits& traits, const float* src, void* dst, int64_t n);

Isa DetectIsa();          // best ISA of this CPU, honouring SHARDLM_ISA=generic|avx2|avx512
bool CpuHasIsa(Isa isa);  // whether this CPU runs `isa`'s kernels, whatever SHARDLM_ISA says
const char* IsaName(Isa isa);

}  // namespace shardlm
