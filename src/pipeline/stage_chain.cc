// StageChain (stage_chain.h): stages run in turn on one thread, their pages and states
// concatenated in layer order.
#include "pipeline/stage_chain.h"

#include <utility>

namespace shardlm {

Result<std::unique_ptr<StageChain>> StageChain::Create(std::vector<std::unique_ptr<Stage>> stages,
                                                       int max_batch_tokens, int n_embd) {
  if (stages.empty()) return InvalidArgument("a stage chain needs at least one stage");
  if (max_batch_tokens < 1 || n_embd < 1) {
    return InvalidArgument("a stage chain of {} tokens × {} floats per row", max_batch_tokens,
                           n_embd);
  }
  for (size_t i = 1; i < stages.size(); ++i) {
    const LayerRange before = stages[i - 1]->info().layers;
    const LayerRange next = stages[i]->info().layers;
    if (next.begin != before.end) {
      return InvalidArgument("chained stage {} starts at layer {}, the one before ends at {}", i,
                             next.begin, before.end);
    }
  }
  std::unique_ptr<StageChain> chain(new StageChain());
  const StageInfo& first = stages.front()->info();
  const StageInfo& last = stages.back()->info();
  StageInfo& info = chain->info_;
  info = first;
  info.layers = {first.layers.begin, last.layers.end};
  info.last = last.last;
  info.weight_bytes = info.kv_bytes = info.ring_bytes_per_sequence = 0;
  for (const auto& stage : stages) {
    info.weight_bytes += stage->info().weight_bytes;
    info.kv_bytes += stage->info().kv_bytes;
    info.ring_bytes_per_sequence += stage->info().ring_bytes_per_sequence;
  }
  if (stages.size() > 1) {
    for (auto& rows : chain->hidden_) rows.resize(size_t(max_batch_tokens) * size_t(n_embd));
  }
  chain->stages_ = std::move(stages);
  return chain;
}

Status StageChain::Run(const StageBatch& batch, const float* hidden_in, float* out) {
  for (size_t i = 0; i < stages_.size(); ++i) {
    const float* in = i == 0 ? hidden_in : hidden_[(i - 1) % 2].data();
    float* to = i + 1 == stages_.size() ? out : hidden_[i % 2].data();
    SHARDLM_TRY(stages_[i]->Run(batch, in, to));
  }
  return Status::Ok();
}

Status StageChain::Health() const {
  for (const auto& stage : stages_) SHARDLM_TRY(stage->Health());
  return Status::Ok();
}

Status StageChain::Reconnect() {
  for (const auto& stage : stages_) SHARDLM_TRY(stage->Reconnect());
  return Status::Ok();
}

StageStats StageChain::Stats() const {
  StageStats total = stages_.front()->Stats();
  total.busy_seconds = 0.0;
  for (const auto& stage : stages_) total.busy_seconds += stage->Stats().busy_seconds;
  total.bytes_out = stages_.back()->Stats().bytes_out;
  return total;
}

size_t StageChain::page_bytes() const {
  size_t bytes = 0;
  for (const auto& stage : stages_) bytes += stage->page_bytes();
  return bytes;
}

Status StageChain::TransferPages(std::span<const PageId> pages, uint8_t* dst, const uint8_t* src) {
  const size_t total = page_bytes();
  for (size_t p = 0; p < pages.size(); ++p) {
    size_t offset = p * total;
    for (const auto& stage : stages_) {
      const std::span<const PageId> page = pages.subspan(p, 1);
      SHARDLM_TRY(dst != nullptr ? stage->ExportPages(page, dst + offset)
                                 : stage->ImportPages(page, src + offset));
      offset += stage->page_bytes();
    }
  }
  return Status::Ok();
}

Status StageChain::ExportPages(std::span<const PageId> pages, uint8_t* dst) {
  return TransferPages(pages, dst, nullptr);
}

Status StageChain::ImportPages(std::span<const PageId> pages, const uint8_t* src) {
  return TransferPages(pages, nullptr, src);
}

size_t StageChain::state_bytes() const {
  size_t bytes = 0;
  for (const auto& stage : stages_) bytes += stage->state_bytes();
  return bytes;
}

Status StageChain::ExportState(int32_t slot, int32_t position, uint8_t* dst) {
  return ForEachStageState(stages_, [&](Stage& stage, size_t offset) {
    return stage.ExportState(slot, position, dst + offset);
  });
}

Status StageChain::ImportState(int32_t slot, int32_t position, const uint8_t* src) {
  return ForEachStageState(stages_, [&](Stage& stage, size_t offset) {
    return stage.ImportState(slot, position, src + offset);
  });
}

}  // namespace shardlm
