// Sequence implementation: pipeline sizing, chunked prefill, single-token decode.
#include "engine/sequence.h"

#include <algorithm>

namespace shardlm {

Sequence::Sequence(const SequenceConfig& config) : config_(config) {}

Sequence::~Sequence() {
  // The table releases its pages into the pipeline's allocator, so it goes first.
  table_.reset();
  pipeline_.reset();
}

Result<std::unique_ptr<Sequence>> Sequence::Create(const Model& model,
                                                   const SequenceConfig& config) {
  if (!model.is_first_stage() || !model.is_last_stage()) {
    return InvalidArgument("a Sequence needs every layer of the model, got layers [{}, {})",
                           model.layers().begin, model.layers().end);
  }
  if (config.n_positions <= 0 || config.max_batch <= 0 || config.page_tokens <= 0) {
    return InvalidArgument("bad sequence sizes: n_positions {}, max_batch {}, page_tokens {}",
                           config.n_positions, config.max_batch, config.page_tokens);
  }
  std::unique_ptr<Sequence> seq(new Sequence(config));
  PipelineOptions options;
  options.placement = config.placement;
  options.threads = config.threads;
  options.n_pages = (config.n_positions + config.page_tokens - 1) / config.page_tokens;
  options.page_tokens = config.page_tokens;
  options.kv_type = config.kv_type;
  options.max_batch_tokens = config.max_batch;
  options.max_logit_rows = 1;
  SHARDLM_ASSIGN_OR_RETURN(seq->pipeline_, Pipeline::Create(model, options));
  seq->table_ = std::make_unique<BlockTable>(&seq->pipeline_->allocator());
  seq->batch_.reserve(config.max_batch);
  seq->logits_.resize(model.config().n_vocab);
  return seq;
}

size_t Sequence::kv_bytes() const {
  size_t bytes = 0;
  for (const StageInfo& stage : pipeline_->placement()) bytes += stage.kv_bytes;
  return bytes;
}

Status Sequence::RunBatch(std::span<const TokenId> ids, bool last_wants_logits) {
  const int start = table_->n_tokens();
  const int end = start + int(ids.size());
  if (end > config_.n_positions) {
    return OutOfRange(
        "sequence of {} positions cannot take {} more tokens at position {} "
        "(raise the context size, -c)",
        config_.n_positions, ids.size(), start);
  }
  batch_.clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    batch_.push_back({ids[i], start + int(i), /*slot=*/0, false});
  }
  batch_.back().wants_logits = last_wants_logits;
  copies_.clear();
  SHARDLM_TRY(table_->PrepareWrite(start, end, &copies_));
  table_->SetTokens(end);
  const PageList pages[] = {table_->pages()};
  SHARDLM_TRY(pipeline_->Submit({batch_, pages, copies_}));
  SHARDLM_ASSIGN_OR_RETURN(std::span<const float> rows, pipeline_->WaitOldest());
  if (last_wants_logits) std::copy(rows.begin(), rows.end(), logits_.begin());
  return Status::Ok();
}

Status Sequence::Prefill(std::span<const TokenId> ids,
                         const std::function<void(int done, int total)>& progress) {
  if (ids.empty()) return InvalidArgument("cannot prefill an empty prompt");
  const int total = int(ids.size());
  for (int done = 0; done < total;) {
    const int n = std::min(config_.max_batch, total - done);
    SHARDLM_TRY(RunBatch(ids.subspan(done, n), /*last_wants_logits=*/done + n == total));
    done += n;
    if (progress) progress(done, total);
  }
  return Status::Ok();
}

Status Sequence::Decode(TokenId id, bool want_logits) {
  const TokenId ids[] = {id};
  return RunBatch(ids, want_logits);
}

}  // namespace shardlm
