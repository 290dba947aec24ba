// Paged attention: a GQA group of query heads over a sequence's KV pages (see attention.h).
#include "model/attention.h"

#include <algorithm>
#include <type_traits>

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

// A K or V row of one kv head as floats: in place for F32, converted into `buf` for F16.
template <typename T>
const float* HeadRow(const void* row, int64_t head_offset, int head_dim, const AttentionKernels& k,
                     float* buf) {
  const T* p = static_cast<const T*>(row) + head_offset;
  if constexpr (std::is_same_v<T, float>) {
    return p;
  } else {
    k.half_row(p, buf, head_dim);
    return buf;
  }
}

// The F32 value pass: rows are handed to axpy_rows a page run at a time (same per-element
// order as one axpy per position, fewer loads and stores of out).
void AccumulateValuesF32(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                         const GroupQuery& query, const float* scores, float* out) {
  const AttentionKernels& kern = GetAttentionKernels();
  const int64_t head_offset = int64_t(query.kv_head) * head_dim;
  const int page_tokens = pool.page_tokens();
  const int n_ctx = query.n_ctx;
  constexpr int kMaxRows = 64;  // row pointers gathered per call
  const float* rows[kMaxRows];
  for (int pos = 0; pos < n_ctx;) {
    const PageId page = table.page(pos / page_tokens);
    const int offset = pos % page_tokens;
    const int n = std::min({kMaxRows, page_tokens - offset, n_ctx - pos});
    for (int r = 0; r < n; ++r) {
      rows[r] = static_cast<const float*>(pool.ValueRow(page, layer_idx, offset + r)) + head_offset;
    }
    for (int h = 0; h < query.n_heads; ++h) {
      kern.axpy_rows(scores + int64_t(h) * n_ctx + pos, rows, n, out + h * head_dim, head_dim);
    }
    pos += n;
  }
}

template <typename T>
void AttendGroupTyped(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                      const GroupQuery& query, float* scores, float* out) {
  const AttentionKernels& kern = GetAttentionKernels();
  const int64_t head_offset = int64_t(query.kv_head) * head_dim;
  const int page_tokens = pool.page_tokens();
  const int n_ctx = query.n_ctx;
  float buf[512];  // one converted F16 row; head_dim <= 512 (ModelConfig)
  // scores[h][pos] = (q_h · k_pos) · scale
  ForEachPosition(table, page_tokens, n_ctx, [&](int pos, PageId page, int offset) {
    const float* k =
        HeadRow<T>(pool.KeyRow(page, layer_idx, offset), head_offset, head_dim, kern, buf);
    for (int h = 0; h < query.n_heads; ++h) {
      scores[int64_t(h) * n_ctx + pos] =
          kern.dot(query.q + h * head_dim, k, head_dim) * query.scale;
    }
  });
  for (int h = 0; h < query.n_heads; ++h) Softmax(scores + int64_t(h) * n_ctx, n_ctx);
  std::fill(out, out + int64_t(query.n_heads) * head_dim, 0.0f);
  // out[h] = Σ_pos p[h][pos] · v_pos, in position order
  if constexpr (std::is_same_v<T, float>) {
    AccumulateValuesF32(pool, table, layer_idx, head_dim, query, scores, out);
  } else {
    ForEachPosition(table, page_tokens, n_ctx, [&](int pos, PageId page, int offset) {
      const float* v =
          HeadRow<T>(pool.ValueRow(page, layer_idx, offset), head_offset, head_dim, kern, buf);
      for (int h = 0; h < query.n_heads; ++h) {
        kern.axpy(scores[int64_t(h) * n_ctx + pos], v, out + h * head_dim, head_dim);
      }
    });
  }
}

}  // namespace

void AttendGroup(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                 const GroupQuery& query, float* scores, float* out) {
  SHARDLM_DCHECK(query.n_ctx > 0 && query.n_ctx <= table.capacity_tokens());
  SHARDLM_DCHECK(head_dim <= 512);
  if (pool.config().kv_type == KvType::kF32) {
    AttendGroupTyped<float>(pool, table, layer_idx, head_dim, query, scores, out);
  } else {
    AttendGroupTyped<uint16_t>(pool, table, layer_idx, head_dim, query, scores, out);
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
