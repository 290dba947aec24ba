// Pipeline implementation: batch copies, the per-stage worker threads and their FIFO
// queues, failure propagation and stats (see pipeline.h).
#include "pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <utility>

#include "base/elapsed.h"
#include "base/thread_name.h"
#include "pipeline/stage_factory.h"

namespace shardlm {

// One batch in flight, and the buffers it owns while in flight.
struct Pipeline::Job {
  std::vector<BatchEntry> entries;
  std::vector<PageId> page_ids;         // every slot's pages, concatenated
  std::vector<PageList> pages_by_slot;  // [slot] → a span of page_ids
  std::vector<PageCopy> copies;
  // Bounded KV pool: the moves, each slot's attended pages and the scoring entries' scores.
  PagingOps paging;
  bool has_paging = false;
  std::vector<int32_t> attended_ids;            // every slot's attended pages, concatenated
  std::vector<AttendedPages> attended_by_slot;  // [slot] → a span of attended_ids
  std::vector<float> page_scores;
  PagingLoss loss;  // filled by the stages in order
  bool apply_only = false;
  std::vector<PageId> frame_ids;         // a prefill worker's frame lists, concatenated
  std::vector<PageList> frames_by_slot;  // [slot] → a span of frame_ids
  std::vector<float> hidden[2];          // [max_batch_tokens][n_embd] each; stage i reads i % 2
  // [max_logit_rows][n_vocab] then [max_embedding_rows][n_embd]; a batch's embedding rows
  // follow its own logits rows (ForwardPass::Run's output).
  std::vector<float> outputs;
  BatchOutputRows rows;
  uint64_t seq = 0;
  Status status;
  bool done = false;

  StageBatch view() {
    StageBatch batch{entries, pages_by_slot, copies};
    batch.paging = has_paging ? &paging : nullptr;
    batch.attended_by_slot = attended_by_slot;
    batch.page_scores = page_scores;
    batch.loss = has_paging ? &loss : nullptr;
    batch.apply_only = apply_only;
    batch.frames_by_slot = frames_by_slot;
    return batch;
  }
};

namespace {

// Copies lists into one vector and spans over it (taken once the vector stopped growing).
template <typename T>
void Flatten(std::span<const std::span<const T>> lists, std::vector<T>& flat,
             std::vector<std::span<const T>>& spans) {
  flat.clear();
  for (std::span<const T> list : lists) flat.insert(flat.end(), list.begin(), list.end());
  spans.clear();
  size_t offset = 0;
  for (std::span<const T> list : lists) {
    spans.emplace_back(flat.data() + offset, list.size());
    offset += list.size();
  }
}

}  // namespace

Pipeline::Pipeline(std::vector<std::unique_ptr<Stage>> stages, const ModelConfig& config,
                   const PipelineOptions& options)
    : config_(config),
      stages_(std::move(stages)),
      max_batch_tokens_(options.kv.max_batch_tokens),
      max_logit_rows_(options.max_logit_rows),
      max_embedding_rows_(options.max_embedding_rows),
      stage_cv_(stages_.size()),
      queues_(stages_.size()),
      stats_(stages_.size()) {}

Result<std::unique_ptr<Pipeline>> Pipeline::Create(const Model& model,
                                                   const PipelineOptions& options) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Stage>> stages, BuildStages(model, options));
  return FromStages(std::move(stages), model.config(), options);
}

Result<std::unique_ptr<Pipeline>> Pipeline::FromStages(std::vector<std::unique_ptr<Stage>> stages,
                                                       const ModelConfig& config,
                                                       const PipelineOptions& options) {
  if (stages.empty()) return InvalidArgument("a pipeline needs at least one stage");
  if (options.kv.max_batch_tokens < 1 || options.max_logit_rows < 1 ||
      options.max_embedding_rows < 0) {
    return InvalidArgument(
        "bad pipeline sizes: max batch tokens {} (>= 1), logits rows {} (>= 1), embedding rows "
        "{} (>= 0)",
        options.kv.max_batch_tokens, options.max_logit_rows, options.max_embedding_rows);
  }
  int next_layer = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const StageInfo& info = stages[i]->info();
    if (info.layers.begin != next_layer || info.layers.end <= info.layers.begin ||
        info.first != (i == 0) || info.last != (i + 1 == stages.size())) {
      return InvalidArgument(
          "stage {} ({}) computes layers [{}, {}) (first {}, last {}): stages must chain "
          "from layer 0, the first embedding and the last giving logits",
          i, info.device, info.layers.begin, info.layers.end, info.first, info.last);
    }
    next_layer = info.layers.end;
  }
  if (next_layer != config.n_layers) {
    return InvalidArgument("the stages cover layers [0, {}) but the model has {}", next_layer,
                           config.n_layers);
  }
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<PageAllocator> allocator,
                           PageAllocator::Create(options.kv.n_pages, options.kv.page_tokens));
  std::unique_ptr<Pipeline> pipeline(new Pipeline(std::move(stages), config, options));
  pipeline->allocator_ = std::move(allocator);
  pipeline->asynchronous_ = options.asynchronous;
  const size_t hidden_floats = size_t(options.kv.max_batch_tokens) * size_t(config.n_embd);
  for (int k = 0; k < pipeline->depth(); ++k) {
    auto job = std::make_unique<Job>();
    job->entries.reserve(options.kv.max_batch_tokens);
    if (pipeline->n_stages() > 1) {
      job->hidden[0].resize(hidden_floats);
      job->hidden[1].resize(hidden_floats);
    }
    job->outputs.resize(size_t(options.max_logit_rows) * size_t(config.n_vocab) +
                        size_t(options.max_embedding_rows) * size_t(config.n_embd));
    pipeline->free_jobs_.push_back(job.get());
    pipeline->jobs_.push_back(std::move(job));
  }
  if (pipeline->threaded()) {
    for (int i = 0; i < pipeline->n_stages(); ++i) {
      pipeline->workers_.emplace_back(&Pipeline::Worker, pipeline.get(), i);
    }
  }
  return pipeline;
}

Pipeline::~Pipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  for (std::condition_variable& cv : stage_cv_) cv.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

std::vector<StageInfo> Pipeline::placement() const {
  std::vector<StageInfo> infos;
  for (const auto& stage : stages_) infos.push_back(stage->info());
  return infos;
}

int Pipeline::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int(in_flight_.size());
}

bool Pipeline::OldestDone() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !in_flight_.empty() && in_flight_.front()->done;
}

std::vector<const ShmRegion*> Pipeline::SharedKv() const {
  std::vector<const ShmRegion*> regions;
  for (const auto& stage : stages_) regions.push_back(stage->shared_kv());
  return regions;
}

Status Pipeline::ValidateBatch(const PipelineBatch& batch) const {
  if (batch.entries.empty()) return InvalidArgument("a pipeline batch needs at least one entry");
  if (int(batch.entries.size()) > max_batch_tokens_) {
    return InvalidArgument("a batch of {} entries exceeds the pipeline's {} tokens per batch",
                           batch.entries.size(), max_batch_tokens_);
  }
  const BatchOutputRows rows = CountOutputRows(batch.entries, batch.apply_only);
  if (rows.logits > max_logit_rows_) {
    return InvalidArgument("a batch wants {} logits rows but the pipeline holds {}", rows.logits,
                           max_logit_rows_);
  }
  if (rows.embeddings > max_embedding_rows_) {
    return InvalidArgument("a batch wants {} embedding rows but the pipeline holds {}",
                           rows.embeddings, max_embedding_rows_);
  }
  for (const BatchEntry& e : batch.entries) {
    if (e.score_pages && (e.slot < 0 || size_t(e.slot) >= batch.pages_by_slot.size())) {
      return InvalidArgument("a scoring entry names slot {} without pages", e.slot);
    }
  }
  return Status::Ok();
}

Status Pipeline::CheckAccepting() const {
  if (!failure_.ok()) return failure_;
  for (const auto& stage : stages_) SHARDLM_TRY(stage->Health());
  if (free_jobs_.empty()) {
    return Status(StatusCode::kInternal,
                  fmt::format("the pipeline has {} batches in flight (its depth): collect one "
                              "with WaitOldest before submitting",
                              in_flight_.size()));
  }
  return Status::Ok();
}

void Pipeline::CopyIn(const PipelineBatch& batch, Job& job) const {
  job.entries.assign(batch.entries.begin(), batch.entries.end());
  job.copies.assign(batch.copies.begin(), batch.copies.end());
  Flatten(batch.pages_by_slot, job.page_ids, job.pages_by_slot);
  job.has_paging = batch.paging != nullptr;
  if (job.has_paging) job.paging = *batch.paging;
  Flatten(batch.attended_by_slot, job.attended_ids, job.attended_by_slot);
  Flatten(batch.frames_by_slot, job.frame_ids, job.frames_by_slot);
  job.apply_only = batch.apply_only;
  // Scores start at -infinity; each stage raises them (a maximum over stages).
  size_t n_scores = 0;
  for (const BatchEntry& e : batch.entries) {
    if (e.score_pages) n_scores += batch.pages_by_slot[e.slot].size();
  }
  job.page_scores.assign(n_scores, -std::numeric_limits<float>::infinity());
  job.loss.clear();
  job.rows = CountOutputRows(batch.entries, batch.apply_only);
  job.status = Status::Ok();
  job.done = false;
}

Status Pipeline::Submit(const PipelineBatch& batch) {
  SHARDLM_TRY(ValidateBatch(batch));
  Job* job = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReleaseCollected();
    SHARDLM_TRY(CheckAccepting());
    job = free_jobs_.back();
    free_jobs_.pop_back();
  }
  CopyIn(batch, *job);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job->seq = next_seq_++;
    in_flight_.push_back(job);
    counters_.batches++;
    counters_.tokens += job->apply_only ? 0 : job->entries.size();
    counters_.max_in_flight = std::max(counters_.max_in_flight, int(in_flight_.size()));
    if (threaded()) {
      queues_[0].push_back(job);
      stage_cv_[0].notify_one();
      return Status::Ok();
    }
  }
  // One stage: compute on the caller's thread.
  RunStage(0, *job);
  std::lock_guard<std::mutex> lock(mu_);
  if (!job->status.ok()) FailJob(*job, job->status);
  job->done = true;
  return Status::Ok();
}

void Pipeline::RunStage(int stage_idx, Job& job) {
  Stage& stage = *stages_[stage_idx];
  const bool first = stage_idx == 0;
  const bool last = stage_idx + 1 == n_stages();
  const float* hidden_in = first ? nullptr : job.hidden[stage_idx % 2].data();
  float* out = last ? job.outputs.data() : job.hidden[(stage_idx + 1) % 2].data();
  const auto start = std::chrono::steady_clock::now();
  job.status = stage.Run(job.view(), hidden_in, out);
  const double seconds = SecondsSince(start);

  const uint64_t row_bytes = uint64_t(config_.n_embd) * sizeof(float);
  std::lock_guard<std::mutex> lock(mu_);
  StageStats& stats = stats_[stage_idx];
  stats.busy_seconds += seconds;
  if (!job.status.ok() || job.apply_only) return;
  stats.batches++;
  stats.tokens += job.entries.size();
  if (!first) stats.bytes_in += row_bytes * job.entries.size();
  if (last) {
    stats.bytes_out += (uint64_t(job.rows.logits) * uint64_t(config_.n_vocab) +
                        uint64_t(job.rows.embeddings) * uint64_t(config_.n_embd)) *
                       sizeof(float);
  } else {
    stats.bytes_out += row_bytes * job.entries.size();
    counters_.bytes_between += row_bytes * job.entries.size();
  }
}

void Pipeline::FailJob(Job& job, Status status) {
  if (failure_.ok()) {
    failure_ = status;
    failed_seq_ = job.seq;
  }
  job.status = std::move(status);
  counters_.failed_batches++;
}

void Pipeline::Worker(int stage_idx) {
  SetThreadName("stage-" + std::to_string(stage_idx));
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    stage_cv_[stage_idx].wait(lock, [&] { return stopping_ || !queues_[stage_idx].empty(); });
    if (stopping_) return;
    Job* job = queues_[stage_idx].front();
    queues_[stage_idx].pop_front();
    if (!failure_.ok() && job->seq >= failed_seq_) {
      FailJob(*job, failure_);
    } else {
      lock.unlock();
      RunStage(stage_idx, *job);
      lock.lock();
      if (!job->status.ok()) FailJob(*job, job->status);
    }
    if (job->status.ok() && stage_idx + 1 < n_stages()) {
      queues_[stage_idx + 1].push_back(job);
      stage_cv_[stage_idx + 1].notify_one();
    } else {
      job->done = true;
      done_cv_.notify_all();
      if (on_done_) {
        lock.unlock();
        on_done_();
        lock.lock();
      }
    }
  }
}

void Pipeline::ReleaseCollected() {
  if (collected_ == nullptr) return;
  free_jobs_.push_back(collected_);
  collected_ = nullptr;
}

Result<std::span<const float>> Pipeline::WaitOldest() {
  SHARDLM_ASSIGN_OR_RETURN(PipelineOutputs outputs, WaitOldestOutputs());
  return outputs.logits;
}

Result<PipelineOutputs> Pipeline::WaitOldestOutputs() {
  std::unique_lock<std::mutex> lock(mu_);
  ReleaseCollected();
  if (in_flight_.empty()) {
    return Status(StatusCode::kInternal, "WaitOldest: no batch is in flight");
  }
  Job* job = in_flight_.front();
  done_cv_.wait(lock, [&] { return job->done; });
  in_flight_.pop_front();
  collected_ = job;
  // A failure that is not a lost stage ends with the batches it failed.
  if (in_flight_.empty() && !failure_.ok() && failure_.code() != StatusCode::kUnavailable) {
    failure_ = Status::Ok();
  }
  if (!job->status.ok()) return job->status;
  const size_t logit_floats = size_t(job->rows.logits) * size_t(config_.n_vocab);
  PipelineOutputs outputs;
  outputs.logits = std::span<const float>(job->outputs.data(), logit_floats);
  outputs.embeddings = std::span<const float>(
      job->outputs.data() + logit_floats, size_t(job->rows.embeddings) * size_t(config_.n_embd));
  outputs.page_scores = job->page_scores;
  outputs.loss = &job->loss;
  return outputs;
}

Status Pipeline::Run(const PipelineBatch& batch, std::vector<float>* logits) {
  if (in_flight() != 0) {
    return Status(StatusCode::kInternal, "Pipeline::Run needs an idle pipeline");
  }
  SHARDLM_TRY(Submit(batch));
  SHARDLM_ASSIGN_OR_RETURN(std::span<const float> rows, WaitOldest());
  logits->assign(rows.begin(), rows.end());
  return Status::Ok();
}

Status Pipeline::Health() const {
  for (const auto& stage : stages_) SHARDLM_TRY(stage->Health());
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.code() == StatusCode::kUnavailable) return failure_;
  return Status::Ok();
}

Status Pipeline::Reconnect() {
  if (in_flight() != 0) {
    return Status(StatusCode::kInternal, "Pipeline::Reconnect needs an idle pipeline");
  }
  for (const auto& stage : stages_) {
    if (!stage->Health().ok()) SHARDLM_TRY(stage->Reconnect());
  }
  for (const auto& stage : stages_) SHARDLM_TRY(stage->Health());
  std::lock_guard<std::mutex> lock(mu_);
  failure_ = Status::Ok();
  return Status::Ok();
}

std::vector<StageStats> Pipeline::Stats() const {
  std::vector<StageStats> stats;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats = stats_;
  }
  // The bounded pool's figures are the stages' own (they apply the moves).
  for (size_t i = 0; i < stats.size(); ++i) stats[i].paging = stages_[i]->Stats().paging;
  return stats;
}

PipelineCounters Pipeline::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

std::vector<size_t> Pipeline::page_bytes() const {
  std::vector<size_t> bytes;
  for (const auto& stage : stages_) bytes.push_back(stage->page_bytes());
  return bytes;
}

Status Pipeline::ExportPages(std::span<const PageId> pages,
                             std::span<uint8_t* const> dst_by_stage) {
  if (dst_by_stage.size() != stages_.size()) {
    return InvalidArgument("ExportPages: {} buffers for {} stages", dst_by_stage.size(),
                           stages_.size());
  }
  for (size_t s = 0; s < stages_.size(); ++s) {
    SHARDLM_TRY(stages_[s]->ExportPages(pages, dst_by_stage[s]));
  }
  return Status::Ok();
}

Status Pipeline::ImportPages(std::span<const PageId> pages,
                             std::span<const uint8_t* const> src_by_stage) {
  if (src_by_stage.size() != stages_.size()) {
    return InvalidArgument("ImportPages: {} buffers for {} stages", src_by_stage.size(),
                           stages_.size());
  }
  for (size_t s = 0; s < stages_.size(); ++s) {
    SHARDLM_TRY(stages_[s]->ImportPages(pages, src_by_stage[s]));
  }
  return Status::Ok();
}

size_t Pipeline::state_bytes() const {
  size_t bytes = 0;
  for (const auto& stage : stages_) bytes += stage->state_bytes();
  return bytes;
}

std::vector<size_t> Pipeline::stage_state_bytes() const {
  std::vector<size_t> bytes;
  for (const auto& stage : stages_) bytes.push_back(stage->state_bytes());
  return bytes;
}

// Moves one slot's state through every stage that has one: `move(stage, offset)` handles the
// stage's part at `offset` of the whole state, `total` bytes long.
Status Pipeline::ForEachStateStage(size_t total, const char* what,
                                   const std::function<Status(Stage&, size_t)>& move) {
  if (total != state_bytes()) {
    return InvalidArgument("{}: {} bytes for a state of {}", what, total, state_bytes());
  }
  return ForEachStageState(stages_, move);
}

Status Pipeline::ExportState(int32_t slot, int32_t position, std::span<uint8_t> dst) {
  return ForEachStateStage(dst.size(), "ExportState", [&](Stage& stage, size_t offset) {
    return stage.ExportState(slot, position, dst.data() + offset);
  });
}

Status Pipeline::ImportState(int32_t slot, int32_t position, std::span<const uint8_t> src) {
  return ForEachStateStage(src.size(), "ImportState", [&](Stage& stage, size_t offset) {
    return stage.ImportState(slot, position, src.data() + offset);
  });
}

}  // namespace shardlm
