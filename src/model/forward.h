// ForwardPass: one stage's forward over a batch that mixes tokens of several sequences.
//
// Per layer (the paper's order): x += Wo·Attn(Rope(Wq·n), Rope(Wk·n), Wv·n) with
// n = RMSNorm(x)·attn_norm; x += Wdown·(SiLU(Wgate·m) ⊙ Wup·m) with m = RMSNorm(x)·ffn_norm.
// Stage 0 embeds token ids; the last stage applies output_norm and the LM head to the rows
// that want logits. Other stages take and give hidden rows [n_tokens][n_embd] (float32).
//
// Determinism: every output element's reduction order depends only on model shapes, never
// on the thread count, the batch composition or chunking. Attention for a token reads its
// sequence's KV page by page in position order and is computed in float32 by one task per
// (tile of tokens, kv head); a token's K/V are bitwise the same whether written in this batch or an
// earlier one, so prefill, chunked prefill and decode agree bitwise on each position.
// Numerics follow llama.cpp's CPU backend (RMSNorm sum in double, rope angles by repeated
// float multiplication, softmax with max subtraction, SiLU as x/(1+e^-x)).
//
// Goals: allocation-free steady state (activations sized once at max_batch_tokens).
// Non-goals: scheduling (which tokens form a batch), sampling, KV eviction.
//
// Thread safety: one thread calls Run at a time; Run uses the ThreadPool internally.
// Lifetime: references the Model, the PagePool and the ThreadPool, which must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "base/status.h"
#include "kv/block_table.h"
#include "kv/page_pool.h"
#include "model/model.h"
#include "tensor/thread_pool.h"

namespace shardlm {

// One token of a batch.
struct BatchEntry {
  int32_t token = 0;     // token id (stage 0 only; ignored when hidden rows are given)
  int32_t position = 0;  // position in its sequence
  int32_t slot = 0;      // index into tables_by_slot
  bool wants_logits = false;
};

class ForwardPass {
 public:
  // max_batch_tokens bounds every batch; all activations are allocated here once.
  ForwardPass(const Model& model, PagePool& pool, ThreadPool& threads, int max_batch_tokens);
  ~ForwardPass();
  ForwardPass(const ForwardPass&) = delete;
  ForwardPass& operator=(const ForwardPass&) = delete;

  int max_batch_tokens() const { return max_batch_tokens_; }

  // Runs the stage over `batch`.
  //  - hidden_in: nullptr on stage 0 (tokens are embedded), else [batch.size()][n_embd].
  //  - out: last stage: logits [n_logit_rows][n_vocab] for the entries with wants_logits,
  //    in batch order; other stages: hidden rows [batch.size()][n_embd].
  //  - tables_by_slot[entry.slot] is the sequence's block table in this stage's pool.
  //    Per slot the batch's positions must be consecutive and increasing, starting at or
  //    before the table's n_tokens (an earlier start rewrites and drops the tail).
  //    Pages are allocated here; on return the table's n_tokens = last position + 1.
  // Errors (nothing is computed): empty or oversized batch, bad slot/token/position, two
  // slots mapping one table, KV pool exhausted (OutOfRange naming the flag to raise),
  // hidden_in missing on a non-first stage, out missing.
  Status Run(std::span<const BatchEntry> batch, std::span<BlockTable* const> tables_by_slot,
             const float* hidden_in, float* out);

 private:
  struct Activations;
  struct Tile {
    int32_t first_entry;  // batch index of the tile's first token
    int32_t n_tokens;
  };
  Status Validate(std::span<const BatchEntry> batch, std::span<BlockTable* const> tables_by_slot,
                  const float* hidden_in, const float* out);
  Status ValidateEntry(const BatchEntry& entry, std::span<BlockTable* const> tables_by_slot,
                       bool has_hidden);
  Status PrepareTables(std::span<const BatchEntry> batch,
                       std::span<BlockTable* const> tables_by_slot);
  void Embed(std::span<const BatchEntry> batch, const float* hidden_in);
  void BuildTiles(std::span<const BatchEntry> batch);
  void Layer(int layer_idx, std::span<const BatchEntry> batch,
             std::span<BlockTable* const> tables_by_slot);
  void Attention(int layer_idx, std::span<const BatchEntry> batch,
                 std::span<BlockTable* const> tables_by_slot);
  void RopeAndStoreKv(int layer_idx, std::span<const BatchEntry> batch,
                      std::span<BlockTable* const> tables_by_slot);
  void Ffn(const LayerWeights& w, int n_tokens);
  void Head(std::span<const BatchEntry> batch, float* logits);

  const Model& model_;
  const ModelConfig& config_;
  PagePool& pool_;
  ThreadPool& threads_;
  int max_batch_tokens_;
  std::unique_ptr<Activations> act_;
};

}  // namespace shardlm
