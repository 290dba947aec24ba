// Paged attention: a GQA group of query heads over a sequence's KV pages (see attention.h).
#include "model/attention.h"

#include <algorithm>

#include "base/check.h"
#include "model/attention_kernels.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

// Row pointers gathered per kernel call: one run of consecutive positions inside a page.
constexpr int kMaxRunRows = 64;

// The K (or V) rows of one kv head over positions [0, n_ctx), as runs of n <= kMaxRunRows
// consecutive positions inside one page, in position order, over the pages `read_pages`
// lists (a bounded pool's resident ones; empty: every page). A run's stored rows are one
// contiguous stretch (head-major pages, see page_pool.h).
class KvRuns {
 public:
  KvRuns(const PagePool& pool, PageList pages, std::span<const int32_t> read_pages, int layer_idx,
         bool values, int kv_head, int n_ctx)
      : pool_(pool),
        pages_(pages),
        read_pages_(read_pages),
        layer_idx_(layer_idx),
        values_(values),
        kv_head_(kv_head),
        n_ctx_(n_ctx) {}

  int n_ctx() const { return n_ctx_; }

  // The first position at or after `pos` whose page is read (n_ctx when none).
  int Next(int pos) const {
    if (read_pages_.empty()) return std::min(pos, n_ctx_);
    const int page_tokens = pool_.page_tokens();
    const int page = pos / page_tokens;
    const auto next = std::lower_bound(read_pages_.begin(), read_pages_.end(), page);
    if (next == read_pages_.end()) return n_ctx_;
    return std::min(*next == page ? pos : *next * page_tokens, n_ctx_);
  }

  // The stored rows of the run starting at `pos` (< n_ctx, on a read page); *n is its length.
  const uint8_t* At(int pos, int* n) const {
    const int page_tokens = pool_.page_tokens();
    const PageId page = pages_[pos / page_tokens];
    const int offset = pos % page_tokens;
    *n = std::min({kMaxRunRows, page_tokens - offset, n_ctx_ - pos});
    return static_cast<const uint8_t*>(values_ ? pool_.ValueRow(page, layer_idx_, kv_head_, offset)
                                               : pool_.KeyRow(page, layer_idx_, kv_head_, offset));
  }

 private:
  const PagePool& pool_;
  PageList pages_;
  std::span<const int32_t> read_pages_;
  int layer_idx_;
  bool values_;
  int kv_head_;
  int n_ctx_;
};

// Columns (read positions) before `position`: every position of the read pages before its
// page, and those of its own page before it (its page is read). With every page read, the
// position itself.
int ColumnsBefore(std::span<const int32_t> read_pages, int page_tokens, int position) {
  if (read_pages.empty()) return position;
  const int page = position / page_tokens;
  const auto end = std::lower_bound(read_pages.begin(), read_pages.end(), page);
  return position % page_tokens + int(end - read_pages.begin()) * page_tokens;
}

// Calls fn(pos, col, n, rows) for the runs of `runs` from position `first` on, in position
// order; col is the run's first column (its index among the read positions from `first`:
// the position minus `first` when every page is read); rows[r] is the F32 row of position pos + r:
// as_f32(raw, n) gives the run's stored rows as F32 rows head_dim apart (the stored rows themselves
// for an F32 cache, a converted copy for F16).
template <typename AsF32, typename Fn>
void ForEachRun(const KvRuns& runs, int first, int64_t head_dim, AsF32&& as_f32, Fn&& fn) {
  const float* rows[kMaxRunRows];
  int col = 0;
  for (int pos = runs.Next(first); pos < runs.n_ctx(); pos = runs.Next(pos)) {
    int n = 0;
    const uint8_t* raw = runs.At(pos, &n);
    const float* run = as_f32(raw, n);
    for (int r = 0; r < n; ++r) rows[r] = run + r * head_dim;
    fn(pos, col, n, rows);
    pos += n;
    col += n;
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

// Where each token of a tile starts to look: its first visible position (the window's
// start, 0 without one) and that position's column (counted from the tile's first visited
// position). A token's scores start at its own first column, so they are laid out (and
// summed by the softmax) the same whatever tile the token is in.
struct TokenStarts {
  int position[kMaxTileTokens];
  int col[kMaxTileTokens];
};

// Scores, softmax and values of a tile, given how to visit K and V rows: visit(values, fn)
// calls fn(pos, col, n, rows) for runs of rows in position order (rows[r] at position
// pos + r, column col + r). first_col: the column of the tile's first position.
template <typename VisitRows>
void AttendTileRuns(const AttentionTile& tile, int head_dim, int first_col,
                    const TokenStarts& starts, float* scores, VisitRows&& visit) {
  const AttentionKernels& kern = GetAttentionKernels();
  const int ctx = first_col + tile.n_tokens;  // row stride of scores
  // Token i's score of column c is at score_row(i, h)[c − starts.col[i]].
  auto score_row = [&](int i, int h) { return scores + (int64_t(i) * tile.n_heads + h) * ctx; };
  auto query = [&](int i, int h) { return tile.q + i * tile.q_stride + h * head_dim; };
  auto out_head = [&](int i, int h) { return tile.out + i * tile.out_stride + h * head_dim; };
  // The rows of the run [pos, pos + n) that token i may see: [skip, skip + m).
  auto visible = [&](int i, int pos, int n, int* skip) {
    *skip = std::max(0, starts.position[i] - pos);
    return std::min(n, tile.first_position + i + 1 - pos) - *skip;
  };
  RunQueries full;
  // scores[i][h][pos] = q_ih · k_pos (softmax applies the scale)
  visit(false, [&](int pos, int col, int n, const float* const* rows) {
    full.n = 0;
    for (int i = 0; i < tile.n_tokens; ++i) {
      int skip = 0;
      const int m = visible(i, pos, n, &skip);
      for (int h = 0; m > 0 && h < tile.n_heads; ++h) {
        float* s = score_row(i, h) + (col + skip - starts.col[i]);
        if (m == n && full.n < RunQueries::kMax) {
          full.in[full.n] = query(i, h);
          full.out[full.n++] = s;
        } else {
          kern.dot_rows(query(i, h), rows + skip, m, head_dim, s);
        }
      }
    }
    kern.dot_tile(full.in, full.n, rows, n, head_dim, full.out);
  });
  for (int i = 0; i < tile.n_tokens; ++i) {
    for (int h = 0; h < tile.n_heads; ++h) {
      kern.softmax(score_row(i, h), first_col + i + 1 - starts.col[i], tile.scale);
    }
    std::fill(out_head(i, 0), out_head(i, 0) + int64_t(tile.n_heads) * head_dim, 0.0f);
  }
  // out[i][h] = Σ_pos p[i][h][pos] · v_pos, in position order
  visit(true, [&](int pos, int col, int n, const float* const* rows) {
    full.n = 0;
    for (int i = 0; i < tile.n_tokens; ++i) {
      int skip = 0;
      const int m = visible(i, pos, n, &skip);
      for (int h = 0; m > 0 && h < tile.n_heads; ++h) {
        const float* p = score_row(i, h) + (col + skip - starts.col[i]);
        if (m == n && full.n < RunQueries::kMax) {
          full.in[full.n] = p;
          full.out[full.n++] = out_head(i, h);
        } else {
          kern.axpy_rows(p, rows + skip, m, out_head(i, h), head_dim);
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
  const int n_ctx = tile.first_position + tile.n_tokens;
  const int page_tokens = pool.page_tokens();
  auto start_of = [&](int position) {
    return tile.window > 0 ? std::max(0, position - tile.window + 1) : 0;
  };
  // Columns count from the first position any token of the tile sees.
  const int first = start_of(tile.first_position);
  const int first_base = ColumnsBefore(tile.read_pages, page_tokens, first);
  const int first_col =
      ColumnsBefore(tile.read_pages, page_tokens, tile.first_position) - first_base;
  TokenStarts starts;
  for (int i = 0; i < tile.n_tokens; ++i) {
    starts.position[i] = start_of(tile.first_position + i);
    starts.col[i] =
        starts.position[i] == first
            ? 0
            : ColumnsBefore(tile.read_pages, page_tokens, starts.position[i]) - first_base;
  }
  float* scores = scratch;
  const KvRuns keys(pool, pages, tile.read_pages, layer_idx, false, tile.kv_head, n_ctx);
  const KvRuns values(pool, pages, tile.read_pages, layer_idx, true, tile.kv_head, n_ctx);
  auto visit = [&](bool v, auto&& as_f32, auto&& fn) {
    ForEachRun(v ? values : keys, first, head_dim, as_f32, fn);
  };
  if (pool.config().kv_type == KvType::kF32) {
    auto as_f32 = [](const uint8_t* raw, int) { return reinterpret_cast<const float*>(raw); };
    AttendTileRuns(tile, head_dim, first_col, starts, scores,
                   [&](bool v, auto&& fn) { visit(v, as_f32, fn); });
  } else {
    // F16 and the block types: each run converted once into the scratch after the scores (by
    // the element type's dequantize_row), and used by every (token, head) of the tile. A run is
    // whole rows, so whole blocks.
    const TypeTraits& element = *GetTypeTraits(KvElementType(pool.config().kv_type));
    float* converted =
        scratch + int64_t(tile.n_tokens) * tile.n_heads * (first_col + tile.n_tokens);
    auto as_f32 = [&](const uint8_t* raw, int n) -> const float* {
      element.dequantize_row(raw, converted, int64_t(n) * head_dim);
      return converted;
    };
    AttendTileRuns(tile, head_dim, first_col, starts, scores,
                   [&](bool v, auto&& fn) { visit(v, as_f32, fn); });
  }
}

void WriteKv(PagePool& pool, PageList pages, int layer_idx, int position, const float* k,
             const float* v) {
  const int page_tokens = pool.page_tokens();
  SHARDLM_DCHECK(size_t(position / page_tokens) < pages.size());
  const PageId page = pages[position / page_tokens];
  const int offset = position % page_tokens;
  const KvLayerShape shape = pool.layer_shape(layer_idx);
  const int64_t head_dim = shape.head_dim;
  const KvType kv_type = pool.config().kv_type;
  auto store = [&](const float* src, void* dst) { KvStoreRow(kv_type, src, dst, head_dim); };
  for (int h = 0; h < shape.n_kv_heads; ++h) {
    store(k + h * head_dim, pool.KeyRow(page, layer_idx, h, offset));
    store(v + h * head_dim, pool.ValueRow(page, layer_idx, h, offset));
  }
}

}  // namespace shardlm
