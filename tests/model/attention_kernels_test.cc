// Attention kernels: every compiled ISA is bitwise equal to the generic twin, and close to a
// double-precision reference; row ops (RMSNorm, softmax, f16) against slow references.
#include "model/attention_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/ops.h"
#include "tensor/fp16.h"
#include "tensor/test_matrices.h"

namespace shardlm {
namespace {

// Standard normal values.
std::vector<float> RandomRow(int n, uint32_t seed) {
  return testing::RandomFloats(size_t(n), seed);
}

TEST(AttentionKernels, EveryIsaMatchesGenericBitwise) {
  const AttentionKernels* generic = GetAttentionKernelsFor(Isa::kGeneric);
  ASSERT_NE(generic, nullptr);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    const AttentionKernels* k = GetAttentionKernelsFor(isa);
    if (k == nullptr) continue;
    for (int n : {1, 7, 16, 31, 40, 64, 100, 128, 200, 256}) {
      std::vector<float> a = RandomRow(n, 1 + n), b = RandomRow(n, 2 + n);
      const float want = generic->dot(a.data(), b.data(), n);
      const float got = k->dot(a.data(), b.data(), n);
      EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << IsaName(isa) << " dot n=" << n;
      double ref = 0;
      for (int i = 0; i < n; ++i) ref += double(a[i]) * b[i];
      EXPECT_NEAR(got, ref, 1e-5 * (1 + std::sqrt(double(n))));

      std::vector<float> y1 = b, y2 = b;
      generic->axpy(0.37f, a.data(), y1.data(), n);
      k->axpy(0.37f, a.data(), y2.data(), n);
      EXPECT_EQ(std::memcmp(y1.data(), y2.data(), 4 * n), 0) << IsaName(isa) << " axpy";

      std::vector<float> r1 = b, r2 = b, w = RandomRow(5, 3);
      std::vector<std::vector<float>> rows_data;
      std::vector<const float*> rows;
      for (int r = 0; r < 5; ++r) rows_data.push_back(RandomRow(n, 10 + r));
      for (auto& row : rows_data) rows.push_back(row.data());
      float dots[5], generic_dots[5];
      k->dot_rows(a.data(), rows.data(), 5, n, dots);
      generic->dot_rows(a.data(), rows.data(), 5, n, generic_dots);
      for (int r = 0; r < 5; ++r) {
        const float single = generic->dot(a.data(), rows[r], n);
        EXPECT_EQ(std::memcmp(&dots[r], &single, 4), 0) << IsaName(isa) << " dot_rows " << r;
        EXPECT_EQ(std::memcmp(&generic_dots[r], &single, 4), 0) << "generic dot_rows " << r;
      }
      generic->axpy_rows(w.data(), rows.data(), 5, r1.data(), n);
      k->axpy_rows(w.data(), rows.data(), 5, r2.data(), n);
      EXPECT_EQ(std::memcmp(r1.data(), r2.data(), 4 * n), 0) << IsaName(isa) << " axpy_rows";
      std::vector<float> r3 = b;
      for (int r = 0; r < 5; ++r) generic->axpy(w[r], rows[r], r3.data(), n);
      EXPECT_EQ(std::memcmp(r1.data(), r3.data(), 4 * n), 0) << "axpy_rows vs axpy";
    }
  }
}

// Runs a tile kernel pair over `rows` (wide: the same rows as F32) for n_q random queries and
// checks every query against the generic one-query kernels on the F32 rows, bitwise. What the
// kernels ask for meanwhile (a buffer as long as the rows, at an odd address) changes nothing.
template <typename Row, typename DotTile, typename AxpyTile>
void ExpectTilesMatchGeneric(DotTile dot_tile, AxpyTile axpy_tile,
                             const std::vector<const Row*>& rows,
                             const std::vector<const float*>& wide, int n, int n_q,
                             const std::string& what) {
  const AttentionKernels* generic = GetAttentionKernelsFor(Isa::kGeneric);
  const int n_rows = int(rows.size());
  std::vector<std::vector<float>> q_data, w_data;
  std::vector<const float*> qs, ws;
  for (int q = 0; q < n_q; ++q) q_data.push_back(RandomRow(n, 100 + q));
  for (int q = 0; q < n_q; ++q) w_data.push_back(RandomRow(n_rows, 300 + q));
  for (auto& v : q_data) qs.push_back(v.data());
  for (auto& v : w_data) ws.push_back(v.data());
  std::vector<std::vector<float>> dots(n_q, std::vector<float>(n_rows));
  std::vector<std::vector<float>> ys(n_q, RandomRow(n, 400));
  std::vector<float*> dot_ptrs, y_ptrs;
  for (auto& v : dots) dot_ptrs.push_back(v.data());
  for (auto& v : ys) y_ptrs.push_back(v.data());
  const std::vector<uint8_t> next_run(size_t(n_rows) * n * sizeof(Row) + 3);
  const Ahead ahead{next_run.data() + 3, next_run.size() - 3};
  dot_tile(qs.data(), n_q, rows.data(), n_rows, n, dot_ptrs.data(), ahead);
  axpy_tile(ws.data(), n_q, rows.data(), n_rows, y_ptrs.data(), n, ahead);
  for (int q = 0; q < n_q; ++q) {
    std::vector<float> want_y = RandomRow(n, 400);
    generic->axpy_rows(ws[q], wide.data(), n_rows, want_y.data(), n);
    ASSERT_EQ(std::memcmp(want_y.data(), ys[q].data(), 4 * n), 0)
        << what << " axpy n=" << n << " n_q=" << n_q << " q=" << q;
    for (int r = 0; r < n_rows; ++r) {
      const float want = generic->dot(qs[q], wide[r], n);
      ASSERT_EQ(std::memcmp(&want, &dots[q][r], 4), 0)
          << what << " dot n=" << n << " q=" << q << " r=" << r;
    }
  }
}

// The query-blocked kernels against one query at a time (generic), for block remainders.
TEST(AttentionKernels, TilesMatchSingleQueries) {
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    const AttentionKernels* k = GetAttentionKernelsFor(isa);
    if (k == nullptr) continue;
    for (int n : {16, 40, 43, 128, 136}) {
      for (int n_q : {1, 4, 7}) {
        for (int n_rows : {1, 5, 8, 71}) {
          std::vector<std::vector<float>> row_data;
          std::vector<const float*> rows;
          for (int r = 0; r < n_rows; ++r) row_data.push_back(RandomRow(n, 200 + r));
          for (auto& v : row_data) rows.push_back(v.data());
          ExpectTilesMatchGeneric(k->dot_tile, k->axpy_tile, rows, rows, n, n_q,
                                  std::string(IsaName(isa)) + " F32 tile");
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The F16 tiles (decode over an F16 cache) against the generic F32 row kernels on the widened
// rows: the same bits, for every ISA, with a subnormal and the largest finite half among them.
TEST(AttentionKernels, F16TilesMatchF32TilesOnWidenedRows) {
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    const AttentionKernels* k = GetAttentionKernelsFor(isa);
    if (k == nullptr) continue;
    ASSERT_NE(k->dot_tile_f16, nullptr) << IsaName(isa);
    ASSERT_NE(k->axpy_tile_f16, nullptr) << IsaName(isa);
    for (int n : {16, 40, 43, 128, 136}) {
      for (int n_q : {1, 2, 4, 7}) {
        for (int n_rows : {1, 5, 16, 71}) {
          std::vector<std::vector<float>> wide_data;
          std::vector<std::vector<fp16_t>> half_data;
          for (int r = 0; r < n_rows; ++r) {
            std::vector<float> row = RandomRow(n, 200 + r);
            row[0] = 6e-8f * float(r + 1);  // a subnormal half
            if (n > 1) row[1] = 65504.0f;   // the largest half
            std::vector<fp16_t> half(static_cast<size_t>(n));
            std::vector<float> wide(static_cast<size_t>(n));
            for (int i = 0; i < n; ++i) {
              half[size_t(i)] = Fp32ToFp16(row[size_t(i)]);
              wide[size_t(i)] = Fp16ToFp32(half[size_t(i)]);
            }
            half_data.push_back(std::move(half));
            wide_data.push_back(std::move(wide));
          }
          std::vector<const float*> wide_rows;
          std::vector<const fp16_t*> half_rows;
          for (auto& v : wide_data) wide_rows.push_back(v.data());
          for (auto& v : half_data) half_rows.push_back(v.data());
          ExpectTilesMatchGeneric(k->dot_tile_f16, k->axpy_tile_f16, half_rows, wide_rows, n, n_q,
                                  std::string(IsaName(isa)) + " F16 tile");
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(Ops, RmsNormAgainstDouble) {
  std::vector<float> x = RandomRow(256, 7), w = RandomRow(256, 8), y(256);
  RmsNorm(x.data(), w.data(), 256, 1e-6f, y.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double scale = 1.0 / std::sqrt(ss / 256 + 1e-6);
  for (int i = 0; i < 256; ++i) EXPECT_NEAR(y[i], x[i] * scale * w[i], 1e-5);
}

// Softmax of scaled scores against double precision, on every compiled ISA bitwise equal to
// the generic twin; rows long and short (tails), with large and tiny spreads.
TEST(AttentionKernels, SoftmaxMatchesDoubleAndEveryIsaBitwise) {
  const AttentionKernels* generic = GetAttentionKernelsFor(Isa::kGeneric);
  for (int n : {1, 2, 15, 16, 17, 100, 256, 1000, 4099}) {
    for (float spread : {0.01f, 1.0f, 30.0f}) {
      std::vector<float> s = RandomRow(n, 9 + n);
      for (float& v : s) v *= spread;
      const float scale = 0.088388f;
      std::vector<float> want = s;
      generic->softmax(want.data(), n, scale);
      double max = -INFINITY, sum = 0;
      for (float v : s) max = std::max(max, double(v * scale));
      for (float v : s) sum += std::exp(double(v * scale) - max);
      // Per element: a few float ulps (exp within 2, the reciprocal, the product) plus the
      // rounding of the float argument s − max, whose ulp grows with |s − max|.
      double worst = 0;
      for (int i = 0; i < n; ++i) {
        const double arg = double(s[i] * scale) - max;
        const double ref = std::exp(arg) / sum;
        const double bound = ref * (5e-7 + std::abs(arg) * 1.2e-7);
        worst = std::max(worst, std::abs(want[i] - ref) / bound);
      }
      EXPECT_LT(worst, 1.0) << "n=" << n << " spread=" << spread;
      for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
        const AttentionKernels* k = GetAttentionKernelsFor(isa);
        if (k == nullptr) continue;
        std::vector<float> got = s;
        k->softmax(got.data(), n, scale);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * n), 0)
            << IsaName(isa) << " softmax n=" << n << " spread=" << spread;
      }
    }
  }
}

TEST(AttentionKernels, ExpNonPositiveWithinTwoUlp) {
  for (float x = -87.0f; x <= 0.0f; x += 0.0137f) {
    const float got = internal::ExpNonPositive(x);
    const float want = float(std::exp(double(x)));
    EXPECT_LE(std::abs(got - want), 2 * (std::nextafter(want, INFINITY) - want)) << x;
  }
  EXPECT_EQ(internal::ExpNonPositive(0.0f), 1.0f);
  EXPECT_GT(internal::ExpNonPositive(-INFINITY), 0.0f);  // clamped to exp(-87)
}

TEST(Ops, RopeNormAndNeoxPairs) {
  // One head of 8 dims, n_rot 4, position 1: pairs (0,1),(2,3) for NORM, (0,2),(1,3) NEOX.
  float cache[4];
  RopeAngles(1, 4, 10000.0f, 1.0f, nullptr, cache);
  EXPECT_FLOAT_EQ(cache[0], std::cos(1.0f));
  EXPECT_FLOAT_EQ(cache[3], std::sin(0.01f));
  float norm[8] = {1, 0, 1, 0, 5, 6, 7, 8}, neox[8] = {1, 1, 0, 0, 5, 6, 7, 8};
  ApplyRope(RopeType::kNorm, cache, 4, 8, 1, norm);
  ApplyRope(RopeType::kNeox, cache, 4, 8, 1, neox);
  EXPECT_FLOAT_EQ(norm[0], std::cos(1.0f));
  EXPECT_FLOAT_EQ(norm[1], std::sin(1.0f));
  EXPECT_FLOAT_EQ(neox[0], std::cos(1.0f));
  EXPECT_FLOAT_EQ(neox[2], std::sin(1.0f));
  EXPECT_FLOAT_EQ(neox[3], std::sin(0.01f));
  EXPECT_EQ(norm[5], 6);  // dims past n_rot pass through
  EXPECT_EQ(neox[7], 8);
}

}  // namespace
}  // namespace shardlm
