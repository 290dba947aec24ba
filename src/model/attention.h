// Paged attention of the query heads of one GQA group, and the KV write that feeds it.
//
// Goals: causal softmax attention in float32 over a sequence's KV pages, visited in
// position order (logical page 0, 1, ...; inside a page offset 0, 1, ...), so each output
// depends only on the values stored for positions 0..n_ctx-1, never on which batch wrote
// them or how many threads run. Numerics as llama.cpp with -fa off: s_j = (q·k_j)·scale,
// p = softmax(s), out = Σ_j p_j v_j accumulated in position order.
// A windowed layer's token reads only the last `window` positions (AttentionTile::window).
// Non-goals: flash-style online softmax (it would change the rounding vs llama.cpp), where a
// window's KV lives (a page pool or a ring, kv/window_ring.h). Row kernels (dot, axpy) live in
// attention_kernels.h.
//
// A sequence's pages come as a PageList (logical page index → page id in the stage's pool);
// these functions never allocate, copy or check refcounts: the caller's block table made
// the pages writable and the forward pass validated the ids. Under a bounded KV pool
// (kv/pager.h) a list marks the pages the sequence does not read with kNoPage: attention
// skips them and softmaxes over the positions it reads, still in position order, so with
// every page read it is bitwise what it was.
//
// Thread safety: AttendTile only reads the pool; concurrent calls are fine while no one
// writes the pages it reads. WriteKv writes one position's rows; concurrent calls for
// distinct (page, position) pairs are fine.
#pragma once

#include <cstdint>
#include <span>

#include "kv/page_pool.h"

namespace shardlm {

// Consecutive tokens of one sequence attended together: each K/V row is read once for all of
// them (prefill), instead of once per token. A tile holds at most kMaxTileQueries (token,
// head) pairs: 64 queries keep a run of 64 K/V rows (32 KiB at head_dim 128) in L1 while
// every query uses it, and the tile's scores (64 × context floats) in L2/L3. Measured on
// Zen 4 (synth Qwen3-0.6B, GQA group 2, pp4096): 4 tokens per tile 35 t/s, 16 tokens 84,
// 32 tokens 87. The bound on queries keeps the scores scratch at 256 bytes per position
// per thread whatever the group size.
inline constexpr int kMaxTileQueries = 64;
inline constexpr int kMaxTileTokens = 32;

// Tokens per tile for a GQA group of `gqa_group` query heads: 1..kMaxTileTokens.
inline int TileTokensFor(int gqa_group) {
  const int tokens = kMaxTileQueries / (gqa_group > 0 ? gqa_group : 1);
  return tokens < 1 ? 1 : (tokens > kMaxTileTokens ? kMaxTileTokens : tokens);
}

// A tile: n_tokens consecutive positions of one sequence × the query heads of one GQA group.
// Token i is at position p = first_position + i and attends positions [0, p], or with a
// window W the last W of them, [max(0, p − W + 1), p].
struct AttentionTile {
  const float* q = nullptr;  // token i: q + i·q_stride → [n_heads][head_dim], normed + roped
  int64_t q_stride = 0;
  float* out = nullptr;  // token i: out + i·out_stride → [n_heads][head_dim]
  int64_t out_stride = 0;
  int n_tokens = 1;  // 1..TileTokensFor(n_heads)
  int first_position = 0;
  int n_heads = 1;     // query heads in the group (n_head / n_head_kv)
  int kv_head = 0;     // the kv head they read
  float scale = 1.0f;  // of the scores inside the softmax (1/sqrt(head_dim) for most models)
  int window = 0;      // positions each token sees, its own included (0: every earlier one)
  // Under a bounded pool: the logical pages attention reads, ascending; exactly the entries
  // of `pages` that are not kNoPage (ForwardPass checks it). Empty: every page is read.
  std::span<const int32_t> read_pages;
};

// Floats of scratch AttendTile needs for tiles of up to `max_queries` (token, head) pairs over
// up to `max_ctx` positions: the scores, then one run of K or V rows converted to F32 (caches of
// F16 and the block types).
size_t AttendTileScratch(int max_queries, size_t max_ctx, int head_dim);

// Attention of every (token, head) of `tile` over the KV of `pages` in layer `layer_idx`
// (stage-local), positions [0, first_position + n_tokens). `pages` must cover those
// positions and hold valid KV for them. scratch: AttendTileScratch(n_tokens × n_heads,
// first_position + n_tokens, head_dim) floats or more. Each (token, head) result is
// bitwise what it would be alone: tiling only shares reads.
void AttendTile(const PagePool& pool, PageList pages, int layer_idx, int head_dim,
                const AttentionTile& tile, float* scratch);

// Stores k, v ([n_kv_heads][head_dim] each, the layer's shape in the pool) at `position` of
// `pages` in layer `layer_idx`.
// The page must be private to the writer (BlockTable::PrepareWrite, copies applied).
void WriteKv(PagePool& pool, PageList pages, int layer_idx, int position, const float* k,
             const float* v);

}  // namespace shardlm
