// MatMul: y[t] = W · x[t] for a batch of tokens, W a (possibly quantized) weight matrix.
//
// Goals: one entry for every weight type (decode: a batch of 1; prefill: hundreds of rows);
// the activation conversion of llama.cpp (type_traits.h); bitwise-identical outputs for any
// thread count and any batch composition.
// Non-goals: transposed or strided weights (GGUF rows are contiguous).
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/ggml_type.h"
#include "tensor/thread_pool.h"

namespace shardlm {

// A weight matrix as stored in GGUF: `rows` output features, each a contiguous row of
// `cols` input elements of `type` (ne[0] = cols, ne[1] = rows).
struct WeightView {
  GgmlType type = GgmlType::kSentinel;
  int64_t cols = 0;
  int64_t rows = 0;
  const void* data = nullptr;
  int64_t row_bytes = 0;
};

// Scratch reused across calls, so a forward pass does not allocate (activations quantized
// to the weight's act_type). Grows to the largest batch seen; never shrinks.
struct MatMulScratch {
  std::vector<uint8_t> act;
  std::vector<int64_t> row_bounds;  // decode: first row of each task, then w.rows
};

// x: [n_tokens][w.cols] floats; y: [n_tokens][w.rows] floats (must not overlap x).
// Uses `pool` for its parallel loops, so it must not be called from a task of `pool`.
void MatMul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            MatMulScratch& scratch);

// dst[0..cols) = row `row` of w, dequantized (token embedding lookup).
void DequantizeRow(const WeightView& w, int64_t row, float* dst);

}  // namespace shardlm
