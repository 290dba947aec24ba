// Tests of weight panels (tensor/panels.h) through MatMul: a repacked matrix gives what its
// GGUF rows give (up to float accumulation order), and the Determinism contract holds on
// panels too: the same bits for any thread count and any batch composition (the fused
// entries: matmul_test.cc).
#include "tensor/panels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tensor/matmul.h"
#include "tensor/test_matrices.h"

namespace shardlm {
namespace {

using testing::MakeMatrix;
using testing::Matrix;
using testing::RandomFloats;
using testing::RunMatMul;

const GgmlType kPanelTypes[] = {
    GgmlType::kQ2_K,  GgmlType::kQ3_K,  GgmlType::kQ4_K,  GgmlType::kQ5_K,  GgmlType::kQ6_K,
    GgmlType::kQ8_0,  GgmlType::kQ4_0,  GgmlType::kQ4_1,  GgmlType::kQ5_0,  GgmlType::kQ5_1,
    GgmlType::kIq4Nl, GgmlType::kIq4Xs, GgmlType::kMxfp4, GgmlType::kTq1_0, GgmlType::kTq2_0};

using testing::TypeName;

// The panel types this CPU has panel kernels for (AVX-512 VNNI: all; AVX2: some).
std::vector<GgmlType> TypesWithPanelKernels() {
  std::vector<GgmlType> types;
  for (GgmlType type : kPanelTypes) {
    if (testing::HasPanelKernel(type)) types.push_back(type);
  }
  return types;
}

#define SHARDLM_REQUIRE_PANEL_KERNELS()                         \
  if (TypesWithPanelKernels().empty()) {                        \
    GTEST_SKIP() << "this CPU has no panel kernels: rows only"; \
  }

TEST(Panels, Sizes) {
  EXPECT_TRUE(HasPanelLayout(GgmlType::kQ4_K));
  EXPECT_TRUE(HasPanelLayout(GgmlType::kQ6_K));
  EXPECT_TRUE(HasPanelLayout(GgmlType::kQ8_0));
  EXPECT_FALSE(HasPanelLayout(GgmlType::kIq2Xxs));
  EXPECT_EQ(PanelStrideBytes(GgmlType::kQ4_K, 512), 2 * int64_t(sizeof(PanelQ4_K)));
  // Q8_0 panel blocks are 64 columns: the same bytes as the rows.
  EXPECT_EQ(PanelColumns(GgmlType::kQ8_0), 64);
  EXPECT_EQ(PanelStrideBytes(GgmlType::kQ8_0, 192), 3 * int64_t(sizeof(PanelQ8_0)));
  EXPECT_EQ(PanelMatrixBytes(GgmlType::kQ8_0, 32, 192), 32 * 6 * int64_t(sizeof(BlockQ8_0)));
  // A partial last panel takes a whole panel.
  EXPECT_EQ(PanelMatrixBytes(GgmlType::kQ6_K, 17, 256), 2 * int64_t(sizeof(PanelQ6_K)));
  EXPECT_EQ(PanelMatrixBytes(GgmlType::kQ6_K, 32, 256), 2 * int64_t(sizeof(PanelQ6_K)));
}

// Σ |w·x| over a row: the scale of a dot product's rounding.
double DotMagnitude(const std::vector<float>& w_row, const float* x) {
  double mag = 0;
  for (size_t k = 0; k < w_row.size(); ++k) mag += std::fabs(double(w_row[k]) * x[k]);
  return mag;
}

// Both layouts compute exact integer sums per block; only the float accumulation differs:
// every output of n_tokens tokens of x through `panels` within rounding of the rows' one.
::testing::AssertionResult PanelsGiveRows(const Matrix& rows, const Matrix& panels,
                                          const std::vector<float>& x, int64_t n_tokens) {
  const int64_t n_rows = rows.view.rows, cols = rows.view.cols;
  const std::vector<float> want = RunMatMul(rows, x, n_tokens, 1);
  const std::vector<float> got = RunMatMul(panels, x, n_tokens, 1);
  std::vector<float> w_row(cols);
  for (int64_t r = 0; r < n_rows; ++r) {
    DequantizeRow(rows.view, r, w_row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const double mag = DotMagnitude(w_row, x.data() + t * cols);
      const float g = got[t * n_rows + r], w = want[t * n_rows + r];
      if (!(std::fabs(g - w) <= 1e-6 * mag + 1e-7)) {
        return ::testing::AssertionFailure()
               << n_tokens << " tokens, row " << r << " token " << t << ": " << g << " vs " << w;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(Panels, GiveWhatTheRowsGive) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  constexpr int64_t kCols = 512, kRows = 40;  // 2 whole panels + 8 rows
  for (GgmlType type : TypesWithPanelKernels()) {
    const Matrix rows = MakeMatrix(type, kRows, kCols, 41);
    const Matrix panels = MakeMatrix(type, kRows, kCols, 41, /*panels=*/true);
    for (int64_t n_tokens : {1, 5, 11}) {
      SCOPED_TRACE(TypeName(type) + ", tokens " + std::to_string(n_tokens));
      ASSERT_TRUE(PanelsGiveRows(rows, panels, RandomFloats(n_tokens * kCols, 42), n_tokens));
    }
  }
}

// Every weight at the end of its type's levels (a block's first weight at the other end, so
// that the types with a minimum span the range too) against activations that quantize to ±127:
// the largest integer sums a block can give, where int16 sums of several groups in the AVX2
// kernels would overflow first. Panels give what the rows give.
TEST(Panels, LevelsAtTheirEndsAgainstFullActivations) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  constexpr int64_t kCols = 512, kRows = 32, kTokens = 4;
  std::vector<float> w(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    const float sign = r % 2 == 0 ? 1.0f : -1.0f;
    for (int64_t k = 0; k < kCols; ++k) w[r * kCols + k] = (k % kQK == 0 ? -0.05f : 0.05f) * sign;
  }
  // Tokens: all +1, all −1, and each with one element per block of the other sign.
  std::vector<float> x(kTokens * kCols);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t k = 0; k < kCols; ++k) {
      const float sign = t % 2 == 0 ? 1.0f : -1.0f;
      x[t * kCols + k] = t >= 2 && k % kQK == 5 ? -sign : sign;
    }
  }
  for (GgmlType type : TypesWithPanelKernels()) {
    SCOPED_TRACE(TypeName(type));
    const Matrix rows = testing::QuantizeMatrix(type, kRows, kCols, w);
    const Matrix panels = testing::QuantizeMatrix(type, kRows, kCols, w, /*panels=*/true);
    // One token (decode's one pass) and all of them (the tiles).
    for (int64_t n_tokens : {int64_t{1}, kTokens}) {
      ASSERT_TRUE(PanelsGiveRows(rows, panels, x, n_tokens));
    }
  }
}

// Q8_0 weights at both ends of int8: the Q8_0 quantizer makes ±127, but a file may hold −128,
// which the panels store as 0 (q + 128) and the AVX2 kernel takes back by XOR 0x80 and a
// magnitude of 128. Panels and rows give what the dequantized weights give.
TEST(Panels, Q8_0WeightsAtTheInt8EndsAreExact) {
  if (!testing::HasPanelKernel(GgmlType::kQ8_0)) GTEST_SKIP() << "no Q8_0 panel kernel here";
  constexpr int64_t kCols = 256, kRows = 24, kTokens = 3;
  Matrix rows = MakeMatrix(GgmlType::kQ8_0, kRows, kCols, 7);
  auto* blocks = reinterpret_cast<BlockQ8_0*>(rows.bytes.data());
  for (int64_t b = 0; b < kRows * kCols / kQK; ++b) {
    for (int i = 0; i < kQK; ++i) blocks[b].qs[i] = int8_t((i + b) % 3 == 0 ? 127 : -128);
  }
  Matrix panels = rows;
  testing::RepackMatrix(&panels);

  const std::vector<float> x = RandomFloats(kTokens * kCols, 8);
  EXPECT_TRUE(PanelsGiveRows(rows, panels, x, kTokens));
  const std::vector<float> from_rows = RunMatMul(rows, x, kTokens, 1);
  std::vector<float> w_row(kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    DequantizeRow(rows.view, r, w_row.data());
    for (int64_t t = 0; t < kTokens; ++t) {
      double want = 0;
      for (int64_t k = 0; k < kCols; ++k) want += double(w_row[k]) * x[t * kCols + k];
      // The activations' Q8_0 rounding: ~1% of the magnitude; a −128 read as +128 or
      // saturated would be off by far more.
      EXPECT_NEAR(from_rows[t * kRows + r], want, 0.02 * DotMagnitude(w_row, x.data() + t * kCols))
          << "rows, row " << r << " token " << t;
    }
  }
}

TEST(Panels, BitwiseIdenticalForAnyThreadCount) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  for (GgmlType type : TypesWithPanelKernels()) {
    SCOPED_TRACE(TypeName(type));
    const Matrix m = MakeMatrix(type, 77, 512, 1, true);
    for (int64_t n_tokens : {1, 13}) {
      const std::vector<float> x = RandomFloats(n_tokens * 512, 2);
      testing::ExpectSameBitsOnAnyThreadCount(m, x, n_tokens);
    }
  }
}

// A kernel call takes up to 8 tokens (AVX2: 4): 19 tokens are calls of 8, 8 and 3 (4, 4, 4, 4
// and 3), and every token must get the bits it gets alone (a call of 1).
TEST(Panels, TokenAloneEqualsTokenInsideBatch) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  constexpr int64_t kCols = 512, kRows = 70, kBatch = 19;
  for (GgmlType type : TypesWithPanelKernels()) {
    SCOPED_TRACE(TypeName(type));
    const Matrix m = MakeMatrix(type, kRows, kCols, 3, true);
    testing::ExpectTokensAloneAsInBatch(m, RandomFloats(kBatch * kCols, 4), kBatch);
  }
}

// Fused calls mixing panel and row matrices: MatMulMany / MatMulGated tests in
// matmul_test.cc run on both layouts.

TEST(PanelsDeathTest, DequantizeRowOfPanelsAborts) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  const GgmlType type = TypesWithPanelKernels().front();
  const Matrix m = MakeMatrix(type, 16, 2 * PanelColumns(type), 5, true);
  std::vector<float> row(2 * PanelColumns(type));
  EXPECT_DEATH(DequantizeRow(m.view, 0, row.data()), "panel");
}

}  // namespace
}  // namespace shardlm
