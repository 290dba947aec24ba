// Tests of MatMul, MatMulMany, MatMulGated, DequantizeRow (tensor/matmul.h) and ThreadPool
// (tensor/thread_pool.h): bitwise invariance over thread counts and batch composition (the
// Determinism contract), agreement with a slow float64 reference, and the pool's own guarantees.
#include "tensor/matmul.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/fp16.h"
#include "tensor/test_matrices.h"
#include "tensor/thread_pool.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

using testing::TypeName;

using testing::BitwiseEqual;
using testing::MakeMatrix;
using testing::Matrix;
using testing::RandomFloats;
using testing::RunMatMul;

TEST(MatMul, BitwiseIdenticalForAnyThreadCount) {
  for (GgmlType type : testing::kComputableTypes) {
    SCOPED_TRACE(TypeName(type));
    const Matrix m = MakeMatrix(type, 77, 512, 1);
    const std::vector<float> x = RandomFloats(5 * 512, 2);
    testing::ExpectSameBitsOnAnyThreadCount(m, x, 5);
  }
}

TEST(MatMul, TokenAloneEqualsTokenInsideBatch) {
  constexpr int64_t kCols = 512, kRows = 70, kBatch = 7;
  for (GgmlType type : testing::kComputableTypes) {
    SCOPED_TRACE(TypeName(type));
    const Matrix m = MakeMatrix(type, kRows, kCols, 3);
    testing::ExpectTokensAloneAsInBatch(m, RandomFloats(kBatch * kCols, 4), kBatch);
  }
}

// Decode splits rows into guided tasks that depend on the thread count: a single token
// must still give the same bits for any thread count, and the same as inside a batch.
TEST(MatMul, SingleTokenIdenticalForAnyThreadCount) {
  constexpr int64_t kCols = 512, kRows = 301, kBatch = 3;
  for (GgmlType type : testing::kComputableTypes) {
    SCOPED_TRACE(TypeName(type));
    const Matrix m = MakeMatrix(type, kRows, kCols, 5);
    const std::vector<float> batch = RandomFloats(kBatch * kCols, 6);
    const std::vector<float> y_batch = RunMatMul(m, batch, kBatch, 2);
    const std::vector<float> x(batch.begin() + kCols, batch.begin() + 2 * kCols);
    const std::vector<float> y1 = RunMatMul(m, x, 1, 1);
    ASSERT_EQ(std::memcmp(y1.data(), y_batch.data() + kRows, kRows * sizeof(float)), 0);
    testing::ExpectSameBitsOnAnyThreadCount(m, x, 1);
  }
}

// The Determinism contract itself: every y[t][r] equals one vec_dot of weight row r and
// token t's quantized activations, also across token blocks (> 64 tokens) and partial
// tiles (rows not a multiple of any tile size).
TEST(MatMul, EveryElementIsOneVecDot) {
  constexpr int64_t kCols = 256, kRows = 37, kTokens = 150;
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_1,
                        GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(TypeName(type));
    const Matrix m = MakeMatrix(type, kRows, kCols, 12);
    const std::vector<float> x = RandomFloats(kTokens * kCols, 13);
    const std::vector<float> y = RunMatMul(m, x, kTokens, 2);
    const TypeTraits* traits = GetTypeTraits(type);
    std::vector<uint8_t> act(ActRowBytes(*traits, kCols));
    for (int64_t t = 0; t < kTokens; ++t) {
      QuantizeActRow(*traits, x.data() + t * kCols, act.data(), kCols);
      for (int64_t r = 0; r < kRows; ++r) {
        float want = 0;
        traits->vec_dot(kCols, m.bytes.data() + r * m.view.row_bytes, act.data(), &want);
        ASSERT_EQ(std::memcmp(&want, &y[t * kRows + r], sizeof(float)), 0)
            << "token " << t << " row " << r << ": " << y[t * kRows + r] << " vs " << want;
      }
    }
  }
}

// The fused entries compute what separate MatMul calls compute, bitwise: q/k/v-like
// outputs of different types (two activation conversions: Q8_K and Q8_0) and row counts
// that are not a multiple of any tile, at one token (decode chunks across matrices) and
// at a batch spanning two token blocks, for 1-3 threads.
TEST(MatMulMany, EqualsSeparateMatMuls) {
  constexpr int64_t kCols = 512;
  // Also with q and k repacked into panels: the row matrix first, so the panel matrices'
  // rows start at joint rows that are not multiples of 16 (decode cuts the joint rows).
  for (bool panels : {false, true}) {
    if (panels && !testing::HasPanelKernel(GgmlType::kQ4_K)) continue;
    const Matrix v = MakeMatrix(GgmlType::kQ8_0, 19, kCols, 23);
    const Matrix q = MakeMatrix(GgmlType::kQ4_K, 70, kCols, 21, panels);
    const Matrix k = MakeMatrix(GgmlType::kQ6_K, 37, kCols, 22,
                                panels && testing::HasPanelKernel(GgmlType::kQ6_K));
    for (int64_t n_tokens : {1, 9, 70}) {
      const std::vector<float> x = RandomFloats(n_tokens * kCols, 24);
      for (int n_threads : {1, 2, 3}) {
        SCOPED_TRACE(std::string(panels ? "panels" : "rows") + ", tokens " +
                     std::to_string(n_tokens) + ", threads " + std::to_string(n_threads));
        ThreadPool pool(n_threads);
        MatMulScratch scratch;
        std::vector<float> yv(n_tokens * 19, -1.0f), yq(n_tokens * 70, -1.0f),
            yk(n_tokens * 37, -1.0f);
        const MatMulOutput outputs[] = {
            {v.view, yv.data()}, {q.view, yq.data()}, {k.view, yk.data()}};
        MatMulMany(outputs, x.data(), n_tokens, pool, scratch);
        EXPECT_TRUE(BitwiseEqual(yq, RunMatMul(q, x, n_tokens, 1)));
        EXPECT_TRUE(BitwiseEqual(yk, RunMatMul(k, x, n_tokens, 1)));
        EXPECT_TRUE(BitwiseEqual(yv, RunMatMul(v, x, n_tokens, 1)));
      }
    }
  }
}

// out = a · b, elementwise (a stand-in for SwiGLU that shows which rows were combined).
void MultiplyRows(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

TEST(MatMulGated, EqualsTwoMatMulsThenCombine) {
  constexpr int64_t kCols = 256, kRows = 45;
  for (bool panels : {false, true}) {
    if (panels && !testing::HasPanelKernel(GgmlType::kQ4_K)) continue;
    const Matrix gate = MakeMatrix(GgmlType::kQ4_K, kRows, kCols, 31, panels);
    const Matrix up = MakeMatrix(GgmlType::kQ6_K, kRows, kCols, 32,
                                 panels && testing::HasPanelKernel(GgmlType::kQ6_K));
    for (int64_t n_tokens : {1, 8, 67}) {
      const std::vector<float> x = RandomFloats(n_tokens * kCols, 33);
      std::vector<float> want = RunMatMul(gate, x, n_tokens, 1);
      const std::vector<float> want_up = RunMatMul(up, x, n_tokens, 1);
      MultiplyRows(want.data(), want_up.data(), int64_t(want.size()), want.data());
      for (int n_threads : {1, 2, 3}) {
        SCOPED_TRACE(std::string(panels ? "panels" : "rows") + ", tokens " +
                     std::to_string(n_tokens) + ", threads " + std::to_string(n_threads));
        ThreadPool pool(n_threads);
        MatMulScratch scratch;
        std::vector<float> ya(n_tokens * kRows, -1.0f), yb(n_tokens * kRows, -1.0f);
        MatMulGated(gate.view, up.view, x.data(), n_tokens, ya.data(), yb.data(), &MultiplyRows,
                    pool, scratch);
        EXPECT_TRUE(BitwiseEqual(ya, want));
        EXPECT_TRUE(BitwiseEqual(yb, want_up));
      }
    }
  }
}

// Slow reference: dequantized weights times float activations in double. The tolerance is
// the type's activation-quantization error bound, scaled by Σ|w|·|x|.
TEST(MatMul, MatchesSlowReference) {
  constexpr int64_t kCols = 768, kRows = 33, kTokens = 3;
  for (GgmlType type : testing::kComputableTypes) {
    SCOPED_TRACE(TypeName(type));
    const Matrix m = MakeMatrix(type, kRows, kCols, 5);
    const std::vector<float> x = RandomFloats(kTokens * kCols, 6);
    const std::vector<float> y = RunMatMul(m, x, kTokens, 2);
    // Relative error of the activation conversion: 8-bit ~ 1/254 per element worst case,
    // fp16 2^-11, bf16 2^-8, f32 a few ulps of float accumulation.
    const GgmlType act = GetTypeTraits(type)->act_type;
    const double rel = act == GgmlType::kF32    ? 1e-6
                       : act == GgmlType::kF16  ? 1e-3
                       : act == GgmlType::kBF16 ? 8e-3
                                                : 1.0 / 127;
    std::vector<float> w_row(kCols);
    double worst = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      DequantizeRow(m.view, r, w_row.data());
      for (int64_t t = 0; t < kTokens; ++t) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < kCols; ++k) {
          ref += static_cast<double>(w_row[k]) * x[t * kCols + k];
          mag += std::fabs(static_cast<double>(w_row[k]) * x[t * kCols + k]);
        }
        const double err = std::fabs(y[t * kRows + r] - ref);
        worst = std::max(worst, err / mag);
        ASSERT_LE(err, rel * mag + 1e-6) << "row " << r << " token " << t << " ref " << ref;
      }
    }
    std::printf("%-5s worst |err| / sum|w*x| = %.3g\n", TypeName(type).c_str(), worst);
  }
}

TEST(MatMul, DequantizeRowReturnsTheRow) {
  const Matrix m = MakeMatrix(GgmlType::kF16, 4, 64, 9);
  std::vector<float> row(64);
  DequantizeRow(m.view, 2, row.data());
  const auto* h = reinterpret_cast<const fp16_t*>(m.bytes.data() + 2 * m.view.row_bytes);
  for (int k = 0; k < 64; ++k) EXPECT_EQ(row[k], Fp16ToFp32(h[k]));
}

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
  for (int n_threads : {1, 2, 3, 5}) {
    ThreadPool pool(n_threads);
    EXPECT_EQ(pool.size(), n_threads);
    for (size_t n_tasks : {0u, 1u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n_tasks);
      std::atomic<int> bad_worker{0};
      pool.ParallelFor(n_tasks, [&](size_t task, size_t worker) {
        hits[task].fetch_add(1);
        if (worker >= static_cast<size_t>(n_threads)) bad_worker.fetch_add(1);
      });
      for (size_t t = 0; t < n_tasks; ++t) ASSERT_EQ(hits[t].load(), 1) << "task " << t;
      EXPECT_EQ(bad_worker.load(), 0);
    }
  }
}

TEST(ThreadPool, ManyShortLoopsBackToBack) {
  ThreadPool pool(3);
  std::vector<int64_t> sums(20000, 0);
  for (size_t loop = 0; loop < sums.size(); ++loop) {
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(8, [&](size_t task, size_t) { sum.fetch_add(static_cast<int64_t>(task)); });
    sums[loop] = sum.load();
  }
  for (int64_t s : sums) ASSERT_EQ(s, 28);
}

TEST(ThreadPoolDeathTest, NestedParallelForAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ThreadPool pool(2);
        pool.ParallelFor(4, [&](size_t, size_t) { pool.ParallelFor(2, [](size_t, size_t) {}); });
      },
      "nested ParallelFor");
}

TEST(ThreadPool, PinnedPoolStillRuns) {
  ThreadPool pool(2, {0});
  std::atomic<int> count{0};
  pool.ParallelFor(10, [&](size_t, size_t) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), 10);
}

// A body that captures more than std::function keeps inline runs by reference, every task.
TEST(ThreadPool, LargeCaptureRunsEveryTask) {
  ThreadPool pool(3);
  std::array<int64_t, 16> weights{};
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = int64_t(i) + 1;
  std::vector<int64_t> out(weights.size(), 0);
  pool.ParallelFor(weights.size(),
                   [weights, &out](size_t task, size_t) { out[task] = weights[task] * 2; });
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], 2 * (int64_t(i) + 1));
}

// A guest caller (a loader) takes part in a pinned pool's loop and keeps its own affinity.
TEST(ThreadPool, GuestCallerKeepsItsAffinity) {
  cpu_set_t before;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(before), &before), 0);
  ThreadPool pool(2, {0});
  std::atomic<int> count{0};
  pool.ParallelForAsGuest(10, [&](size_t, size_t) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), 10);
  cpu_set_t after;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

}  // namespace
}  // namespace shardlm
