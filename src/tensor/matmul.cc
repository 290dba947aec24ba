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
#include <numeric>

#include "base/check.h"
#include "tensor/panels.h"
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

// One matrix of a call: its kernels, its converted activations and its output.
struct MatMulPlan {
  const TypeTraits* traits;
  const WeightView* w;
  const uint8_t* act;  // [n_tokens][act_row_bytes]
  int64_t act_row_bytes;
  float* y;  // [n_tokens][w->rows]
  int64_t n_tokens;
  int64_t rows_per_task;
  int64_t row_tasks;  // tasks are (row chunk, token block), row chunk fastest
  int tile_rows;      // rows one kernel call computes: tasks start at multiples of it
};

// Panels (w->panel_bytes != 0): y[t][r] for r in [r0, r1), t in [t0, t1), up to
// panel_tokens tokens per kernel call. A panel only partly inside [r0, r1) is computed
// into a scratch tile and only its rows in range are copied out.
void ComputePanels(const MatMulPlan& plan, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const TypeTraits& traits = *plan.traits;
  const WeightView& w = *plan.w;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  float tile[kPanelRows * 8];
  const int max_tokens = std::min(traits.panel_tokens, 8);
  for (int64_t p0 = r0 / kPanelRows * kPanelRows; p0 < r1; p0 += kPanelRows) {
    const uint8_t* panel = wdata + p0 / kPanelRows * w.panel_bytes;
    const int nr = static_cast<int>(std::min<int64_t>(kPanelRows, w.rows - p0));
    const bool whole = p0 >= r0 && p0 + nr <= r1;
    for (int64_t t = t0; t < t1; t += max_tokens) {
      const int nc = static_cast<int>(std::min<int64_t>(max_tokens, t1 - t));
      const uint8_t* act = plan.act + t * plan.act_row_bytes;
      if (whole) {
        traits.panel_dot(w.cols, panel, act, plan.act_row_bytes, nc, &plan.y[t * w.rows + p0],
                         w.rows, nr);
        continue;
      }
      traits.panel_dot(w.cols, panel, act, plan.act_row_bytes, nc, tile, kPanelRows, nr);
      const int64_t lo = std::max(r0, p0), hi = std::min(r1, p0 + nr);
      for (int c = 0; c < nc; ++c) {
        for (int64_t r = lo; r < hi; ++r)
          plan.y[(t + c) * w.rows + r] = tile[c * kPanelRows + r - p0];
      }
    }
  }
}

// y[t][r] for r in [r0, r1), t in [t0, t1), with the tile kernel where there is one.
void ComputeBlock(const MatMulPlan& plan, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const TypeTraits& traits = *plan.traits;
  const WeightView& w = *plan.w;
  if (w.panel_bytes != 0) return ComputePanels(plan, r0, r1, t0, t1);
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
  if (w.panel_bytes != 0) return ComputePanels(plan, r0, r1, 0, 1);
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

// Block (row chunk, token block) `task` of a plan: [r0, r1) × [t0, t1).
struct BlockRange {
  int64_t r0, r1, t0, t1;
};
BlockRange TaskBlock(const MatMulPlan& plan, int64_t task) {
  const int64_t r0 = task % plan.row_tasks * plan.rows_per_task;
  const int64_t t0 = task / plan.row_tasks * kTokensPerTask;
  return {r0, std::min(plan.w->rows, r0 + plan.rows_per_task), t0,
          std::min(plan.n_tokens, t0 + kTokensPerTask)};
}

// Every matrix of a call (1 to kMaxFusedOutputs; gated: 2 of one shape) and how its work
// is cut. Unfused and fused calls build the same MatMulPlan per matrix, so an output
// element is the same kernel call either way.
struct FusedPlan {
  MatMulPlan parts[kMaxFusedOutputs];
  int n_parts = 0;
  int64_t first_task[kMaxFusedOutputs + 1] = {};  // prefill: part p owns [first, next)
  int64_t first_row[kMaxFusedOutputs + 1] = {};   // decode: part p's rows in the joint range
  RowCombine combine = nullptr;                   // gated: parts[0].y = f(parts[0], parts[1])
  const int64_t* bounds = nullptr;                // decode: task boundaries, joint rows
};

// Decode task: joint rows [v0, v1), each part's share of them (gated: both parts' rows
// [v0, v1), then combined).
void RunDecodeTask(const FusedPlan& fp, int64_t v0, int64_t v1) {
  if (fp.combine != nullptr) {
    ComputeRows(fp.parts[0], v0, v1);
    ComputeRows(fp.parts[1], v0, v1);
    fp.combine(fp.parts[0].y + v0, fp.parts[1].y + v0, v1 - v0, fp.parts[0].y + v0);
    return;
  }
  for (int p = 0; p < fp.n_parts; ++p) {
    const int64_t lo = std::max(v0, fp.first_row[p]), hi = std::min(v1, fp.first_row[p + 1]);
    if (lo < hi) ComputeRows(fp.parts[p], lo - fp.first_row[p], hi - fp.first_row[p]);
  }
}

// Prefill task: one block of one part (gated: the same block of both parts, combined).
void RunBlockTask(const FusedPlan& fp, int64_t task) {
  if (fp.combine != nullptr) {
    const BlockRange b = TaskBlock(fp.parts[0], task);
    ComputeBlock(fp.parts[0], b.r0, b.r1, b.t0, b.t1);
    ComputeBlock(fp.parts[1], b.r0, b.r1, b.t0, b.t1);
    const int64_t rows = fp.parts[0].w->rows;
    for (int64_t t = b.t0; t < b.t1; ++t) {
      float* ya = fp.parts[0].y + t * rows + b.r0;
      fp.combine(ya, fp.parts[1].y + t * rows + b.r0, b.r1 - b.r0, ya);
    }
    return;
  }
  int p = 0;
  while (task >= fp.first_task[p + 1]) ++p;
  const BlockRange b = TaskBlock(fp.parts[p], task - fp.first_task[p]);
  ComputeBlock(fp.parts[p], b.r0, b.r1, b.t0, b.t1);
}

const TypeTraits& TraitsOf(const WeightView& w) {
  const TypeTraits* traits = GetTypeTraits(w.type);
  SHARDLM_CHECK_MSG(traits != nullptr, "no kernels for weight type %u",
                    static_cast<unsigned>(w.type));
  const auto act_info = LookupGgmlType(static_cast<uint32_t>(traits->act_type));
  SHARDLM_CHECK(act_info.has_value());
  SHARDLM_CHECK_MSG(w.cols % traits->block_size == 0 && w.cols % act_info->block_size == 0,
                    "row length %lld is not a multiple of the block size",
                    static_cast<long long>(w.cols));
  SHARDLM_CHECK_MSG(w.panel_bytes == 0 || traits->panel_dot != nullptr,
                    "weight panels of type %u without a panel kernel",
                    static_cast<unsigned>(w.type));
  return *traits;
}

// Converts x to the act_type of every output (once per distinct type, one loop over the
// tokens for all of them) and fills one plan per output.
void PlanParts(std::span<const MatMulOutput> outputs, const float* x, int64_t n_tokens,
               ThreadPool& pool, MatMulScratch& scratch, FusedPlan* fp) {
  SHARDLM_CHECK(!outputs.empty() && outputs.size() <= size_t{kMaxFusedOutputs});
  const int64_t cols = outputs[0].w.cols;
  const TypeTraits* conversions[kMaxFusedOutputs];  // distinct act types, in order
  int n_conversions = 0;
  int conversion_of[kMaxFusedOutputs];
  for (size_t p = 0; p < outputs.size(); ++p) {
    SHARDLM_CHECK_MSG(outputs[p].w.cols == cols, "fused MatMul over %lld and %lld columns",
                      static_cast<long long>(cols), static_cast<long long>(outputs[p].w.cols));
    const TypeTraits& traits = TraitsOf(outputs[p].w);
    int j = 0;
    while (j < n_conversions && conversions[j]->act_type != traits.act_type) ++j;
    if (j == n_conversions) conversions[n_conversions++] = &traits;
    conversion_of[p] = j;
  }
  const uint8_t* acts[kMaxFusedOutputs];
  for (int j = 0; j < n_conversions; ++j) {
    if (conversions[j]->act_type == GgmlType::kF32) {
      acts[j] = reinterpret_cast<const uint8_t*>(x);
      continue;
    }
    const size_t bytes = static_cast<size_t>(n_tokens * ActRowBytes(*conversions[j], cols));
    if (scratch.act[j].size() < bytes) scratch.act[j].resize(bytes);
    acts[j] = scratch.act[j].data();
  }
  auto convert = [&](size_t t, size_t /*worker*/) {
    for (int j = 0; j < n_conversions; ++j) {
      const TypeTraits& traits = *conversions[j];
      if (traits.act_type == GgmlType::kF32) continue;
      const int64_t row_bytes = ActRowBytes(traits, cols);
      uint8_t* row = scratch.act[j].data() + t * row_bytes;
      QuantizeActRow(traits, x + t * cols, row, cols);
    }
  };
  if (n_tokens == 1) {
    convert(0, 0);
  } else {
    pool.ParallelFor(static_cast<size_t>(n_tokens), convert);
  }
  fp->n_parts = static_cast<int>(outputs.size());
  const int64_t token_tasks = (n_tokens + kTokensPerTask - 1) / kTokensPerTask;
  for (int p = 0; p < fp->n_parts; ++p) {
    const WeightView& w = outputs[p].w;
    const TypeTraits& traits = *GetTypeTraits(w.type);
    const int tile_rows = w.panel_bytes != 0 ? kPanelRows : traits.tile_rows;
    const int64_t rows_per_task = RowsPerTask(w.rows, tile_rows);
    const int64_t row_tasks = (w.rows + rows_per_task - 1) / rows_per_task;
    fp->parts[p] = {&traits,      &w,       acts[conversion_of[p]], ActRowBytes(traits, cols),
                    outputs[p].y, n_tokens, rows_per_task,          row_tasks,
                    tile_rows};
    fp->first_task[p + 1] = fp->first_task[p] + row_tasks * token_tasks;
    fp->first_row[p + 1] = fp->first_row[p] + w.rows;
  }
}

// Runs the tasks of a planned call: guided row chunks of the joint rows for one token,
// blocks otherwise.
void RunPlan(FusedPlan& fp, int64_t n_tokens, ThreadPool& pool, MatMulScratch& scratch) {
  if (n_tokens == 1) {
    const int64_t rows = fp.combine != nullptr ? fp.parts[0].w->rows : fp.first_row[fp.n_parts];
    int align = 1;
    for (int p = 0; p < fp.n_parts; ++p) align = std::lcm(align, fp.parts[p].tile_rows);
    GuidedBounds(rows, align, pool.size(), &scratch.row_bounds);
    fp.bounds = scratch.row_bounds.data();
    pool.ParallelFor(scratch.row_bounds.size() - 1, [p = &fp](size_t task, size_t) {
      RunDecodeTask(*p, p->bounds[task], p->bounds[task + 1]);
    });
    return;
  }
  const int64_t tasks = fp.combine != nullptr ? fp.first_task[1] : fp.first_task[fp.n_parts];
  pool.ParallelFor(static_cast<size_t>(tasks), [p = &fp](size_t task, size_t) {
    RunBlockTask(*p, static_cast<int64_t>(task));
  });
}

}  // namespace

void MatMul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            MatMulScratch& scratch) {
  const MatMulOutput output{w, y};
  MatMulMany({&output, 1}, x, n_tokens, pool, scratch);
}

void MatMulMany(std::span<const MatMulOutput> outputs, const float* x, int64_t n_tokens,
                ThreadPool& pool, MatMulScratch& scratch) {
  if (n_tokens <= 0) return;
  FusedPlan fp;
  PlanParts(outputs, x, n_tokens, pool, scratch, &fp);
  if (fp.first_row[fp.n_parts] == 0) return;
  RunPlan(fp, n_tokens, pool, scratch);
}

void MatMulGated(const WeightView& a, const WeightView& b, const float* x, int64_t n_tokens,
                 float* ya, float* yb, RowCombine combine, ThreadPool& pool,
                 MatMulScratch& scratch) {
  SHARDLM_CHECK_MSG(a.rows == b.rows && a.cols == b.cols,
                    "gated MatMul over %lldx%lld and %lldx%lld", static_cast<long long>(a.rows),
                    static_cast<long long>(a.cols), static_cast<long long>(b.rows),
                    static_cast<long long>(b.cols));
  if (n_tokens <= 0 || a.rows <= 0) return;
  const MatMulOutput outputs[2] = {{a, ya}, {b, yb}};
  FusedPlan fp;
  PlanParts(outputs, x, n_tokens, pool, scratch, &fp);
  fp.combine = combine;
  RunPlan(fp, n_tokens, pool, scratch);
}

void DequantizeRow(const WeightView& w, int64_t row, float* dst) {
  const TypeTraits* traits = GetTypeTraits(w.type);
  SHARDLM_CHECK_MSG(traits != nullptr, "no kernels for weight type %u",
                    static_cast<unsigned>(w.type));
  SHARDLM_CHECK(row >= 0 && row < w.rows);
  SHARDLM_CHECK_MSG(w.panel_bytes == 0, "DequantizeRow of a panel matrix");
  traits->dequantize_row(static_cast<const uint8_t*>(w.data) + row * w.row_bytes, dst, w.cols);
}

}  // namespace shardlm
