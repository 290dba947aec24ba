// Weight matrices for the MatMul tests: random floats through a type's reference
// quantizer, in GGUF rows or repacked into panels, and one MatMul call on a fresh pool.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"
#include "tensor/matmul.h"
#include "tensor/panels.h"
#include "tensor/thread_pool.h"
#include "tensor/type_traits.h"

namespace shardlm::testing {

// Every weight type the kernels compute, each with a reference quantizer (the others are
// refused at load).
inline constexpr GgmlType kComputableTypes[] = {
    GgmlType::kF32,   GgmlType::kF16,    GgmlType::kBF16,  GgmlType::kQ8_0,  GgmlType::kQ4_0,
    GgmlType::kQ4_1,  GgmlType::kQ5_0,   GgmlType::kQ5_1,  GgmlType::kQ2_K,  GgmlType::kQ3_K,
    GgmlType::kQ4_K,  GgmlType::kQ5_K,   GgmlType::kQ6_K,  GgmlType::kIq4Nl, GgmlType::kIq4Xs,
    GgmlType::kMxfp4, GgmlType::kIq2Xxs, GgmlType::kIq2Xs, GgmlType::kIq2S,  GgmlType::kIq3Xxs,
    GgmlType::kIq3S,  GgmlType::kIq1S,   GgmlType::kIq1M,  GgmlType::kTq1_0, GgmlType::kTq2_0};

// A weight type's name as GGUF files and llama.cpp write it (parameterised test names).
inline std::string TypeName(GgmlType type) { return GgmlTypeName(static_cast<uint32_t>(type)); }

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// A quantized weight matrix: bytes holds the GGUF rows; with panels, view points into
// panel_bytes (its repacked copy) instead.
struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> panel_bytes;
  WeightView view;
};

// Whether this CPU repacks `type` (a panel kernel exists for it).
inline bool HasPanelKernel(GgmlType type) {
  const TypeTraits* traits = GetTypeTraits(type);
  return HasPanelLayout(type) && traits != nullptr && traits->panel_dot != nullptr;
}

// Repacks m's rows (bytes) into panels and points its view at them.
inline void RepackMatrix(Matrix* m) {
  const WeightView& v = m->view;
  m->panel_bytes.assign(size_t(PanelMatrixBytes(v.type, v.rows, v.cols)), 0xee);
  RepackPanels(v.type, m->bytes.data(), v.row_bytes, v.rows, v.cols, 0,
               (v.rows + kPanelRows - 1) / kPanelRows, m->panel_bytes.data());
  m->view.data = m->panel_bytes.data();
  m->view.panel_bytes = PanelStrideBytes(v.type, v.cols);
}

// The rows x cols floats of src through the type's quantizer.
inline Matrix QuantizeMatrix(GgmlType type, int64_t rows, int64_t cols,
                             const std::vector<float>& src, bool panels = false) {
  const TypeTraits* traits = GetTypeTraits(type);
  const auto info = LookupGgmlType(static_cast<uint32_t>(type));
  Matrix m;
  const int64_t row_bytes = RowBytes(*info, cols);
  m.bytes.resize(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    traits->quantize_row(src.data() + r * cols, m.bytes.data() + r * row_bytes, cols);
  }
  m.view = {type, cols, rows, m.bytes.data(), row_bytes};
  if (panels) RepackMatrix(&m);
  return m;
}

inline Matrix MakeMatrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed,
                         bool panels = false) {
  return QuantizeMatrix(type, rows, cols,
                        RandomFloats(static_cast<size_t>(rows * cols), seed, 0.05f), panels);
}

inline std::vector<float> RunMatMul(const Matrix& m, const std::vector<float>& x, int64_t n_tokens,
                                    int n_threads) {
  ThreadPool pool(n_threads);
  MatMulScratch scratch;
  std::vector<float> y(static_cast<size_t>(n_tokens * m.view.rows), -1.0f);
  MatMul(m.view, x.data(), n_tokens, y.data(), pool, scratch);
  return y;
}

inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// x (n_tokens rows of m's columns) through m gives the same bits on 1, 2 and 3 threads.
inline void ExpectSameBitsOnAnyThreadCount(const Matrix& m, const std::vector<float>& x,
                                           int64_t n_tokens) {
  const std::vector<float> y1 = RunMatMul(m, x, n_tokens, 1);
  EXPECT_TRUE(BitwiseEqual(y1, RunMatMul(m, x, n_tokens, 2)));
  EXPECT_TRUE(BitwiseEqual(y1, RunMatMul(m, x, n_tokens, 3)));
}

// Each token of `batch` (n_tokens rows of m's columns) through m alone, on one thread, gives
// the bits of its rows in the whole batch's result on two threads.
inline void ExpectTokensAloneAsInBatch(const Matrix& m, const std::vector<float>& batch,
                                       int64_t n_tokens) {
  const int64_t cols = m.view.cols, rows = m.view.rows;
  const std::vector<float> y_batch = RunMatMul(m, batch, n_tokens, 2);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const std::vector<float> x(batch.begin() + t * cols, batch.begin() + (t + 1) * cols);
    const std::vector<float> y_alone = RunMatMul(m, x, 1, 1);
    ASSERT_EQ(std::memcmp(y_alone.data(), y_batch.data() + t * rows, rows * sizeof(float)), 0)
        << "token " << t;
  }
}

}  // namespace shardlm::testing
