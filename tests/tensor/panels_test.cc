// Tests of weight panels (tensor/panels.h) through MatMul: a repacked matrix gives what its
// GGUF rows give (up to float accumulation order), and the Determinism contract holds on
// panels too: the same bits for any thread count, any batch composition, and the fused
// entries, also when panel and row matrices share a call.
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

using testing::BitwiseEqual;
using testing::MakeMatrix;
using testing::Matrix;
using testing::RandomFloats;
using testing::RunMatMul;

const GgmlType kPanelTypes[] = {GgmlType::kQ4_K, GgmlType::kQ6_K};

std::string Name(GgmlType type) { return GgmlTypeName(static_cast<uint32_t>(type)); }

#define SHARDLM_REQUIRE_PANEL_KERNELS()                                        \
  if (!testing::HasPanelKernel(GgmlType::kQ4_K)) {                             \
    GTEST_SKIP() << "this CPU has no panel kernels (AVX-512 VNNI): rows only"; \
  }

TEST(Panels, Sizes) {
  EXPECT_TRUE(HasPanelLayout(GgmlType::kQ4_K));
  EXPECT_TRUE(HasPanelLayout(GgmlType::kQ6_K));
  EXPECT_FALSE(HasPanelLayout(GgmlType::kQ8_0));
  EXPECT_EQ(PanelStrideBytes(GgmlType::kQ4_K, 512), 2 * int64_t(sizeof(PanelQ4_K)));
  // A partial last panel takes a whole panel.
  EXPECT_EQ(PanelMatrixBytes(GgmlType::kQ6_K, 17, 256), 2 * int64_t(sizeof(PanelQ6_K)));
  EXPECT_EQ(PanelMatrixBytes(GgmlType::kQ6_K, 32, 256), 2 * int64_t(sizeof(PanelQ6_K)));
}

// Both layouts compute exact integer sums per block; only the float accumulation differs.
TEST(Panels, GiveWhatTheRowsGive) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  constexpr int64_t kCols = 512, kRows = 40;  // 2 whole panels + 8 rows
  for (GgmlType type : kPanelTypes) {
    const Matrix rows = MakeMatrix(type, kRows, kCols, 41);
    const Matrix panels = MakeMatrix(type, kRows, kCols, 41, /*panels=*/true);
    for (int64_t n_tokens : {1, 5, 11}) {
      SCOPED_TRACE(Name(type) + ", tokens " + std::to_string(n_tokens));
      const std::vector<float> x = RandomFloats(n_tokens * kCols, 42);
      const std::vector<float> want = RunMatMul(rows, x, n_tokens, 1);
      const std::vector<float> got = RunMatMul(panels, x, n_tokens, 1);
      std::vector<float> w_row(kCols);
      for (int64_t r = 0; r < kRows; ++r) {
        DequantizeRow(rows.view, r, w_row.data());
        for (int64_t t = 0; t < n_tokens; ++t) {
          double mag = 0;
          for (int64_t k = 0; k < kCols; ++k) mag += std::fabs(double(w_row[k]) * x[t * kCols + k]);
          ASSERT_LE(std::fabs(got[t * kRows + r] - want[t * kRows + r]), 1e-6 * mag + 1e-7)
              << "row " << r << " token " << t;
        }
      }
    }
  }
}

TEST(Panels, BitwiseIdenticalForAnyThreadCount) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  for (GgmlType type : kPanelTypes) {
    SCOPED_TRACE(Name(type));
    const Matrix m = MakeMatrix(type, 77, 512, 1, true);
    for (int64_t n_tokens : {1, 13}) {
      const std::vector<float> x = RandomFloats(n_tokens * 512, 2);
      const std::vector<float> y1 = RunMatMul(m, x, n_tokens, 1);
      EXPECT_TRUE(BitwiseEqual(y1, RunMatMul(m, x, n_tokens, 2)));
      EXPECT_TRUE(BitwiseEqual(y1, RunMatMul(m, x, n_tokens, 3)));
    }
  }
}

// A kernel call takes up to 8 tokens: 19 tokens are calls of 8, 8 and 3, and every token
// must get the bits it gets alone (a call of 1).
TEST(Panels, TokenAloneEqualsTokenInsideBatch) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  constexpr int64_t kCols = 512, kRows = 70, kBatch = 19;
  for (GgmlType type : kPanelTypes) {
    SCOPED_TRACE(Name(type));
    const Matrix m = MakeMatrix(type, kRows, kCols, 3, true);
    const std::vector<float> batch = RandomFloats(kBatch * kCols, 4);
    const std::vector<float> y_batch = RunMatMul(m, batch, kBatch, 2);
    for (int64_t t = 0; t < kBatch; ++t) {
      const std::vector<float> x(batch.begin() + t * kCols, batch.begin() + (t + 1) * kCols);
      const std::vector<float> y_alone = RunMatMul(m, x, 1, 1);
      ASSERT_EQ(std::memcmp(y_alone.data(), y_batch.data() + t * kRows, kRows * sizeof(float)), 0)
          << "token " << t;
    }
  }
}

// Panel and row matrices in one fused call: the row matrix first, so the panel matrices'
// rows start at joint rows that are not multiples of 16 (decode cuts the joint rows).
TEST(Panels, FusedWithRowMatricesEqualsSeparateMatMuls) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  constexpr int64_t kCols = 512;
  const Matrix v = MakeMatrix(GgmlType::kQ8_0, 19, kCols, 23);
  const Matrix q = MakeMatrix(GgmlType::kQ4_K, 70, kCols, 21, true);
  const Matrix k = MakeMatrix(GgmlType::kQ6_K, 37, kCols, 22, true);
  for (int64_t n_tokens : {1, 9, 70}) {
    const std::vector<float> x = RandomFloats(n_tokens * kCols, 24);
    for (int n_threads : {1, 2, 3}) {
      SCOPED_TRACE("tokens " + std::to_string(n_tokens) + ", threads " + std::to_string(n_threads));
      ThreadPool pool(n_threads);
      MatMulScratch scratch;
      std::vector<float> yv(n_tokens * 19, -1.0f), yq(n_tokens * 70, -1.0f),
          yk(n_tokens * 37, -1.0f);
      const MatMulOutput outputs[] = {
          {v.view, yv.data()}, {q.view, yq.data()}, {k.view, yk.data()}};
      MatMulMany(outputs, x.data(), n_tokens, pool, scratch);
      EXPECT_TRUE(BitwiseEqual(yv, RunMatMul(v, x, n_tokens, 1)));
      EXPECT_TRUE(BitwiseEqual(yq, RunMatMul(q, x, n_tokens, 1)));
      EXPECT_TRUE(BitwiseEqual(yk, RunMatMul(k, x, n_tokens, 1)));
    }
  }
}

void MultiplyRows(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

TEST(Panels, GatedEqualsTwoMatMulsThenCombine) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  constexpr int64_t kCols = 256, kRows = 45;
  const Matrix gate = MakeMatrix(GgmlType::kQ4_K, kRows, kCols, 31, true);
  const Matrix up = MakeMatrix(GgmlType::kQ6_K, kRows, kCols, 32, true);
  for (int64_t n_tokens : {1, 8, 67}) {
    const std::vector<float> x = RandomFloats(n_tokens * kCols, 33);
    std::vector<float> want = RunMatMul(gate, x, n_tokens, 1);
    const std::vector<float> want_up = RunMatMul(up, x, n_tokens, 1);
    MultiplyRows(want.data(), want_up.data(), int64_t(want.size()), want.data());
    for (int n_threads : {1, 3}) {
      SCOPED_TRACE("tokens " + std::to_string(n_tokens) + ", threads " + std::to_string(n_threads));
      ThreadPool pool(n_threads);
      MatMulScratch scratch;
      std::vector<float> ya(n_tokens * kRows, -1.0f), yb(n_tokens * kRows, -1.0f);
      MatMulGated(gate.view, up.view, x.data(), n_tokens, ya.data(), yb.data(), &MultiplyRows, pool,
                  scratch);
      EXPECT_TRUE(BitwiseEqual(ya, want));
      EXPECT_TRUE(BitwiseEqual(yb, want_up));
    }
  }
}

TEST(PanelsDeathTest, DequantizeRowOfPanelsAborts) {
  SHARDLM_REQUIRE_PANEL_KERNELS();
  const Matrix m = MakeMatrix(GgmlType::kQ4_K, 16, 256, 5, true);
  std::vector<float> row(256);
  EXPECT_DEATH(DequantizeRow(m.view, 0, row.data()), "panel");
}

}  // namespace
}  // namespace shardlm
