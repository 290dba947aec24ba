// Pipeline: the ordered stages of one model and the batches flowing through them
// — what the scheduler, `run` and `bench` compute with.
//
// A batch enters stage 0 and flows 0 → 1 → … → N-1, each stage on its own worker thread
// with a FIFO queue, so with several batches in flight the stages work on different
// batches at the same time (stage 1 computes batch k while stage 0 computes batch k+1): a
// split is not a serial relay. At most depth() = N batches are in flight; each owns a
// hidden-row buffer pair and an output buffer (logits rows, then embedding rows) from a
// pool of depth() buffers, allocated once. A one-stage pipeline runs each batch on the caller's
// thread (no handoff latency) unless it is asynchronous. Between stages a token moves n_embd × 4
// bytes (float32 hidden row), counted in stats.
//
// Ordering: every stage processes batches in submission order, so a batch may use KV that
// an earlier batch still in flight writes (the next prompt chunk of a sequence).
// Failure: when a stage fails a batch, that batch and every batch submitted after it fail
// with that Status; batches ahead of it are unaffected. A kUnavailable failure (a remote
// stage died) sticks: Submit and Health report it until Reconnect succeeds. Any other
// failure clears once the failed batches have been collected.
//
// Goals: one object that hides where stages run; bitwise the same logits as an unsplit
// model (every stage computes its layers exactly as the whole model would).
// Non-goals: choosing the batch (the scheduler), page allocation policy (the caller
// prepares block tables and passes page lists and copy-on-write copies with each batch),
// placement arithmetic (placement.h), stage internals (local_stage.h, remote_stage.h).
//
// Thread safety: one owner thread calls Submit, WaitOldest, Run and Reconnect; Health,
// Stats, counters, placement, in_flight and the page transfers may be called from any
// thread.
// Lifetime: a Pipeline made by Create borrows the Model when one local stage computes all
// of it (the Model must outlive the Pipeline); otherwise stages own what they load.
// Block tables on allocator() must be destroyed first. Destruction joins the workers;
// batches still in flight are dropped.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "kv/page_allocator.h"
#include "kv/page_pool.h"
#include "model/model.h"
#include "pipeline/placement.h"
#include "pipeline/stage.h"

namespace shardlm {

struct PipelineOptions {
  PlacementOptions placement;
  int threads = 0;             // threads of an unpinned "cpu" stage; 0: every core
  KvGeometry kv;               // every stage's pages, and the most entries per batch
  int max_logit_rows = 1;      // most entries per batch that want logits
  int max_embedding_rows = 0;  // most entries per batch that want their embedding
  // Local stages keep their pages in shared memory (LocalStageOptions::share_kv), for a prefill
  // worker to write.
  bool share_kv = false;
  // A one-stage pipeline computes on a worker thread too, so that Submit returns at once (a
  // prefill worker's pipeline, whose batches take seconds while the owner goes on decoding).
  bool asynchronous = false;
};

// What the oldest batch gave (Pipeline::WaitOldestOutputs), in batch order.
struct PipelineOutputs {
  std::span<const float> logits;      // [rows wanting logits][n_vocab]
  std::span<const float> embeddings;  // [rows wanting their embedding][n_embd]
  // Bounded KV pool: the scores of the entries with score_pages (StageBatch::page_scores).
  std::span<const float> page_scores = {};
  // Bounded KV pool: pages a stage's tier failed to move for this batch (null without one).
  const PagingLoss* loss = nullptr;
};

// What one Submit computes: the same view each stage gets. Submit copies it.
using PipelineBatch = StageBatch;

// Counters of the pipeline as a whole (per-stage figures: Stats()).
struct PipelineCounters {
  uint64_t batches = 0;         // submitted
  uint64_t tokens = 0;          // entries submitted
  int max_in_flight = 0;        // most batches submitted and not yet collected at once
  uint64_t bytes_between = 0;   // hidden rows handed from a stage to the next
  uint64_t failed_batches = 0;  // batches that ended with an error
};

class Pipeline {
 public:
  // Plans layer ranges over options.devices (placement.h) and builds a stage per device:
  // a local stage per cpu device (borrowing `model` when one stage computes every layer,
  // else loading its range from the model's file), a remote stage per unix: device
  // (handshake names options.placement.model_path). Errors: bad placement (more stages than layers,
  // a weight count that differs from the device count), bad sizes, stage load/connect.
  static Result<std::unique_ptr<Pipeline>> Create(const Model& model,
                                                  const PipelineOptions& options);
  // From stages built by the caller (tests, custom placements). The stages must chain:
  // stage 0 first, the last one last, layer ranges contiguous over [0, config.n_layers),
  // and hold options.n_pages pages each. Of the options only n_pages, page_tokens,
  // max_batch_tokens, max_logit_rows and max_embedding_rows are used.
  static Result<std::unique_ptr<Pipeline>> FromStages(std::vector<std::unique_ptr<Stage>> stages,
                                                      const ModelConfig& config,
                                                      const PipelineOptions& options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  const ModelConfig& config() const { return config_; }
  // The page ids every stage shares: block tables of this pipeline's sequences take their
  // pages here. Owner thread only (PageAllocator is not thread-safe).
  PageAllocator& allocator() { return *allocator_; }
  const PageAllocator& allocator() const { return *allocator_; }
  int n_stages() const { return int(stages_.size()); }
  // Most batches in flight at once: one per stage.
  int depth() const { return n_stages(); }
  int max_batch_tokens() const { return max_batch_tokens_; }
  int max_logit_rows() const { return max_logit_rows_; }
  int max_embedding_rows() const { return max_embedding_rows_; }
  std::vector<StageInfo> placement() const;

  // Queues a batch (copied) behind those in flight. Errors, at once and with nothing
  // queued: an empty or oversized batch, more logits rows than max_logit_rows or embedding
  // rows than max_embedding_rows, depth()
  // batches already in flight (kInternal: collect one first), a stage that is down
  // (kUnavailable naming it).
  Status Submit(const PipelineBatch& batch);
  // Waits for the oldest batch in flight: its logits rows [rows wanting logits][n_vocab]
  // in batch order, valid until the next Submit, WaitOldest or Run; or the Status of the
  // stage that failed it (or of an earlier batch's failure). kInternal when none is in
  // flight.
  Result<std::span<const float>> WaitOldest();
  // The same wait, giving the batch's embedding rows too (same lifetime).
  Result<PipelineOutputs> WaitOldestOutputs();
  int in_flight() const;
  // Whether the oldest batch in flight is done (WaitOldest would not wait); false when none is.
  bool OldestDone() const;
  // Called on the stage's worker thread each time a batch finishes (asynchronous pipelines and
  // splits), without the pipeline's lock: an owner that waits on something else as well learns
  // that WaitOldest would not block. Set before the first Submit.
  void SetOnBatchDone(std::function<void()> on_done) { on_done_ = std::move(on_done); }
  // The shared-memory region of each stage's pages ([stage]; null: private or remote).
  std::vector<const ShmRegion*> SharedKv() const;
  // Submit + WaitOldest, copying the logits rows into *logits (resized). Requires nothing
  // else in flight.
  Status Run(const PipelineBatch& batch, std::vector<float>* logits);

  // Ok, or the first down stage's kUnavailable status (naming stage and device).
  Status Health() const;
  // Reconnects every down stage (their pages are empty afterwards: the caller must have
  // released every sequence) and clears a sticky failure. Requires nothing in flight.
  Status Reconnect();

  // Per stage, as measured around each stage's Run: batches, tokens, busy time, activation
  // bytes in and out (hidden rows; logits rows for the last stage).
  std::vector<StageStats> Stats() const;
  PipelineCounters counters() const;

  // KV page transfer through every stage (Stage::ExportPages): [stage] → bytes of one page
  // of that stage.
  std::vector<size_t> page_bytes() const;
  // dst_by_stage[s] (or src_by_stage[s]) holds pages.size() × page_bytes()[s] bytes, pages in
  // order. Same rules as Stage::ExportPages: any thread, pages no batch in flight writes or
  // reads. Errors: a wrong number of buffers (InvalidArgument), the first failing stage's.
  Status ExportPages(std::span<const PageId> pages, std::span<uint8_t* const> dst_by_stage);
  Status ImportPages(std::span<const PageId> pages, std::span<const uint8_t* const> src_by_stage);
  // Recurrent state through every stage (Stage::ExportState): one slot's state is every
  // stage's bytes in stage order, state_bytes() in all (0: no recurrent layers anywhere).
  size_t state_bytes() const;
  std::vector<size_t> stage_state_bytes() const;  // [stage]
  Status ExportState(int32_t slot, int32_t position, std::span<uint8_t> dst);
  Status ImportState(int32_t slot, int32_t position, std::span<const uint8_t> src);

 private:
  Status ForEachStateStage(size_t total, const char* what,
                           const std::function<Status(Stage&, size_t)>& move);
  struct Job;
  Pipeline(std::vector<std::unique_ptr<Stage>> stages, const ModelConfig& config,
           const PipelineOptions& options);
  // Stages run on worker threads (a split, or an asynchronous pipeline).
  bool threaded() const { return n_stages() > 1 || asynchronous_; }
  Status ValidateBatch(const PipelineBatch& batch) const;
  Status CheckAccepting() const;  // under mu_
  void CopyIn(const PipelineBatch& batch, Job& job) const;
  // Runs stage `stage_idx` on `job` (no lock held); records its stats; the job's status.
  void RunStage(int stage_idx, Job& job);
  void Worker(int stage_idx);
  void FailJob(Job& job, Status status);  // under mu_
  void ReleaseCollected();                // under mu_

  ModelConfig config_;
  std::unique_ptr<PageAllocator> allocator_;
  std::vector<std::unique_ptr<Stage>> stages_;
  int max_batch_tokens_ = 0;
  int max_logit_rows_ = 0;
  int max_embedding_rows_ = 0;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  std::vector<std::condition_variable> stage_cv_;  // [stage]: its queue got a job
  std::vector<std::deque<Job*>> queues_;           // [stage]: jobs waiting for it, FIFO
  std::vector<std::unique_ptr<Job>> jobs_;         // [depth()]: buffers, reused
  std::vector<Job*> free_jobs_;
  std::deque<Job*> in_flight_;  // submission order
  Job* collected_ = nullptr;    // returned by the last WaitOldest, freed on the next call
  Status failure_;              // sticky failure (see the file comment)
  uint64_t next_seq_ = 0;
  uint64_t failed_seq_ = 0;  // jobs with seq >= failed_seq_ fail while failure_ is set
  std::vector<StageStats> stats_;
  PipelineCounters counters_;
  bool stopping_ = false;
  bool asynchronous_ = false;  // worker threads even for one stage
  std::function<void()> on_done_;
  std::vector<std::thread> workers_;  // one per stage when threaded()
};

}  // namespace shardlm
