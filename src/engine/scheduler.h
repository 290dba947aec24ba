// Scheduler: the continuous-batching Engine behind `shardlm serve` — many requests share
// one model, one KV page pool and one forward pass per step.
//
// Goals:
//  - One engine thread owns every piece of engine state (slots, block tables, the
//    pipeline); Submit and Cancel only enqueue typed instructions.
//  - Each step is an ordered list of actions, the first that does work ends it (rule 33):
//    recover a lost stage; admit queued requests into free slots (FIFO); submit one batch
//    to the pipeline while fewer than pipeline.depth() are in flight; else collect the
//    oldest batch's logits. A batch mixes the decode token of running sequences with
//    prefill chunks of new ones (decode first, prefill budget = n_batch − decode entries,
//    oldest admission first), so a long prompt never stalls running streams. A prefill is
//    a resumable task (rule 35).
//  - Pipelining: with a split (depth > 1) up to depth batches are in flight; a slot whose
//    batch awaits logits is busy, but a prefilling slot's next prompt chunk may follow its
//    previous one (stages run batches in FIFO order); a batch takes at most
//    ceil(decoding slots / depth) decode entries, so running streams split into
//    micro-batches that alternate through the stages. Depth 1 behaves as an unsplit engine.
//  - Per-request sampler, decoder and stop-string holdback (scheduler_request.h); a
//    constrained request samples among the tokens its grammar allows. The vocabulary's
//    token trie is built by the first constrained Submit (on its caller's thread, once), and
//    the engine thread keeps the token automata of recent grammars, so requests that send
//    the same schema share its cached masks.
//  - Outputs of every prompt position (prompt_outputs.h): an embedding request
//    (RequestKind::kEmbedding, options.embeddings) asks the last stage for the embedding
//    row of each prompt position and finishes, without sampling, once the last is
//    collected; a request with want_prompt_logprobs asks for the logits of each prompt
//    position but the last, at most options.prompt_logit_rows per batch (its prompt is
//    chunked to fit), and hears them before its first token. Their prompts are prefilled
//    like any other, in the same batches; they map no prefix-cache hit (the rows of cached
//    positions would be missing) but publish their full pages, and their slot retains the
//    sequence like any request's.
//  - Determinism: a request's tokens and logits are bitwise the same whatever shares the
//    batch, however its prompt was chunked and however the layers are split (every stage
//    computes each token as the whole model would; the sampler belongs to the request).
//  - KV: every stage holds n_parallel × ceil(n_ctx / page_tokens) (+ cache_pages) pages
//    (one allocator, ids shared by all stages), so an admitted request never runs out; a
//    finished or cancelled request releases every page but those of its committed positions
//    (KV every stage has written), which its slot retains (engine.h "Slots") until the slot
//    takes its next request or the sequence is erased. A slot never holds more than its
//    share, so retention takes no room a running sequence may need.
//  - Slots (scheduler_slots.h): save exports a free slot's retained sequence from every
//    stage (remote ones through their daemon) and streams it into a slot file (cache/
//    slot_file.h) off the engine thread; restore streams a file back, checking it as it
//    goes, into fresh pages, and only once every byte checked out makes them the slot's
//    retained sequence, publishing the full pages in the prefix cache, so any prompt that
//    starts with those tokens hits them. A model with recurrent layers also saves each
//    stage's state at the sequence's last whole page, and a restore keeps it for that block
//    (as a finished sequence's is kept), so such a prompt resumes there; the tokens after
//    it are recomputed. Both move a few pages per engine step while the
//    slot is held: a slot that runs a request, or is being saved or restored, answers
//    kConflict before the file is touched (a save never races with the KV it reads). One
//    save or restore runs at a time; another waits up to options.slot_io_wait, then gets
//    kResourceExhausted. A save that would take the folder's slot files past
//    options.slot_save_budget is refused (kQuotaExceeded). A failed batch or a lost stage
//    drops every retained sequence and fails the transfers.
//  - Prefix cache (options.prefix_cache; pages keyed by block hash): admission maps the
//    longest cached chain of the prompt's full blocks into the slot's block table and
//    prefills only the rest (a wholly cached prompt recomputes its last token, copy-on-write,
//    to get logits); usage.cached_tokens counts the skipped tokens. Once a batch's logits
//    are collected (every stage wrote its KV), each page it filled with known prompt or
//    generated tokens is published under its chain hash. A sequence publishes a block only
//    while its previous block is the cached page itself, so every cached page no sequence
//    holds is evictable: when a write finds the pool full, unreferenced cached pages are
//    evicted (LRU leaves) and the write retried, so a request still always finishes. Output
//    is bitwise the same with or without a hit. A lost stage clears the cache (its pages
//    are gone).
//  - Disk tier (options.kv_cache_dir, scheduler_disk_cache.h): published pages persist
//    write-behind; an admitted prompt whose chain continues on disk loads those blocks (a
//    resumable task, a few pages per step, while other streams run) before prefilling the
//    rest. Output is bitwise the same as cold; a bad file is discarded and recomputed.
//  - Faults: a stage that goes down (kUnavailable) ends every running, in-flight and
//    queued request with kError and its Status and frees every page; Health and Submit
//    report it ("stage 1 (unix:...) is down ...") while the engine thread retries
//    Reconnect every kReconnectInterval; once it succeeds requests are accepted again.
//  - Submit errors: empty prompt or bad token ids (kInvalidArgument), prompt + 1 > n_ctx
//    (kOutOfRange, "context_length_exceeded"), queue full (kOutOfRange "queue full (N
//    waiting)"), a stage down (kUnavailable), engine shutting down (kInternal).
//  - The one engine of every driver: `serve` (many requests), `run` (one request; its
//    RequestCallbacks::on_logits and on_prefill record logits rows and show progress) and
//    `bench` (its tests are requests: bench_runner.h).
//  - One key=value log line per finished request on stderr (options.log_requests).
//  - Prefill worker (options.prefill_worker; scheduler_prefill_worker.cc): the stage's pages live
//    in a sealed memfd that a worker process (a shard daemon serving every layer) maps as its own
//    pool. A prompt with at least disagg_min_tokens tokens left to compute prefills there, in
//    batches of a second, asynchronous pipeline that share this engine's page allocator and block
//    tables, while the streams go on decoding here; the worker writes the KV into the very pages
//    the stage then decodes from, so the handoff copies no KV byte: the first token is sampled
//    here from the worker's last logits row, and only a recurrent or windowed model's state (a few
//    MB) moves (ExportState/ImportState). Output is bitwise the same as colocated. The page
//    allocator stays here, so no refcount crosses processes: a page freed while a worker batch
//    may still write it is held back until that batch is collected (or, once the worker is lost,
//    until it reconnects: its old session has then ended). A lost worker fails only the requests
//    it was prefilling (kUnavailable); later prompts prefill here until a reconnect, retried
//    every kReconnectInterval, succeeds. A split decode side has one region per stage (a stage
//    in a shard daemon shares its own and sends it back): the worker lays each stage's layers
//    over that stage's region, and maps the new one when a decode daemon comes back. Under a
//    bounded pool the pager stays the only one to decide: the region holds the decode stages'
//    frames and key summaries; a worker batch's moves (page-ins from the tier, evictions,
//    copy-on-write) first go through the decode pipeline as a batch that moves pages and computes
//    nothing (apply_only), then the worker computes over the frames the pager chose, summarizes
//    the keys it writes and scores the pages at the prompt's end, as a decode stage would; one
//    worker batch at a time, so no move overtakes a batch still reading its frames.
// Non-goals (later issues): preemption or swapping, priorities.
//
// Thread safety: Submit, SubmitAll, Cancel, Stats, info, tokenizer, Health, pipeline_counters,
// stage_stats and the slot methods may be called from any thread (the slot methods block
// until the engine thread has done its part). Callbacks run on the engine thread (see engine.h).
// Lifetime: the borrowing Create references the Model and Tokenizer, which must outlive the
// Scheduler; the owning Create keeps the LoadedModel. Destruction cancels every request
// still queued or running (each gets on_finish with kCancelled) and joins the thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "cache/snapshot_layout.h"
#include "engine/engine.h"
#include "engine/scheduler_slots.h"
#include "gguf/fingerprint.h"
#include "grammar/token_vocabulary.h"
#include "kv/page_pool.h"
#include "kv/pager.h"
#include "model/model.h"
#include "pipeline/model_loader.h"
#include "pipeline/pipeline.h"
#include "pipeline/placement.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

class ActiveRequest;   // scheduler_request.h
struct SchedulerSlot;  // scheduler_impl.h

struct SchedulerOptions {
  int n_parallel = 4;  // slots: sequences that run together
  int n_ctx = 4096;    // positions per sequence (prompt + generated)
  int n_batch = 512;   // most tokens per forward pass (>= n_parallel)
  int max_queue = 64;  // requests waiting beyond the free slots
  // Most prompt tokens per step while other sequences decode (0: all n_batch leaves), to
  // bound their inter-token latency; alone, a prompt always gets the whole batch.
  int prefill_chunk = 0;
  int threads = 0;  // compute threads of an unpinned "cpu" stage; 0: every core
  KvType kv_type = KvType::kF32;
  // Where windowed layers keep their KV (kv/page_pool.h): kRing keeps each sequence's window
  // only, and its state at a page boundary resumes a cached prefix (as a recurrent layer's).
  WindowKv window_kv = WindowKv::kRing;
  int page_tokens = kDefaultPageTokens;
  std::string model_name;           // what info().model_name reports; "": general.name or "model"
  bool log_requests = true;         // one line per finished request on stderr
  PlacementOptions placement = {};  // placement.h; no devices: one "cpu" stage
  bool prefix_cache = true;         // share and reuse full KV pages of common prompt prefixes
  // Pages beyond n_parallel × ceil(n_ctx / page_tokens), where cached prefixes outlive their
  // requests without taking room a running sequence may need (0: cached pages only use
  // what running sequences leave free).
  int cache_pages = 0;
  // Disk tier of the prefix cache (scheduler_disk_cache.h): an existing folder where full
  // pages persist across restarts ("": none); needs prefix_cache. Its files of this layout
  // stay under kv_cache_budget bytes.
  std::string kv_cache_dir = {};
  uint64_t kv_cache_budget = uint64_t{8} << 30;
  // Slot files (SaveSlot): the files with a slot file's magic in the folder a save writes
  // to stay under this many bytes; a save past it is refused, never an older file evicted
  // (they are the user's named files).
  uint64_t slot_save_budget = uint64_t{8} << 30;
  // How long a slot save or restore waits for the one in progress before it is refused.
  // A save of a long sequence takes seconds; a client retries sooner than an HTTP handler
  // should sit.
  std::chrono::milliseconds slot_io_wait{5000};
  // Embedding requests are computed (RequestKind::kEmbedding): every batch may carry up to
  // n_batch embedding rows, so each buffer of a batch in flight holds n_batch × n_embd
  // floats more. Off: such requests are refused.
  bool embeddings = false;
  // Logits rows of prompt positions per batch (want_prompt_logprobs). Each batch buffer
  // holds n_parallel + prompt_logit_rows logits rows of n_vocab floats (32 rows of a
  // 152K-token vocabulary: 18.5 MiB), so a prompt's logprobs cost about
  // n_prompt / prompt_logit_rows batches, while other requests run in them too.
  int prompt_logit_rows = 32;
  // Bounded KV residency (kv/pager.h): at most kv_pool.pool_tokens positions of each
  // sequence resident in every stage, the others in kv_tier. Unbounded when pool_tokens is 0
  // or holds n_ctx.
  KvPoolOptions kv_pool = {};
  KvTierSpec kv_tier = {};
  // Disaggregation (see "Prefill worker" above): the socket of a `shardlm worker --role prefill`
  // that computes the prompts of at least disagg_min_tokens uncached tokens into this engine's
  // pages ("": every prompt prefills here). Needs the model-based Create; the decode stages may
  // be split, local or in shard daemons, their pool bounded or not.
  std::string prefill_worker = {};
  int disagg_min_tokens = 256;
  // Called on the engine thread (it must not block) when the worker is found lost (a failed or
  // timed-out batch, a hang-up), with the pid of the worker process it lost (0: unknown). A
  // worker that hung keeps the pages it may still write held back until a new session starts,
  // which a hung daemon never allows: `serve --disagg` ends that child here, so that a new one
  // starts and the pages come back.
  std::function<void(pid_t)> on_prefill_worker_lost = {};

  Status Validate() const;
  // Whether the pool bounds anything: set and smaller than a sequence's context.
  bool bounded_kv() const;
  // The pager these options ask for (bounded_kv() only).
  PagerConfig Pager() const;
  // The pipeline these options ask for: n_parallel × ceil(n_ctx / page_tokens) +
  // cache_pages pages, n_batch tokens, n_parallel + prompt_logit_rows logits rows and
  // (embeddings) n_batch embedding rows per batch.
  PipelineOptions ToPipelineOptions() const;
  // The KV geometry of that pipeline: n_parallel × ceil(n_ctx / page_tokens) + cache_pages
  // pages of page_tokens positions of kv_type, n_batch tokens per batch.
  KvGeometry Kv() const;
};

// How often the engine thread tries to bring a lost stage back.
inline constexpr std::chrono::milliseconds kReconnectInterval{500};
// How often an idle engine offers the disk cache the blocks its export queue had no room for.
inline constexpr std::chrono::milliseconds kPersistRetry{20};

class Scheduler : public Engine {
 public:
  // The model must hold every layer; the pipeline is built from options.placement
  // (devices, layer split). Errors: bad options, a split model, a tokenizer that does not fit
  // the model, placement, stage load or connect, KV pool allocation.
  static Result<std::unique_ptr<Scheduler>> Create(const Model& model, const Tokenizer& tokenizer,
                                                   const SchedulerOptions& options);
  // Same, on a pipeline built by the caller (tests, custom stages); it must have been made
  // with options.ToPipelineOptions()'s sizes. info().model_name: options.model_name or
  // "model". No disk tier here (it needs the model file's fingerprint).
  static Result<std::unique_ptr<Scheduler>> Create(std::unique_ptr<Pipeline> pipeline,
                                                   const Tokenizer& tokenizer,
                                                   const SchedulerOptions& options);
  // Same, owning the loaded model.
  static Result<std::unique_ptr<Scheduler>> Create(LoadedModel loaded,
                                                   const SchedulerOptions& options);
  ~Scheduler() override;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  Result<RequestId> Submit(EngineRequest request, RequestCallbacks callbacks) override;
  // Submits several requests as one: all are queued or none (the errors of Submit), and the
  // engine thread takes them in the same step, so those that find free slots are admitted
  // together and prefill in the same batches (`bench` starts its streams so). Ids in order.
  Result<std::vector<RequestId>> SubmitAll(
      std::vector<std::pair<EngineRequest, RequestCallbacks>> requests);
  void Cancel(RequestId id) override;
  EngineStats Stats() const override;
  const EngineInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  Status Health() const override;

  // Slots (engine.h); slot files need the model-based Create (its fingerprint is part of
  // the file's layout), kUnsupported otherwise. Restore needs the prefix cache.
  std::vector<SlotInfo> Slots() const override;
  Result<SlotSaveResult> SaveSlot(int32_t slot, const std::filesystem::path& file) override;
  Result<SlotRestoreResult> RestoreSlot(int32_t slot, const std::filesystem::path& file) override;
  Result<int32_t> EraseSlot(int32_t slot) override;

  const SchedulerOptions& options() const { return options_; }
  // Every stage's page storage and, for each slot, its window rings (reserved; touched as
  // sequences fill them).
  size_t kv_bytes() const;
  // The pipeline's counters (max_in_flight > 1 shows pipelining at work).
  PipelineCounters pipeline_counters() const;
  // Per stage, in pipeline order: batches, tokens, busy time, activation bytes.
  std::vector<StageStats> stage_stats() const;

 private:
  // What other threads hand the engine thread.
  struct Instruction {
    enum class Kind { kSubmit, kCancel, kSlot } kind = Kind::kSubmit;
    RequestId id = 0;
    EngineRequest request;       // kSubmit
    RequestCallbacks callbacks;  // kSubmit
    // kSubmit with a grammar: the tokens its masks are over (Vocabulary).
    std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
    std::chrono::steady_clock::time_point submitted;
    std::shared_ptr<SlotJob> slot_job;  // kSlot
  };
  struct State;     // scheduler_impl.h: everything the engine thread owns
  struct InFlight;  // scheduler_impl.h: what a submitted batch will give logits for

  Scheduler(const Tokenizer& tokenizer, const SchedulerOptions& options);
  // fingerprint: the model file's (none for a caller-built pipeline).
  Status Init(std::unique_ptr<Pipeline> pipeline, std::string model_name,
              std::optional<Fingerprint128> fingerprint);
  Status CheckRequest(const EngineRequest& request) const;
  Status CheckPromptOutputs(const EngineRequest& request) const;

  // Slots, caller side (scheduler_slot_files.cc).
  Status CheckSlot(int32_t slot) const;
  // A layout the slot files can describe: made from the model file, pages of one row size.
  Status CheckSlotFilesDescribeTheModel() const;
  // Queues `job` for the engine thread and waits for its answer.
  Result<SlotJobResult> RunSlotJob(std::shared_ptr<SlotJob> job);
  // Runs a slot job of `op` with nothing else to say.
  Result<SlotJobResult> RunSlotJob(SlotJob::Op op, int32_t slot);
  // The one save or restore at a time: waits up to options_.slot_io_wait.
  Result<std::unique_lock<std::timed_mutex>> TakeSlotIoTurn();
  Result<SlotSaveResult> StreamSave(int32_t slot, const std::filesystem::path& file,
                                    const SlotJobResult& begun);
  Result<RestoredSlotFile> StreamRestore(int32_t slot, const std::filesystem::path& file);
  // Moves pages [first, first + n) of the slot's transfer through `buffers` (kCopy); a save
  // also exports the recurrent state into `state` (when not empty).
  Status CopySlotPages(int32_t slot, int first, int n, const std::vector<uint8_t*>& buffers,
                       std::span<uint8_t> state = {});

  // Engine thread.
  void Loop();
  bool TakeInstructions();  // false on shutdown
  void ApplyInstruction(Instruction& instruction);
  bool RecoverAction();
  bool AdmitAction();
  bool SubmitAction();
  bool CollectAction();
  void BuildBatch(InFlight& record);
  Status PrepareTables(InFlight& record);
  // What a collected batch gave: commits and publishes its pages, keeps its prompts' states
  // (read from the pipeline that computed them), hands prompts the worker finished over
  // (from_worker) and each request its rows.
  void ApplyCollected(const InFlight& record, const PipelineOutputs& outputs, bool from_worker);
  void ProcessOutputs(const InFlight& record, const PipelineOutputs& outputs);
  void FailEverything(const Status& error);
  void FinishSlot(int slot, FinishReason reason, Status error = Status::Ok());
  void FinishWaiting(size_t index, FinishReason reason, Status error = Status::Ok());
  void CancelEverything();
  void PublishStats();
  // Prefill worker, engine thread (scheduler_prefill_worker.cc).
  // fingerprint: the model file's (a worker needs it; InvalidArgument without).
  Status ConnectPrefillWorker(std::optional<Fingerprint128> fingerprint);
  bool PrefillWorkerAction();  // reconnect, collect a finished worker batch, or submit one
  // Errors: the worker found down (its Probe) when a prompt is ready for it.
  Status BuildWorkerBatch(InFlight& record);
  // Bounded pool: the worker batch just built goes to the decode pipeline to have its pages
  // moved, and waits (State::worker_moving) until that batch is collected.
  Status MoveWorkerBatchPages();
  // A worker batch that could not go: the worker is lost (kUnavailable) or everything fails.
  void FailWorkerSubmit(const Status& status);
  void CollectWorkerBatch();
  // The prompt's last chunk is collected: its state moves to the local stage (recurrent and
  // windowed layers; its KV is already in the shared pages).
  void HandOff(int slot_idx);
  void FailPrefillWorker(const Status& error);
  void DrainPrefillWorker();  // waits for every worker batch in flight
  // After a decode stage in a daemon came back: its pages are in a new region, so the worker's
  // session ends and reconnects over the new one.
  void RemapPrefillWorker();
  // Whether a worker batch may still write the slot's pages: then its table is held back (the
  // slot gets a fresh one) until that batch is collected or the worker reconnects.
  bool HoldBackWorkerPages(SchedulerSlot& slot);
  void ReleaseHeldBackPages(bool reconnected);
  // Slots, engine thread (scheduler_slots.cc).
  void StartSlotJob(std::shared_ptr<SlotJob> job);
  Result<SlotJobResult> BeginSave(SchedulerSlot& slot, int slot_idx);
  Result<SlotJobResult> AllocateRestore(SchedulerSlot& slot, int n_pages);
  Result<SlotJobResult> EndTransfer(SchedulerSlot& slot, SlotJob& job);
  bool SlotTaskAction();  // bounded work; never ends the step
  Status StepSlotCopy(SlotCopyTask& task, int& budget);
  Status ExportRetainedState(int slot_idx, std::span<uint8_t> dst);
  void LosePages(const PagingLoss& loss);
  Status CommitRestore(SchedulerSlot& slot, SlotJob& job);
  void ReleaseTransferPages(SlotTransfer& transfer);
  void RetainSequence(SchedulerSlot& slot, const ActiveRequest& request);
  void DropRetained(SchedulerSlot& slot);
  void DropAllSlotState(const Status& error);  // a failed batch or a lost stage
  int CountRetainedOnly();

  std::unique_ptr<LoadedModel> owned_;  // set by the owning Create
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  ModelConfig config_;
  EngineInfo info_;
  std::unique_ptr<State> state_;  // engine thread only (after Init)
  // The layout slot files are saved under; unset without the model's fingerprint.
  std::optional<SnapshotLayout> slot_layout_;
  // Held by the one slot save or restore in progress (its file I/O and pool copies).
  std::timed_mutex slot_io_mu_;
  // The tokenizer's tokens as tries for grammar masks, one per set of rendered specials
  // that constrained requests asked for (in practice none, or the chat template's markup),
  // each built by the first such Submit on its caller's thread and kept for good.
  std::shared_ptr<const grammar::TokenVocabulary> Vocabulary(
      const std::vector<TokenId>& rendered_specials);
  std::mutex vocabulary_mu_;
  std::map<std::vector<TokenId>, std::shared_ptr<const grammar::TokenVocabulary>> vocabularies_;

  // Shared with the submitting threads, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Instruction> inbox_;
  bool stopping_ = false;
  int pending_ = 0;  // submitted, not yet in a slot (nor finished)
  int active_ = 0;   // in a slot
  RequestId next_id_ = 1;
  EngineStats stats_;
  Status lost_;                       // a stage is down: why (set and cleared by the engine thread)
  bool worker_batch_done_ = false;    // the prefill worker finished a batch (its pipeline's hook)
  std::vector<SlotInfo> slot_infos_;  // what Slots() answers, refreshed by PublishStats

  std::thread thread_;
};

}  // namespace shardlm
