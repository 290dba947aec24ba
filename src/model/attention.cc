// Paged attention: a GQA group of query heads over a sequence's KV pages (see attention.h).
#include "model/attention.h"

#include <algorithm>

#include "base/check.h"
#include "model/attention_kernels.h"
#include "model/ops.h"

namespace shardlm {
namespace {

// Calls fn(position, page, offset) for positions [0, n_ctx) in order, page by page.
template <typename Fn>
void ForEachPosition(const BlockTable& table, int page_tokens, int n_ctx, Fn&& fn) {
  for (int page_idx = 0, pos = 0; pos < n_ctx; ++page_idx) {
    const PageId page = table.page(page_idx);
    const int n = std::min(page_tokens, n_ctx - pos);
    for (int offset = 0; offset < n; ++offset, ++pos) fn(pos, page, offset);
  }
}

// Row pointers gathered per kernel call: one run of consecutive positions inside a page.
constexpr int kMaxRunRows = 64;

// Calls fn(pos, n, rows) for runs of n <= kMaxRunRows consecutive positions of [0, n_ctx)
// inside one page, in position order; rows[r] is the F32 K (or V) row of position pos + r
// for one kv head.
template <typename Fn>
void ForEachRunF32(const PagePool& pool, const BlockTable& table, int layer_idx, bool values,
                   int64_t head_offset, int n_ctx, Fn&& fn) {
  const int page_tokens = pool.page_tokens();
  const float* rows[kMaxRunRows];
  for (int pos = 0; pos < n_ctx;) {
    const PageId page = table.page(pos / page_tokens);
    const int offset = pos % page_tokens;
    const int n = std::min({kMaxRunRows, page_tokens - offset, n_ctx - pos});
    for (int r = 0; r < n; ++r) {
      const void* row = values ? pool.ValueRow(page, layer_idx, offset + r)
                               : pool.KeyRow(page, layer_idx, offset + r);
      rows[r] = static_cast<const float*>(row) + head_offset;
    }
    fn(pos, n, rows);
    pos += n;
  }
}

// F32 cache: scores with dot_rows, values with axpy_rows, a page run at a time. Per element
// the arithmetic is exactly that of the position-by-position path.
void AttendGroupF32(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                    const GroupQuery& query, float* scores, float* out) {
  const AttentionKernels& kern = GetAttentionKernels();
  const int64_t head_offset = int64_t(query.kv_head) * head_dim;
  const int n_ctx = query.n_ctx;
  // scores[h][pos] = (q_h · k_pos) · scale
  ForEachRunF32(pool, table, layer_idx, false, head_offset, n_ctx,
                [&](int pos, int n, const float* const* rows) {
                  for (int h = 0; h < query.n_heads; ++h) {
                    float* s = scores + int64_t(h) * n_ctx + pos;
                    kern.dot_rows(query.q + h * head_dim, rows, n, head_dim, s);
                    for (int r = 0; r < n; ++r) s[r] *= query.scale;
                  }
                });
  for (int h = 0; h < query.n_heads; ++h) Softmax(scores + int64_t(h) * n_ctx, n_ctx);
  std::fill(out, out + int64_t(query.n_heads) * head_dim, 0.0f);
  // out[h] = Σ_pos p[h][pos] · v_pos, in position order
  ForEachRunF32(pool, table, layer_idx, true, head_offset, n_ctx,
                [&](int pos, int n, const float* const* rows) {
                  for (int h = 0; h < query.n_heads; ++h) {
                    kern.axpy_rows(scores + int64_t(h) * n_ctx + pos, rows, n, out + h * head_dim,
                                   head_dim);
                  }
                });
}

// F16 cache: each K/V row is converted once and used by every head of the group.
void AttendGroupF16(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                    const GroupQuery& query, float* scores, float* out) {
  const AttentionKernels& kern = GetAttentionKernels();
  const int64_t head_offset = int64_t(query.kv_head) * head_dim;
  const int n_ctx = query.n_ctx;
  float row[512];  // one converted row; head_dim <= 512 (ModelConfig)
  auto convert = [&](const void* src) {
    kern.half_row(static_cast<const uint16_t*>(src) + head_offset, row, head_dim);
  };
  ForEachPosition(table, pool.page_tokens(), n_ctx, [&](int pos, PageId page, int offset) {
    convert(pool.KeyRow(page, layer_idx, offset));
    for (int h = 0; h < query.n_heads; ++h) {
      scores[int64_t(h) * n_ctx + pos] =
          kern.dot(query.q + h * head_dim, row, head_dim) * query.scale;
    }
  });
  for (int h = 0; h < query.n_heads; ++h) Softmax(scores + int64_t(h) * n_ctx, n_ctx);
  std::fill(out, out + int64_t(query.n_heads) * head_dim, 0.0f);
  ForEachPosition(table, pool.page_tokens(), n_ctx, [&](int pos, PageId page, int offset) {
    convert(pool.ValueRow(page, layer_idx, offset));
    for (int h = 0; h < query.n_heads; ++h) {
      kern.axpy(scores[int64_t(h) * n_ctx + pos], row, out + h * head_dim, head_dim);
    }
  });
}

}  // namespace

void AttendGroup(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                 const GroupQuery& query, float* scores, float* out) {
  SHARDLM_DCHECK(query.n_ctx > 0 && query.n_ctx <= table.capacity_tokens());
  SHARDLM_DCHECK(head_dim <= 512);
  if (pool.config().kv_type == KvType::kF32) {
    AttendGroupF32(pool, table, layer_idx, head_dim, query, scores, out);
  } else {
    AttendGroupF16(pool, table, layer_idx, head_dim, query, scores, out);
  }
}

void WriteKv(PagePool& pool, const BlockTable& table, int layer_idx, int position, const float* k,
             const float* v) {
  const int page_tokens = pool.page_tokens();
  const PageId page = table.page(position / page_tokens);
  const int offset = position % page_tokens;
  SHARDLM_DCHECK(pool.refcount(page) == 1);
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
