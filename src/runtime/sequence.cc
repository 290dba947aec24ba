// Sequence implementation: pool sizing, chunked prefill, single-token decode.
#include "runtime/sequence.h"

#include <algorithm>

namespace shardlm {

Sequence::Sequence(const Model& model, const SequenceConfig& config)
    : model_(model), config_(config) {}

Sequence::~Sequence() {
  // The table releases its pages into the allocator, so it goes first.
  forward_.reset();
  table_.reset();
  pool_.reset();
  allocator_.reset();
}

Result<std::unique_ptr<Sequence>> Sequence::Create(const Model& model, ThreadPool& threads,
                                                   const SequenceConfig& config) {
  if (!model.is_first_stage() || !model.is_last_stage()) {
    return InvalidArgument("a Sequence needs every layer of the model, got layers [{}, {})",
                           model.layers().begin, model.layers().end);
  }
  if (config.n_positions <= 0 || config.max_batch <= 0 || config.page_tokens <= 0) {
    return InvalidArgument("bad sequence sizes: n_positions {}, max_batch {}, page_tokens {}",
                           config.n_positions, config.max_batch, config.page_tokens);
  }
  std::unique_ptr<Sequence> seq(new Sequence(model, config));
  const int n_pages = (config.n_positions + config.page_tokens - 1) / config.page_tokens;
  SHARDLM_ASSIGN_OR_RETURN(seq->allocator_, PageAllocator::Create(n_pages, config.page_tokens));
  SHARDLM_ASSIGN_OR_RETURN(seq->pool_, PagePool::Create(model.KvPoolConfig(
                                           n_pages, config.page_tokens, config.kv_type)));
  seq->table_ = std::make_unique<BlockTable>(seq->allocator_.get());
  seq->forward_ = std::make_unique<ForwardPass>(model, *seq->pool_, threads, config.max_batch);
  seq->batch_.reserve(config.max_batch);
  seq->logits_.resize(model.config().n_vocab);
  return seq;
}

size_t Sequence::kv_bytes() const { return pool_->page_bytes() * size_t(pool_->n_pages()); }

Status Sequence::RunBatch(std::span<const TokenId> ids, bool last_wants_logits) {
  const int start = table_->n_tokens();
  if (start + int(ids.size()) > config_.n_positions) {
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
  const int end = start + int(ids.size());
  copies_.clear();
  SHARDLM_TRY(table_->PrepareWrite(start, end, &copies_));
  for (const PageCopy& copy : copies_) pool_->CopyPage(copy.src, copy.dst);
  const PageList pages[] = {table_->page_list()};
  SHARDLM_TRY(forward_->Run(batch_, pages, /*hidden_in=*/nullptr, logits_.data()));
  table_->SetTokens(end);
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
