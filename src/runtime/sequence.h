// Sequence: one sequence's KV (a private page allocator, page pool and block table) plus
// the forward pass that fills it, for a whole (single-stage) model — what `run` and `bench`
// drive.
//
// Before each batch the sequence makes the positions it writes private in its block table
// (BlockTable::PrepareWrite) and applies the resulting page copies to its pool; the
// forward pass then reads and writes the table's page list; after a successful batch the
// table records the new length (SetTokens). A failed batch leaves n_tokens() unchanged.
//
// Goals: prefill a prompt in chunks of at most max_batch tokens with logits for the last
// position only; decode one token at a given position; expose the last logits row.
// Memory: the pool holds exactly ceil(n_positions / page_tokens) pages, allocated up front.
// Non-goals: several sequences or stages (the scheduler and pipeline), sampling.
//
// Thread safety: one thread at a time. Lifetime: references the Model and the ThreadPool,
// which must outlive it; owns its allocator, pool, table and forward pass.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "kv/page_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "tensor/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct SequenceConfig {
  int n_positions = 0;  // KV capacity in positions
  int max_batch = 512;  // most tokens per forward pass
  KvType kv_type = KvType::kF32;
  int page_tokens = kDefaultPageTokens;
};

class Sequence {
 public:
  // The model must hold every layer. Errors: a split model, bad sizes, allocation limits.
  static Result<std::unique_ptr<Sequence>> Create(const Model& model, ThreadPool& threads,
                                                  const SequenceConfig& config);
  ~Sequence();

  int n_tokens() const { return table_->n_tokens(); }
  int n_positions() const { return config_.n_positions; }
  size_t kv_bytes() const;  // the pool's memory
  // logits[n_vocab] of the last position that wanted them.
  std::span<const float> logits() const { return logits_; }

  // Appends ids at positions n_tokens().. in chunks of max_batch; logits of the last one.
  // progress(done, total) is called after each chunk when set.
  Status Prefill(std::span<const TokenId> ids,
                 const std::function<void(int done, int total)>& progress = {});
  // Appends one token at position n_tokens(); its logits when want_logits.
  Status Decode(TokenId id, bool want_logits = true);
  // Forgets every position (pages return to the pool).
  void Reset() { table_->Clear(); }

 private:
  Sequence(const Model& model, const SequenceConfig& config);
  Status RunBatch(std::span<const TokenId> ids, bool last_wants_logits);

  const Model& model_;
  SequenceConfig config_;
  std::unique_ptr<PageAllocator> allocator_;
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<BlockTable> table_;
  std::unique_ptr<ForwardPass> forward_;
  std::vector<BatchEntry> batch_;  // [max_batch], reused
  std::vector<PageCopy> copies_;   // copy-on-write of the current batch, reused
  std::vector<float> logits_;      // [n_vocab]
};

}  // namespace shardlm
