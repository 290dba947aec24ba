// Scheduler: the continuous-batching Engine behind `shardlm serve` — many requests share
// one model, one KV page pool and one forward pass per step.
//
// Goals:
//  - One engine thread owns every piece of engine state (slots, block tables, the pool,
//    the forward pass); Submit and Cancel only enqueue typed instructions (STYLE rule 34).
//  - Each step is an ordered list of actions, the first that does work ends it (rule 33):
//    admit queued requests into free slots (FIFO); else run one batch that mixes the
//    decode token of every running sequence with prefill chunks of new ones (decode
//    first, prefill budget = n_batch − n_decoding, oldest admission first), so a long
//    prompt never stalls running streams. A prefill is a resumable task (rule 35).
//  - Per-request sampler, decoder and stop-string holdback (scheduler_request.h).
//  - Determinism: a request's tokens and logits are bitwise the same whatever shares the
//    batch and however its prompt was chunked (ForwardPass guarantees it per token; the
//    sampler belongs to the request and is seeded by it).
//  - KV: the pool holds n_parallel × ceil(n_ctx / page_tokens) pages, so an admitted
//    request never runs out; a finished or cancelled request frees its pages at once.
//  - Submit errors: empty prompt or bad token ids (kInvalidArgument), prompt + 1 > n_ctx
//    (kOutOfRange, "context_length_exceeded"), queue full (kOutOfRange "queue full (N
//    waiting)"), engine shutting down (kInternal).
//  - One key=value log line per finished request on stderr.
// Non-goals (later issues): prefix cache (cached_tokens is 0), preemption or swapping,
// priorities, layer splits.
//
// Thread safety: Submit, Cancel, Stats, info, tokenizer and Health may be called from any
// thread. Callbacks run on the engine thread (see engine.h).
// Lifetime: the borrowing Create references the Model and Tokenizer, which must outlive the
// Scheduler; the owning Create keeps the LoadedModel. Destruction cancels every request
// still queued or running (each gets on_finish with kCancelled) and joins the thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "kv/page_pool.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/model_loader.h"
#include "tensor/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct SchedulerOptions {
  int n_parallel = 4;  // slots: sequences that run together
  int n_ctx = 4096;    // positions per sequence (prompt + generated)
  int n_batch = 512;   // most tokens per forward pass (>= n_parallel)
  int max_queue = 64;  // requests waiting beyond the free slots
  // Most prompt tokens per step while other sequences decode (0: all n_batch leaves), to
  // bound their inter-token latency; alone, a prompt always gets the whole batch.
  int prefill_chunk = 0;
  int threads = 0;  // compute threads; 0: every core
  KvType kv_type = KvType::kF32;
  int page_tokens = kDefaultPageTokens;
  std::string model_name;    // what info().model_name reports; "": general.name or "model"
  bool log_requests = true;  // one line per finished request on stderr

  Status Validate() const;
};

class Scheduler : public Engine {
 public:
  // The model must hold every layer. Errors: bad options, a split model, a tokenizer that
  // does not fit the model, KV pool allocation.
  static Result<std::unique_ptr<Scheduler>> Create(const Model& model, const Tokenizer& tokenizer,
                                                   const SchedulerOptions& options);
  // Same, owning the loaded model.
  static Result<std::unique_ptr<Scheduler>> Create(LoadedModel loaded,
                                                   const SchedulerOptions& options);
  ~Scheduler() override;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  Result<RequestId> Submit(EngineRequest request, RequestCallbacks callbacks) override;
  void Cancel(RequestId id) override;
  EngineStats Stats() const override;
  const EngineInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  Status Health() const override;

  const SchedulerOptions& options() const { return options_; }
  size_t kv_bytes() const;  // the page pool's memory (reserved; touched as pages fill)

 private:
  // What other threads hand the engine thread.
  struct Instruction {
    enum class Kind { kSubmit, kCancel } kind = Kind::kSubmit;
    RequestId id = 0;
    EngineRequest request;       // kSubmit
    RequestCallbacks callbacks;  // kSubmit
    std::chrono::steady_clock::time_point submitted;
  };
  struct State;  // scheduler.cc: everything the engine thread owns

  Scheduler(const Model& model, const Tokenizer& tokenizer, const SchedulerOptions& options);
  Status Init();
  Status CheckRequest(const EngineRequest& request) const;

  // Engine thread.
  void Loop();
  bool TakeInstructions();  // false on shutdown
  void ApplyInstruction(Instruction& instruction);
  bool AdmitAction();
  bool BatchAction();
  void BuildBatch();
  void ProcessLogits();
  void FinishSlot(int slot, FinishReason reason, Status error = Status::Ok());
  void FinishWaiting(size_t index, FinishReason reason);
  void CancelEverything();
  void PublishStats();

  std::unique_ptr<LoadedModel> owned_;  // set by the owning Create
  const Model& model_;
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  EngineInfo info_;
  std::unique_ptr<State> state_;  // engine thread only (after Init)

  // Shared with the submitting threads, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Instruction> inbox_;
  bool stopping_ = false;
  int pending_ = 0;  // submitted, not yet in a slot (nor finished)
  int active_ = 0;   // in a slot
  RequestId next_id_ = 1;
  EngineStats stats_;

  std::thread thread_;
};

}  // namespace shardlm
