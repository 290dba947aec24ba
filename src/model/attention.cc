// Paged attention: a GQA group of query heads over a sequence's KV pages (see attention.h).
#include "model/attention.h"

#include <algorithm>

#include "base/check.h"
#include "model/attention_kernels.h"
#include "model/ops.h"

namespace shardlm {
namespace {

// Row pointers gathered per kernel call: one run of consecutive positions inside a page.
constexpr int kMaxRunRows = 64;

// Calls fn(pos, n, rows) for runs of n <= kMaxRunRows consecutive positions of [0, n_ctx)
// inside one page, in position order; rows[r] = as_f32(r, raw) is the F32 K (or V) row of
// position pos + r for one kv head, given its stored row `raw` (the head's elements).
template <typename AsF32, typename Fn>
void ForEachRun(const PagePool& pool, PageList pages, int layer_idx, bool values,
                int64_t head_offset, int n_ctx, AsF32&& as_f32, Fn&& fn) {
  const int page_tokens = pool.page_tokens();
  const size_t element_bytes = KvTypeSize(pool.config().kv_type);
  const size_t head_bytes = pool.config().head_dim * element_bytes;
  const float* rows[kMaxRunRows];
  for (int pos = 0; pos < n_ctx;) {
    const PageId page = pages[pos / page_tokens];
    const int offset = pos % page_tokens;
    const int n = std::min({kMaxRunRows, page_tokens - offset, n_ctx - pos});
    // The run's rows of this head are row_bytes apart in the page (every head of a position
    // is contiguous): ask for all of them before the first is used, so the misses overlap
    // instead of being taken one row at a time. At 8 streams of ~150 positions, F16 rows
    // converted one by one spent 32% of a decode step waiting for memory.
    for (int r = 0; r < n; ++r) {
      const auto* row =
          static_cast<const char*>(values ? pool.ValueRow(page, layer_idx, offset + r)
                                          : pool.KeyRow(page, layer_idx, offset + r)) +
          head_offset * element_bytes;
      for (size_t line = 0; line < head_bytes; line += 64) __builtin_prefetch(row + line, 0, 3);
    }
    for (int r = 0; r < n; ++r) {
      const void* row = values ? pool.ValueRow(page, layer_idx, offset + r)
                               : pool.KeyRow(page, layer_idx, offset + r);
      rows[r] = as_f32(r, static_cast<const uint8_t*>(row) + head_offset * element_bytes);
    }
    fn(pos, n, rows);
    pos += n;
  }
}

// The (token, head) pairs of a tile that see a whole run of rows go through the *_tile
// kernels together; a token that sees only part of the run (the causal edge) goes alone.
struct RunQueries {
  static constexpr int kMax = kMaxTileQueries;  // queries per kernel call
  const float* in[kMax];  // q vectors (score pass) or probability rows (value pass)
  float* out[kMax];       // score rows (score pass) or output heads (value pass)
  int n = 0;
};

// Scores, softmax and values of a tile, given how to visit K and V rows: visit(values, fn)
// calls fn(pos, n, rows) for runs of rows in position order (rows[r] at position pos + r).
template <typename VisitRows>
void AttendTileRuns(const AttentionTile& tile, int head_dim, float* scores, VisitRows&& visit) {
  const AttentionKernels& kern = GetAttentionKernels();
  const int ctx = tile.first_position + tile.n_tokens;  // row stride of scores
  auto score_row = [&](int i, int h) { return scores + (int64_t(i) * tile.n_heads + h) * ctx; };
  auto query = [&](int i, int h) { return tile.q + i * tile.q_stride + h * head_dim; };
  auto out_head = [&](int i, int h) { return tile.out + i * tile.out_stride + h * head_dim; };
  // Rows of the run [pos, pos + n) that token i may see.
  auto visible = [&](int i, int pos, int n) {
    return std::min(n, tile.first_position + i + 1 - pos);
  };
  RunQueries full;
  // scores[i][h][pos] = q_ih · k_pos (softmax applies the scale)
  visit(false, [&](int pos, int n, const float* const* rows) {
    full.n = 0;
    for (int i = 0; i < tile.n_tokens; ++i) {
      const int m = visible(i, pos, n);
      for (int h = 0; m > 0 && h < tile.n_heads; ++h) {
        float* s = score_row(i, h) + pos;
        if (m == n && full.n < RunQueries::kMax) {
          full.in[full.n] = query(i, h);
          full.out[full.n++] = s;
        } else {
          kern.dot_rows(query(i, h), rows, m, head_dim, s);
        }
      }
    }
    kern.dot_tile(full.in, full.n, rows, n, head_dim, full.out);
  });
  for (int i = 0; i < tile.n_tokens; ++i) {
    for (int h = 0; h < tile.n_heads; ++h) {
      kern.softmax(score_row(i, h), tile.first_position + i + 1, tile.scale);
    }
    std::fill(out_head(i, 0), out_head(i, 0) + int64_t(tile.n_heads) * head_dim, 0.0f);
  }
  // out[i][h] = Σ_pos p[i][h][pos] · v_pos, in position order
  visit(true, [&](int pos, int n, const float* const* rows) {
    full.n = 0;
    for (int i = 0; i < tile.n_tokens; ++i) {
      const int m = visible(i, pos, n);
      for (int h = 0; m > 0 && h < tile.n_heads; ++h) {
        if (m == n && full.n < RunQueries::kMax) {
          full.in[full.n] = score_row(i, h) + pos;
          full.out[full.n++] = out_head(i, h);
        } else {
          kern.axpy_rows(score_row(i, h) + pos, rows, m, out_head(i, h), head_dim);
        }
      }
    }
    kern.axpy_tile(full.in, full.n, rows, n, full.out, head_dim);
  });
}

}  // namespace

size_t AttendTileScratch(int max_queries, size_t max_ctx, int head_dim) {
  return size_t(max_queries) * max_ctx + size_t(kMaxRunRows) * head_dim;
}

void AttendTile(const PagePool& pool, PageList pages, int layer_idx, int head_dim,
                const AttentionTile& tile, float* scratch) {
  SHARDLM_DCHECK(tile.n_tokens >= 1 && tile.n_tokens <= TileTokensFor(tile.n_heads));
  SHARDLM_DCHECK(tile.first_position + tile.n_tokens <= int64_t(pages.size()) * pool.page_tokens());
  SHARDLM_DCHECK(head_dim <= 512);
  const int64_t head_offset = int64_t(tile.kv_head) * head_dim;
  const int n_ctx = tile.first_position + tile.n_tokens;
  float* scores = scratch;
  if (pool.config().kv_type == KvType::kF32) {
    auto as_f32 = [](int, const uint8_t* raw) { return reinterpret_cast<const float*>(raw); };
    AttendTileRuns(tile, head_dim, scores, [&](bool values, auto&& fn) {
      ForEachRun(pool, pages, layer_idx, values, head_offset, n_ctx, as_f32, fn);
    });
  } else {
    // F16: each row of a run converted once into the scratch after the scores, and used by
    // every (token, head) of the tile.
    const AttentionKernels& kern = GetAttentionKernels();
    float* converted = scratch + int64_t(tile.n_tokens) * tile.n_heads * n_ctx;
    auto as_f32 = [&](int r, const uint8_t* raw) -> const float* {
      float* dst = converted + int64_t(r) * head_dim;
      kern.half_row(reinterpret_cast<const uint16_t*>(raw), dst, head_dim);
      return dst;
    };
    AttendTileRuns(tile, head_dim, scores, [&](bool values, auto&& fn) {
      ForEachRun(pool, pages, layer_idx, values, head_offset, n_ctx, as_f32, fn);
    });
  }
}

void WriteKv(PagePool& pool, PageList pages, int layer_idx, int position, const float* k,
             const float* v) {
  const int page_tokens = pool.page_tokens();
  SHARDLM_DCHECK(size_t(position / page_tokens) < pages.size());
  const PageId page = pages[position / page_tokens];
  const int offset = position % page_tokens;
  const size_t n = pool.row_elements();
  void* k_dst = pool.KeyRow(page, layer_idx, offset);
  void* v_dst = pool.ValueRow(page, layer_idx, offset);
  if (pool.config().kv_type == KvType::kF32) {
    std::copy(k, k + n, static_cast<float*>(k_dst));
    std::copy(v, v + n, static_cast<float*>(v_dst));
  } else {
    auto* k16 = static_cast<uint16_t*>(k_dst);
    auto* v16 = static_cast<uint16_t*>(v_dst);
    for (size_t i = 0; i < n; ++i) {
      k16[i] = FloatToHalf(k[i]);
      v16[i] = FloatToHalf(v[i]);
    }
  }
}

}  // namespace shardlm
