// MatMul: y[t] = W · x[t] for a batch of tokens, W a (possibly quantized) weight matrix;
// MatMulMany / MatMulGated: several matrices over the same x in one parallel loop.
//
// Goals: one entry for every weight type (decode: a batch of 1; prefill: hundreds of rows);
// the activation conversion of llama.cpp (type_traits.h); bitwise-identical outputs for any
// thread count and any batch composition, and between the fused and the plain entries.
// Fusing saves the threads a meeting per matrix (a decode step runs hundreds of loops, and
// every loop ends with the fastest thread waiting for the slowest) and converts x once.
// Non-goals: transposed or strided weights (GGUF rows are contiguous).
//
// Thread safety: calls sharing a MatMulScratch or a ThreadPool must not overlap.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gguf/ggml_type.h"
#include "tensor/thread_pool.h"

namespace shardlm {

// A weight matrix: `rows` output features of `cols` input elements of `type` (ne[0] = cols,
// ne[1] = rows). As stored in GGUF, each row is contiguous (row_bytes apart); with
// panel_bytes set, `data` holds 16-row panels of that many bytes each instead
// (tensor/panels.h) and row_bytes stays the GGUF row size.
struct WeightView {
  GgmlType type = GgmlType::kSentinel;
  int64_t cols = 0;
  int64_t rows = 0;
  const void* data = nullptr;
  int64_t row_bytes = 0;
  int64_t panel_bytes = 0;
};

// Scratch reused across calls, so a forward pass does not allocate (activations quantized
// to the weight's act_type). Grows to the largest batch seen; never shrinks.
struct MatMulScratch {
  std::vector<uint8_t> act[4];      // [n_tokens][act row bytes], per distinct act_type
  std::vector<int64_t> row_bounds;  // decode: first row of each task, then the total rows
};

// One matrix of a fused call: y = w · x, y: [n_tokens][w.rows].
struct MatMulOutput {
  WeightView w;
  float* y = nullptr;
};

// Elementwise combination of two outputs' row segments: out[i] = f(a[i], b[i]), i < n
// (out may be a). For MatMulGated, e.g. SwiGLU.
using RowCombine = void (*)(const float* a, const float* b, int64_t n, float* out);

// x: [n_tokens][w.cols] floats; y: [n_tokens][w.rows] floats (must not overlap x).
// Uses `pool` for its parallel loops, so it must not be called from a task of `pool`.
void MatMul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            MatMulScratch& scratch);

// MatMul for each of `outputs` (at most kMaxFusedOutputs, all with the same cols), in one
// parallel loop; every output is bitwise what MatMul gives.
constexpr int kMaxFusedOutputs = 4;
void MatMulMany(std::span<const MatMulOutput> outputs, const float* x, int64_t n_tokens,
                ThreadPool& pool, MatMulScratch& scratch);

// ya = a · x and yb = b · x (a and b of the same shape), then ya = combine(ya, yb), in one
// parallel loop: each task combines the rows it has just computed while they are in cache.
// ya and yb are bitwise MatMul's results followed by combine over whole rows.
void MatMulGated(const WeightView& a, const WeightView& b, const float* x, int64_t n_tokens,
                 float* ya, float* yb, RowCombine combine, ThreadPool& pool,
                 MatMulScratch& scratch);

// dst[0..cols) = row `row` of w, dequantized (token embedding lookup). w must be in rows.
void DequantizeRow(const WeightView& w, int64_t row, float* dst);

}  // namespace shardlm
