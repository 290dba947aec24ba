// Paged attention: a GQA group of query heads over a sequence's KV pages (see attention.h).
#include "model/attention.h"

#include <algorithm>

#include "base/check.h"
#include "model/attention_kernels.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

// The longest run of consecutive positions inside a page visited (and prefetched) at once.
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

// Rows per kernel call inside a run in decode (one-token tiles). A run converted whole (64 F16
// rows: 32 KiB of F32) filled L1, and the memory idled while the kernels used it: one thread read
// F16 rows at 6-8 GB/s (Zen 4). Each piece's kernels also ask for the piece's share of the next
// run (Ahead), so the next run streams in while this one is used. Prefill tiles, whose rows serve
// up to 64 queries, keep whole runs: in pieces of 16 a Q4_K_M pp2048 took 1.08x the time (each
// piece reloads and stores the queries' accumulators and is asked for again by every pass).
constexpr int kDecodePieceRows = 16;

// A run's stored rows: positions [pos, pos + n), n rows of row_bytes from raw.
struct StoredRun {
  int pos = 0;
  const uint8_t* raw = nullptr;
  int n = 0;
};

// The run at or after `pos` on a read page; none (n = 0) past the last.
StoredRun RunFrom(const KvRuns& runs, int pos) {
  StoredRun run;
  run.pos = runs.Next(pos);
  if (run.pos < runs.n_ctx()) run.raw = runs.At(run.pos, &run.n);
  return run;
}

// Calls fn(pos, col, n, rows) for the runs of `runs` from position `first` on, in position
// order, each in pieces of at most piece_rows rows; col is the piece's first column (its index
// among the read positions from `first`: the position minus `first` when every page is read);
// rows[r] is the row of position pos + r: as_rows(raw, n) gives n stored rows from raw as rows
// head_dim elements apart that the kernels read (the stored rows themselves for an F32 cache and
// for an F16 one read by the *_f16 kernels, a copy converted to F32 otherwise). ahead: the
// piece's share of the next run's stored rows, for the kernels to ask for (the last run's
// pieces: of the first run of `then`, the V rows after the K rows; null: none).
template <typename Row, typename AsRows, typename Fn>
void ForEachRun(const KvRuns& runs, const KvRuns* then, int first, int64_t head_dim,
                size_t row_bytes, int piece_rows, AsRows&& as_rows, Fn&& fn) {
  const Row* rows[kMaxRunRows];
  int col = 0;
  StoredRun run = RunFrom(runs, first);
  while (run.n > 0) {
    const StoredRun after = RunFrom(runs, run.pos + run.n);
    const StoredRun next = after.n > 0       ? after
                           : then != nullptr ? RunFrom(*then, first)
                                             : StoredRun{};
    const size_t next_bytes = size_t(next.n) * row_bytes;
    for (int r0 = 0; r0 < run.n; r0 += piece_rows) {
      const int m = std::min(piece_rows, run.n - r0);
      const size_t from = next_bytes * r0 / run.n, to = next_bytes * (r0 + m) / run.n;
      const Ahead ahead = next.n > 0 ? Ahead{next.raw + from, to - from} : Ahead{};
      const Row* piece = as_rows(run.raw + r0 * row_bytes, m);
      for (int r = 0; r < m; ++r) rows[r] = piece + r * head_dim;
      fn(run.pos + r0, col + r0, m, rows, ahead);
    }
    col += run.n;
    run = after;
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

// The tile kernels over rows of one element type (F32, or F16 widened as loaded). A query that
// sees only part of a run goes through them alone (n_q = 1: bitwise dot_rows, axpy_rows).
template <typename Row>
struct RowKernels {
  void (*dot_tile)(const float* const* qs, int n_q, const Row* const* rows, int n_rows, int n,
                   float* const* outs, Ahead ahead);
  void (*axpy_tile)(const float* const* ws, int n_q, const Row* const* rows, int n_rows,
                    float* const* ys, int n, Ahead ahead);
};

// Scores, softmax and values of a tile, given how to visit K and V rows: visit(values, fn)
// calls fn(pos, col, n, rows, ahead) for runs of rows in position order (rows[r] at position
// pos + r, column col + r; ahead: what to ask for meanwhile, given to the tile call, or asked
// for at once when no query sees the whole piece). first_col: the column of the tile's first
// position.
template <typename Row, typename VisitRows>
void AttendTileRuns(const AttentionTile& tile, int head_dim, int first_col,
                    const TokenStarts& starts, float* scores, RowKernels<Row> rk,
                    VisitRows&& visit) {
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
  // A piece no query sees whole (a window's first piece) asks for its share at once.
  auto AskFor = [](Ahead& ahead, int n_full) {
    if (n_full == 0) {
      internal::AskAhead(ahead, 0, 1, 1);
      ahead = {};
    }
  };
  // scores[i][h][pos] = q_ih · k_pos (softmax applies the scale)
  visit(false, [&](int pos, int col, int n, const Row* const* rows, Ahead ahead) {
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
          const float* q = query(i, h);
          rk.dot_tile(&q, 1, rows + skip, m, head_dim, &s, Ahead{});
        }
      }
    }
    AskFor(ahead, full.n);
    rk.dot_tile(full.in, full.n, rows, n, head_dim, full.out, ahead);
  });
  for (int i = 0; i < tile.n_tokens; ++i) {
    for (int h = 0; h < tile.n_heads; ++h) {
      kern.softmax(score_row(i, h), first_col + i + 1 - starts.col[i], tile.scale);
    }
    std::fill(out_head(i, 0), out_head(i, 0) + int64_t(tile.n_heads) * head_dim, 0.0f);
  }
  // out[i][h] = Σ_pos p[i][h][pos] · v_pos, in position order
  visit(true, [&](int pos, int col, int n, const Row* const* rows, Ahead ahead) {
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
          float* y = out_head(i, h);
          rk.axpy_tile(&p, 1, rows + skip, m, &y, head_dim, Ahead{});
        }
      }
    }
    AskFor(ahead, full.n);
    rk.axpy_tile(full.in, full.n, rows, n, full.out, head_dim, ahead);
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
  const size_t row_bytes = KvRowBytes(pool.config().kv_type, head_dim);
  const int piece_rows = tile.n_tokens == 1 ? kDecodePieceRows : kMaxRunRows;
  // Runs the tile over rows that as_rows(raw, n) gives (see ForEachRun) with the kernels rk.
  auto attend = [&]<typename Row>(RowKernels<Row> rk, auto&& as_rows) {
    AttendTileRuns(tile, head_dim, first_col, starts, scores, rk, [&](bool v, auto&& fn) {
      if (v) {
        ForEachRun<Row>(values, nullptr, first, head_dim, row_bytes, piece_rows, as_rows, fn);
      } else {
        ForEachRun<Row>(keys, &values, first, head_dim, row_bytes, piece_rows, as_rows, fn);
      }
    });
  };
  const AttentionKernels& kern = GetAttentionKernels();
  const KvType kv_type = pool.config().kv_type;
  if (kv_type == KvType::kF32) {
    attend(RowKernels<float>{kern.dot_tile, kern.axpy_tile},
           [](const uint8_t* raw, int) { return reinterpret_cast<const float*>(raw); });
  } else if (kv_type == KvType::kF16 && tile.n_tokens == 1) {
    // Decode over an F16 cache: the kernels widen each row as they load it, the memory's
    // stream never waiting on a conversion pass (with a few queries per row, converting
    // first saves nothing).
    attend(RowKernels<fp16_t>{kern.dot_tile_f16, kern.axpy_tile_f16},
           [](const uint8_t* raw, int) { return reinterpret_cast<const fp16_t*>(raw); });
  } else {
    // F16 (prefill tiles) and the block types: each piece of a run converted once into the
    // scratch after the scores (by the element type's dequantize_row), and used by every
    // (token, head) of the tile. A piece is whole rows, so whole blocks.
    const TypeTraits& element = *GetTypeTraits(KvElementType(kv_type));
    float* converted =
        scratch + int64_t(tile.n_tokens) * tile.n_heads * (first_col + tile.n_tokens);
    attend(RowKernels<float>{kern.dot_tile, kern.axpy_tile},
           [&](const uint8_t* raw, int n) -> const float* {
             element.dequantize_row(raw, converted, int64_t(n) * head_dim);
             return converted;
           });
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
