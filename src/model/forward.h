// ForwardPass: one stage's forward over a batch that mixes tokens of several sequences.
//
// Per layer (the paper's order): x += Wo·Attn(Rope(Wq·n), Rope(Wk·n), Wv·n) with
// n = RMSNorm(x)·attn_norm; x += Wdown·(SiLU(Wgate·m) ⊙ Wup·m) with m = RMSNorm(x)·ffn_norm.
// A recurrent layer (qwen35's gated DeltaNet, model/delta_net.h) mixes positions through its
// slot's state (kv/recurrent_state.h) instead of attention: a sequence starts at position 0
// (the state is reset) or continues exactly where its slot's state is, and the state at each
// sequence's last page boundary is kept as a checkpoint (ExportState / ImportState).
// Stage 0 embeds token ids; the last stage applies output_norm and the LM head to the rows
// that want logits, and output_norm alone to the rows that want their embedding (the final
// hidden state a pooled embedding is made of). Other stages take and give hidden rows
// [n_tokens][n_embd] (float32).
//
// Determinism: every output element's reduction order depends only on model shapes, never
// on the thread count, the batch composition or chunking. Attention for a token reads its
// sequence's KV page by page in position order and is computed in float32 by one task per
// (tile of tokens, kv head); a token's K/V are bitwise the same whether written in this batch or an
// earlier one, so prefill, chunked prefill and decode agree bitwise on each position.
// Numerics follow llama.cpp's CPU backend (RMSNorm sum in double, rope angles by repeated
// float multiplication, softmax with max subtraction, SiLU as x/(1+e^-x)).
//
// Windowed layers under WindowKv::kRing keep their KV in per-slot rings the forward pass owns
// (kv/window_ring.h): like a recurrent state, a slot's ring continues only its own sequence.
// KV: the forward pass reads and writes the stage's PagePool through the page lists it is
// given and never allocates, frees or copies pages. The caller (the scheduler, a
// stage) keeps the block tables: before a batch it makes the written positions private
// (BlockTable::PrepareWrite) and applies the returned copies to every stage's pool; after
// it, it records the new lengths (BlockTable::SetTokens). The same page lists serve every
// stage of a pipeline.
//
// Goals: allocation-free steady state (activations sized once at max_batch_tokens).
// Non-goals: scheduling (which tokens form a batch), page allocation and copy-on-write
// (kv/block_table.h), sampling, which pages
// stay resident in a bounded pool (kv/pager.h: the page lists say which are read).
//
// Thread safety: one thread calls Run at a time; Run uses the ThreadPool internally.
// Lifetime: references the Model, the PagePool and the ThreadPool, which must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "base/status.h"
#include "kv/batch.h"
#include "kv/key_summaries.h"
#include "kv/page_pool.h"
#include "model/model.h"
#include "tensor/thread_pool.h"

namespace shardlm {

// What a stage with a bounded KV pool adds to a batch (kv/pager.h): its page lists are
// frames, kNoPage for the pages a sequence does not read; these name the logical pages.
struct PooledKv {
  KeySummaries* summaries = nullptr;  // null: no `qk` selection (no summaries, no scores)
  // [slot] → the logical page ids behind pages_by_slot (same length).
  std::span<const PageList> ids_by_slot;
  // Scores of the entries with score_pages, in batch order, ids_by_slot[slot].size() floats
  // each: the stage raises each to its own score where higher (a maximum over stages).
  std::span<float> page_scores;
  // [slot] → the logical pages attention reads, ascending (empty: every page).
  std::span<const std::span<const int32_t>> attended_by_slot;
};

class ForwardPass {
 public:
  // max_batch_tokens bounds every batch; all activations are allocated here once.
  // max_sequence_pages (0: no bound): the most pages one sequence may have, which bounds a
  // window ring (a ring never needs more pages than its sequence can fill).
  ForwardPass(const Model& model, PagePool& pool, ThreadPool& threads, int max_batch_tokens,
              int max_sequence_pages = 0);
  ~ForwardPass();
  ForwardPass(const ForwardPass&) = delete;
  ForwardPass& operator=(const ForwardPass&) = delete;

  int max_batch_tokens() const { return max_batch_tokens_; }

  // Runs the stage over `batch`.
  //  - pages_by_slot[entry.slot]: the sequence's pages in this stage's pool (logical page
  //    index → page id). An entry at position p writes K/V of p into its page and attends
  //    positions [0, p]: the caller guarantees that [0, p) hold valid KV (written by this
  //    batch or an earlier one) and that the written pages are private to the slot (two
  //    slots of one batch never write the same page; see BlockTable::PrepareWrite).
  //    Slots no entry names may have empty lists.
  //  - Per slot the batch's positions must be consecutive and increasing.
  //  - hidden_in: nullptr on stage 0 (tokens are embedded), else [batch.size()][n_embd].
  //  - out: last stage: logits [n_logit_rows][n_vocab] for the entries with wants_logits,
  //    in batch order, then at once (at out + n_logit_rows × n_vocab) embedding rows
  //    [n_embedding_rows][n_embd] for the entries with wants_embedding, in batch order;
  //    other stages: hidden rows [batch.size()][n_embd].
  // Errors (InvalidArgument; nothing is computed, no page is touched): empty or oversized
  // batch; slot out of range or with an empty page list; token id outside the vocabulary
  // (stage 0); positions of a slot not consecutive; a position at or past its list's
  // pages (pages.size() × page_tokens) or past the pool's capacity (OutOfRange); a page id
  // outside [0, pool n_pages); hidden_in missing on a non-first stage; out missing.
  Status Run(std::span<const BatchEntry> batch, std::span<const PageList> pages_by_slot,
             const float* hidden_in, float* out);
  // The same over a bounded pool: pages_by_slot are frames, kNoPage where a sequence does not
  // read a page (attention skips it; a written position's page must be read). With
  // pooled.summaries the written keys enter their page's summary and entries with
  // score_pages score their sequence's pages. Errors as Run, and InvalidArgument when the
  // scores do not fit pooled.page_scores.
  Status RunPooled(std::span<const BatchEntry> batch, std::span<const PageList> pages_by_slot,
                   const PooledKv& pooled, const float* hidden_in, float* out);

  // A sequence's state in this stage: its recurrent layers' (kv/recurrent_state.h), then its
  // windowed layers' last positions under WindowKv::kRing (kv/window_ring.h). The bytes of one
  // slot's state (0 when the stage keeps none); the slot's state at page boundary `position`
  // into dst (the live recurrent state or its last page-boundary checkpoint; NotFound when the
  // slot no longer holds it); and a state at `position` into the slot, which its next batch
  // continues. Between batches.
  size_t state_bytes() const;
  Status ExportState(int slot, int32_t position, std::span<uint8_t> dst) const;
  Status ImportState(int slot, int32_t position, std::span<const uint8_t> src);

 private:
  struct Activations;
  struct Tile {
    int32_t first_entry;  // batch index of the tile's first token
    int32_t n_tokens;
  };
  Status Validate(std::span<const BatchEntry> batch, std::span<const PageList> pages_by_slot,
                  const float* hidden_in, const float* out);
  Status ValidateEntry(const BatchEntry& entry, std::span<const PageList> pages_by_slot,
                       bool has_hidden);
  Status ValidatePages(int slot, PageList pages) const;
  void Embed(std::span<const BatchEntry> batch, const float* hidden_in);
  void BuildTiles(std::span<const BatchEntry> batch);
  void Layer(int layer_idx, std::span<const BatchEntry> batch,
             std::span<const PageList> pages_by_slot);
  void AttentionSublayer(int layer_idx, std::span<const BatchEntry> batch,
                         std::span<const PageList> pages_by_slot);
  void SplitQueryGate(const LayerConfig& layer, int n_tokens);
  void Attention(int layer_idx, std::span<const BatchEntry> batch,
                 std::span<const PageList> pages_by_slot);
  void RopeAndStoreKv(int layer_idx, std::span<const BatchEntry> batch,
                      std::span<const PageList> pages_by_slot);
  void Ffn(const LayerWeights& w, int n_tokens);
  void AddToResidual(size_t t, const NormWeight& post_norm);
  // Bounded pool with summaries: the layer's written keys into their summaries, and the
  // scoring entries' page scores (one task per kv head).
  Status PrepareScores(std::span<const BatchEntry> batch, std::span<const PageList> pages_by_slot);
  Status RunLayers(std::span<const BatchEntry> batch, std::span<const PageList> pages_by_slot,
                   const float* hidden_in, float* out);
  void SummarizeAndScore(int layer_idx, std::span<const BatchEntry> batch,
                         std::span<const PageList> pages_by_slot);
  void FinishScores(std::span<const BatchEntry> batch);
  // The config of stage-local layer layer_idx.
  const LayerConfig& LayerConfigOf(int layer_idx) const {
    return config_.layers[size_t(model_.layers().begin + layer_idx)];
  }
  void Head(std::span<const BatchEntry> batch, float* out);

  const PooledKv* pooled_ = nullptr;  // during RunPooled
  const Model& model_;
  const ModelConfig& config_;
  PagePool& pool_;
  ThreadPool& threads_;
  int max_batch_tokens_;
  std::unique_ptr<Activations> act_;
};

}  // namespace shardlm
