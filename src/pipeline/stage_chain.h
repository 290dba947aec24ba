// StageChain: consecutive stages computed one after another by the calling thread, seen as
// one stage over their joint layer range.
//
// Why: a prefill worker lays its pages over the decode side's page memory, and a split decode
// side keeps each stage's pages in its own region, laid out over that stage's layers only
// (kv/page_pool.h). The worker computes every layer, so it is one LocalStage per decode stage,
// each over its region, chained (shard/shard_service.cc builds it from a Hello's shared_kv).
//
// A page of the chain is its stages' parts in layer order (page_bytes() is their sum), and so
// is a slot's state: the same bytes a pipeline of those stages exports (pipeline.h), so a
// state moves between the chain and a split pipeline unchanged.
//
// Goals: the same hidden rows and logits as the stages in a pipeline (the rows between them
// are passed unchanged). Non-goals: overlapping the stages (one thread runs them in turn).
//
// Thread safety: as Stage (stage.h); Run and the page and state transfers run one at a time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "pipeline/stage.h"

namespace shardlm {

class StageChain final : public Stage {
 public:
  // stages: at least one, each starting at the layer where the one before ends; the rows
  // between them are [max_batch_tokens][n_embd] floats. InvalidArgument otherwise.
  static Result<std::unique_ptr<StageChain>> Create(std::vector<std::unique_ptr<Stage>> stages,
                                                    int max_batch_tokens, int n_embd);

  const StageInfo& info() const override { return info_; }
  // Runs every stage over the batch in turn (each applies the batch's copies to its pages).
  Status Run(const StageBatch& batch, const float* hidden_in, float* out) override;
  Status Health() const override;
  Status Reconnect() override;
  // The first stage's batches and tokens (each stage runs every batch), every stage's busy
  // time, the rows coming in to the first and out of the last.
  StageStats Stats() const override;
  size_t page_bytes() const override;
  Status ExportPages(std::span<const PageId> pages, uint8_t* dst) override;
  Status ImportPages(std::span<const PageId> pages, const uint8_t* src) override;
  size_t state_bytes() const override;
  Status ExportState(int32_t slot, int32_t position, uint8_t* dst) override;
  Status ImportState(int32_t slot, int32_t position, const uint8_t* src) override;

 private:
  StageChain() = default;
  // Moves each page's parts through the stages in order: exported into dst, or imported
  // from src.
  Status TransferPages(std::span<const PageId> pages, uint8_t* dst, const uint8_t* src);

  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<float> hidden_[2];  // the rows between stage i and i + 1: hidden_[i % 2]
  StageInfo info_;
};

}  // namespace shardlm
