// Sequence: one sequence's KV (a block table over a pipeline sized for it) and the
// pipeline that fills it — what `run` and `bench` drive, split or not.
//
// Goals: prefill a prompt in chunks of at most max_batch tokens with logits for the last
// position only; decode one token at a given position; expose the last logits row; the
// same logits whatever the placement (devices, layer split).
// Memory: every stage holds exactly ceil(n_positions / page_tokens) pages, allocated up
// front.
// Non-goals: several sequences (the scheduler), sampling, pipelining (one sequence has one
// batch in flight at a time).
//
// Thread safety: one thread at a time. Lifetime: references the Model, which must outlive
// it (a one-stage local pipeline borrows it); owns its pipeline and block table.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/block_table.h"
#include "kv/page_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "pipeline/pipeline.h"
#include "pipeline/placement.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct SequenceConfig {
  int n_positions = 0;  // KV capacity in positions
  int max_batch = 512;  // most tokens per forward pass
  KvType kv_type = KvType::kF32;
  int page_tokens = kDefaultPageTokens;
  int threads = 0;  // threads of an unpinned "cpu" stage; 0: every core
  PlacementOptions placement = {};
};

class Sequence {
 public:
  // The model must hold every layer. Errors: a split model binding, bad sizes, placement,
  // stage load or connect, allocation limits.
  static Result<std::unique_ptr<Sequence>> Create(const Model& model, const SequenceConfig& config);
  ~Sequence();

  int n_tokens() const { return table_->n_tokens(); }
  int n_positions() const { return config_.n_positions; }
  size_t kv_bytes() const;  // every stage's page storage
  const Pipeline& pipeline() const { return *pipeline_; }
  // logits[n_vocab] of the last position that wanted them.
  std::span<const float> logits() const { return logits_; }

  // Appends ids at positions n_tokens().. in chunks of max_batch; logits of the last one.
  // progress(done, total) is called after each chunk when set.
  Status Prefill(std::span<const TokenId> ids,
                 const std::function<void(int done, int total)>& progress = {});
  // Appends one token at position n_tokens(); its logits when want_logits.
  Status Decode(TokenId id, bool want_logits = true);
  // Forgets every position (pages return to the allocator).
  void Reset() { table_->Clear(); }

 private:
  explicit Sequence(const SequenceConfig& config);
  Status RunBatch(std::span<const TokenId> ids, bool last_wants_logits);

  SequenceConfig config_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<BlockTable> table_;
  std::vector<BatchEntry> batch_;  // [max_batch], reused
  std::vector<PageCopy> copies_;   // copy-on-write copies of the batch being run
  std::vector<float> logits_;      // [n_vocab]
};

}  // namespace shardlm
