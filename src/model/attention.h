// Paged attention of the query heads of one GQA group, and the KV write that feeds it.
//
// Goals: causal softmax attention in float32 over a sequence's KV pages, visited in
// position order (logical page 0, 1, ...; inside a page offset 0, 1, ...), so each output
// depends only on the values stored for positions 0..n_ctx-1, never on which batch wrote
// them or how many threads run. Numerics as llama.cpp with -fa off: s_j = (q·k_j)·scale,
// p = softmax(s), out = Σ_j p_j v_j accumulated in position order.
// Non-goals: flash-style online softmax (it would change the rounding vs llama.cpp),
// sliding windows (gemma3, later). Row kernels (dot, axpy) live in attention_kernels.h.
//
// Thread safety: AttendGroup only reads the pool; concurrent calls are fine while no one
// writes the pages it reads. WriteKv writes one position's rows.
#pragma once

#include "kv/block_table.h"
#include "kv/page_pool.h"

namespace shardlm {

// The query heads that share one kv head (GQA group), for one token.
struct GroupQuery {
  const float* q = nullptr;  // [n_heads][head_dim], already normed and roped
  int n_heads = 1;           // query heads in the group (n_head / n_head_kv)
  int kv_head = 0;           // the kv head they read
  int n_ctx = 0;             // attends positions [0, n_ctx)
  float scale = 1.0f;        // 1/sqrt(head_dim)
};

// out [n_heads][head_dim] = attention of each query head over `table`'s KV in layer
// `layer_idx` (stage-local). scores: scratch of at least n_heads × n_ctx floats. Each head's
// result is the same as if it were computed alone (the group only shares K/V reads).
void AttendGroup(const PagePool& pool, const BlockTable& table, int layer_idx, int head_dim,
                 const GroupQuery& query, float* scores, float* out);

// Stores k, v ([n_kv_heads][head_dim] each) at `position` of `table` in layer `layer_idx`.
// The page must be writable (BlockTable::PrepareWrite).
void WriteKv(PagePool& pool, const BlockTable& table, int layer_idx, int position, const float* k,
             const float* v);

}  // namespace shardlm
