// Paged attention: one query head over a sequence's KV pages (see attention.h).
#include "model/attention.h"

#include <algorithm>
#include <type_traits>

#include "base/check.h"
#include "model/ops.h"

namespace shardlm {
namespace {

inline float Load(const float* p, int i) { return p[i]; }
inline float Load(const uint16_t* p, int i) { return HalfToFloat(p[i]); }

// T = element type of the cache (float or IEEE half bits).
template <typename T>
float DotKey(const float* q, const T* k, int n) {
  if constexpr (std::is_same_v<T, float>) {
    return DotF32(q, k, n);
  } else {
    float buf[512];
    SHARDLM_DCHECK(n <= 512);
    for (int i = 0; i < n; ++i) buf[i] = Load(k, i);
    return DotF32(q, buf, n);
  }
}

// Calls fn(position, page, offset) for positions [0, n_ctx) in order, page by page.
template <typename Fn>
void ForEachPosition(const BlockTable& table, int page_tokens, int n_ctx, Fn&& fn) {
  for (int page_idx = 0, pos = 0; pos < n_ctx; ++page_idx) {
    const PageId page = table.page(page_idx);
    const int n = std::min(page_tokens, n_ctx - pos);
    for (int offset = 0; offset < n; ++offset, ++pos) fn(pos, page, offset);
  }
}

template <typename T>
void AttendHeadTyped(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                     const HeadQuery& query, float* scores, float* out) {
  const int64_t head_offset = int64_t(query.kv_head) * head_dim;
  const int page_tokens = pool.page_tokens();
  ForEachPosition(table, page_tokens, query.n_ctx, [&](int pos, PageId page, int offset) {
    const T* k = static_cast<const T*>(pool.KeyRow(page, layer_idx, offset)) + head_offset;
    scores[pos] = DotKey(query.q, k, head_dim) * query.scale;
  });
  Softmax(scores, query.n_ctx);
  std::fill(out, out + head_dim, 0.0f);
  ForEachPosition(table, page_tokens, query.n_ctx, [&](int pos, PageId page, int offset) {
    const T* v = static_cast<const T*>(pool.ValueRow(page, layer_idx, offset)) + head_offset;
    const float p = scores[pos];
    for (int d = 0; d < head_dim; ++d) out[d] += p * Load(v, d);
  });
}

}  // namespace

void AttendHead(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                const HeadQuery& query, float* scores, float* out) {
  SHARDLM_DCHECK(query.n_ctx > 0 && query.n_ctx <= table.capacity_tokens());
  if (pool.config().kv_type == KvType::kF32) {
    AttendHeadTyped<float>(pool, table, layer_idx, head_dim, query, scores, out);
  } else {
    AttendHeadTyped<uint16_t>(pool, table, layer_idx, head_dim, query, scores, out);
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
