// MatMul implementation (matmul.h): quantize activations once, then compute the output in
// tasks of (weight-row chunk × token block), each element by exactly one kernel call. A
// single token (decode) gets guided row chunks instead (GuidedBounds).
//
// Determinism: an output element y[t][r] is always dot(W row r, act row t) computed by
// vec_dot, or by vec_dot_tile, which is bitwise equal to vec_dot by contract
// (type_traits.h). Which task or thread computes it, and what else is in the batch, does not
// enter the arithmetic, so results are identical for any thread count and batch.
#include "tensor/matmul.h"

#include <algorithm>

#include "base/check.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

// Weight rows per task: at least 16 (amortizes the task hand-out, keeps a chunk of a
// quantized row block in L1/L2), at most 64 (enough tasks to balance a 1024-row matrix
// over a few threads). Derived from the shape only.
int64_t RowsPerTask(int64_t rows, int tile_rows) {
  const int64_t target = std::clamp<int64_t>(rows / 32, 16, 64);
  return (target + tile_rows - 1) / tile_rows * tile_rows;
}

// Tokens per task in prefill: the activation rows of a block stay in L2 while the weight
// chunk streams through them.
constexpr int64_t kTokensPerTask = 64;

struct MatMulPlan {
  const TypeTraits* traits;
  const WeightView* w;
  const uint8_t* act;  // [n_tokens][act_row_bytes]
  int64_t act_row_bytes;
  float* y;  // [n_tokens][w->rows]
  int64_t n_tokens;
  int64_t rows_per_task;
  int64_t row_tasks;  // tasks are (row chunk, token block), row chunk fastest
};

// y[t][r] for r in [r0, r1), t in [t0, t1), with the tile kernel where there is one.
void ComputeBlock(const MatMulPlan& plan, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const TypeTraits& traits = *plan.traits;
  const WeightView& w = *plan.w;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  if (traits.vec_dot_tile == nullptr || traits.tile_rows * traits.tile_cols <= 1) {
    for (int64_t t = t0; t < t1; ++t) {
      const uint8_t* act_row = plan.act + t * plan.act_row_bytes;
      for (int64_t r = r0; r < r1; ++r) {
        traits.vec_dot(w.cols, wdata + r * w.row_bytes, act_row, &plan.y[t * w.rows + r]);
      }
    }
    return;
  }
  constexpr int kMaxTile = 16 * 16;
  SHARDLM_CHECK(traits.tile_rows * traits.tile_cols <= kMaxTile);
  float tile[kMaxTile];
  for (int64_t r = r0; r < r1; r += traits.tile_rows) {
    const int nr = static_cast<int>(std::min<int64_t>(traits.tile_rows, r1 - r));
    for (int64_t t = t0; t < t1; t += traits.tile_cols) {
      const int nc = static_cast<int>(std::min<int64_t>(traits.tile_cols, t1 - t));
      traits.vec_dot_tile(w.cols, wdata + r * w.row_bytes, w.row_bytes, nr,
                          plan.act + t * plan.act_row_bytes, plan.act_row_bytes, nc, tile,
                          traits.tile_cols);
      for (int i = 0; i < nr; ++i) {
        for (int c = 0; c < nc; ++c)
          plan.y[(t + c) * w.rows + r + i] = tile[i * traits.tile_cols + c];
      }
    }
  }
}

// Decode (one token): y[r] for r in [r0, r1), tile_rows rows per kernel call, written in
// place (the output of a single token is contiguous).
void ComputeRows(const MatMulPlan& plan, int64_t r0, int64_t r1) {
  const TypeTraits& traits = *plan.traits;
  const WeightView& w = *plan.w;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  if (traits.vec_dot_tile == nullptr || traits.tile_rows * traits.tile_cols <= 1) {
    for (int64_t r = r0; r < r1; ++r) {
      traits.vec_dot(w.cols, wdata + r * w.row_bytes, plan.act, &plan.y[r]);
    }
    return;
  }
  for (int64_t r = r0; r < r1; r += traits.tile_rows) {
    const int nr = static_cast<int>(std::min<int64_t>(traits.tile_rows, r1 - r));
    traits.vec_dot_tile(w.cols, wdata + r * w.row_bytes, w.row_bytes, nr, plan.act,
                        plan.act_row_bytes, 1, &plan.y[r], 1);
  }
}

// Decode task boundaries, guided: each task takes 1/threads of the rows still left (at
// least kMinDecodeRows), so a thread streams long contiguous runs and the last tasks are
// small enough to balance. Affects only who computes a row, never its arithmetic. Fewer,
// longer runs stream faster: Qwen3-0.6B Q4_K_M tg128 (2 threads) gave 63 t/s with the
// prefill split (16-64 rows per task), 74 with 1/(4·threads), 78 with 1/(2·threads), 84
// with 1/threads; a minimum of 64 rows instead of 16 made no difference.
constexpr int64_t kMinDecodeRows = 16;
void GuidedBounds(int64_t rows, int tile_rows, int n_threads, std::vector<int64_t>* bounds) {
  bounds->clear();
  int64_t r = 0;
  while (r < rows) {
    bounds->push_back(r);
    int64_t chunk = std::max<int64_t>(kMinDecodeRows, (rows - r) / int64_t{n_threads});
    chunk = (chunk + tile_rows - 1) / tile_rows * tile_rows;
    r = std::min(rows, r + chunk);
  }
  bounds->push_back(rows);
}

void RunTask(const MatMulPlan& plan, int64_t task) {
  const int64_t r0 = task % plan.row_tasks * plan.rows_per_task;
  const int64_t t0 = task / plan.row_tasks * kTokensPerTask;
  ComputeBlock(plan, r0, std::min(plan.w->rows, r0 + plan.rows_per_task), t0,
               std::min(plan.n_tokens, t0 + kTokensPerTask));
}

// Converts every token's activation row to act_type; returns the rows (x itself for F32).
const uint8_t* QuantizeActivations(const TypeTraits& traits, const float* x, int64_t cols,
                                   int64_t n_tokens, int64_t act_row_bytes, ThreadPool& pool,
                                   MatMulScratch& scratch) {
  if (traits.act_type == GgmlType::kF32) return reinterpret_cast<const uint8_t*>(x);
  const size_t bytes = static_cast<size_t>(n_tokens * act_row_bytes);
  if (scratch.act.size() < bytes) scratch.act.resize(bytes);
  uint8_t* act = scratch.act.data();
  auto quantize_row = [&](size_t t, size_t /*worker*/) {
    traits.quantize_act(x + t * cols, act + t * act_row_bytes, cols);
  };
  if (n_tokens == 1) {
    quantize_row(0, 0);
  } else {
    pool.ParallelFor(static_cast<size_t>(n_tokens), quantize_row);
  }
  return act;
}

}  // namespace

void MatMul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            MatMulScratch& scratch) {
  const TypeTraits* traits = GetTypeTraits(w.type);
  SHARDLM_CHECK_MSG(traits != nullptr, "no kernels for weight type %u",
                    static_cast<unsigned>(w.type));
  const auto act_info = LookupGgmlType(static_cast<uint32_t>(traits->act_type));
  SHARDLM_CHECK(act_info.has_value());
  SHARDLM_CHECK_MSG(w.cols % traits->block_size == 0 && w.cols % act_info->block_size == 0,
                    "row length %lld is not a multiple of the block size",
                    static_cast<long long>(w.cols));
  if (n_tokens <= 0 || w.rows <= 0) return;
  const int64_t act_row_bytes = ActRowBytes(*traits, w.cols);
  const uint8_t* act =
      QuantizeActivations(*traits, x, w.cols, n_tokens, act_row_bytes, pool, scratch);

  const int64_t rows_per_task = RowsPerTask(w.rows, traits->tile_rows);
  const int64_t row_tasks = (w.rows + rows_per_task - 1) / rows_per_task;
  const int64_t token_tasks = (n_tokens + kTokensPerTask - 1) / kTokensPerTask;
  const MatMulPlan plan{traits, &w, act, act_row_bytes, y, n_tokens, rows_per_task, row_tasks};
  if (n_tokens == 1) {
    std::vector<int64_t>& bounds = scratch.row_bounds;
    GuidedBounds(w.rows, traits->tile_rows, pool.size(), &bounds);
    // Two pointers: still within std::function's local storage (no allocation).
    pool.ParallelFor(bounds.size() - 1, [p = &plan, b = bounds.data()](size_t task, size_t) {
      ComputeRows(*p, b[task], b[task + 1]);
    });
    return;
  }
  // Captures one pointer, so std::function stores it without allocating.
  pool.ParallelFor(static_cast<size_t>(row_tasks * token_tasks),
                   [p = &plan](size_t task, size_t) { RunTask(*p, static_cast<int64_t>(task)); });
}

void DequantizeRow(const WeightView& w, int64_t row, float* dst) {
  const TypeTraits* traits = GetTypeTraits(w.type);
  SHARDLM_CHECK_MSG(traits != nullptr, "no kernels for weight type %u",
                    static_cast<unsigned>(w.type));
  SHARDLM_CHECK(row >= 0 && row < w.rows);
  traits->dequantize_row(static_cast<const uint8_t*>(w.data) + row * w.row_bytes, dst, w.cols);
}

}  // namespace shardlm
