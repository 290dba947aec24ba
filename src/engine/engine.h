// Engine: what the server asks of the inference core. One request in, a stream of token
// events and one finish event out; or, for an embedding request, one finish event that
// carries the prompt's pooled hidden state. The real engine (scheduler.h) batches many requests
// into each forward pass; tests of the HTTP layer use a mock that implements the same
// interface with no model.
//
// Goals: a small, typed boundary between server/ and engine/: the server parses OpenAI
// JSON into an EngineRequest, the engine never sees JSON or HTTP.
// Non-goals: chat templates and tool-call parsing (server side), HTTP status codes.
//
// Thread safety: every method may be called from any thread. Callbacks run on the engine's
// own thread: they must be quick and must not call back into the engine except Cancel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "pipeline/stage.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

using RequestId = uint64_t;

// What a request computes. kGenerate: tokens after the prompt (TokenEvents, then the
// FinishEvent). kEmbedding: no sampling: the prompt is prefilled and the FinishEvent carries
// its embedding, the mean over its positions of the final hidden state after the output
// norm (what the LM head would read), not normalised; an engine computes them only when
// built for it (EngineInfo::embeddings).
enum class RequestKind { kGenerate, kEmbedding, kSentinel };

struct EngineRequest {
  std::vector<TokenId> prompt;    // already tokenized (template applied, BOS added)
  SamplingParams sampling;        // validated by the caller
  int32_t max_tokens = -1;        // -1: until EOG or the context is full
  std::vector<std::string> stop;  // stop strings: generation ends before the first match
  bool ignore_eos = false;
  bool want_logprobs = false;  // fill TokenEvent::logprob / top (sampling.n_logprobs)
  RequestKind kind = RequestKind::kGenerate;
  // kGenerate: also the log-probabilities of the prompt's own tokens, each given the tokens
  // before it (RequestCallbacks::on_prompt_logprobs; sampling.n_logprobs alternatives each).
  // They need the logits of every prompt position, so the prompt is computed whole (no
  // prefix-cache hit). With max_tokens 0 the request ends after them (kLength).
  bool want_prompt_logprobs = false;
  // Token id → added to its logit before sampling (ids < n_vocab, finite biases; a
  // repeated id adds up). The reported logprobs stay the model's.
  std::vector<std::pair<TokenId, float>> logit_bias;
  // CONTROL tokens whose text the output shows: the markup a chat's output parser reads,
  // where the vocabulary made it special tokens (Gemma 4's <|channel>, <|tool_call>, <|"|>).
  // Every other CONTROL token adds no text, as without it; an end-of-generation token that
  // ends the request gives no event either way. A grammar sees the same text.
  std::vector<TokenId> rendered_specials;
  // The output must be a sentence of this grammar (null: anything). Each token is drawn
  // from those the grammar allows next; an end-of-generation token only once the output
  // is complete, and the request finishes with kStop as soon as nothing may follow, or
  // with kError if no token of the vocabulary can continue it. Overrides ignore_eos.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Bounded KV pool (kv/pager.h): position ranges [begin, end) whose pages stay resident
  // while the request runs, beside the sink and the tail (ignored without a pool).
  std::vector<std::pair<int32_t, int32_t>> pins;
  // Positions [0, pin_prefix) hold what the client resends every turn (a chat's system
  // prompt and tool definitions): pinned too, as far as the pool has room beside the sink,
  // the tail and `pins` (never an error; usage.kv_pins says what was pinned).
  int32_t pin_prefix = 0;
};

// One generated token. `text` is the UTF-8 text this token completes (may be ""), with
// any text that could be the start of a stop string held back until it is decided.
// Every generated token gets one event, except an end-of-generation token that ends the
// request (not ignore_eos): it gives no event but counts in usage.completion_tokens. When a
// stop string matches, the event of the token that completed it carries the text before
// the stop string (the rest is dropped) and the request finishes with kStop.
struct TokenEvent {
  TokenId token = -1;
  std::string text;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

enum class FinishReason { kStop, kLength, kCancelled, kError, kSentinel };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", ...

struct RequestUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;   // sampled tokens, a final EOG token included
  int32_t cached_tokens = 0;       // prompt tokens served from the prefix cache
  int32_t cached_disk_tokens = 0;  // of cached_tokens, read from the disk tier
  int64_t kv_page_ins = 0;         // pages a bounded KV pool read back from its tier for it
  // The position ranges a bounded KV pool kept resident for it (pins and pin_prefix).
  std::vector<std::pair<int32_t, int32_t>> kv_pins;
  double queue_ms = 0;    // submit → first scheduled
  double prefill_ms = 0;  // first scheduled → first token
  double decode_ms = 0;   // first token → finish
  // Its prompt was prefilled by the prefill worker; handoff_ms: the state transfer to the
  // decode stage (0 for a model without recurrent or windowed layers: nothing moves).
  bool prefill_worker = false;
  double handoff_ms = 0;
};

struct FinishEvent {
  FinishReason reason = FinishReason::kStop;
  Status error;               // set when reason == kError (e.g. a stage died)
  std::string text;           // text held back for stop-string matching, now released
                              // ("" when a stop string matched)
  std::string stop_sequence;  // the stop string that ended the output ("" when none did)
  RequestUsage usage;
  // kEmbedding finished with kStop: n_embd floats (RequestKind); empty otherwise.
  std::vector<float> embedding;
};

struct RequestCallbacks {
  // Returns false to cancel the request (client gone).
  std::function<bool(const TokenEvent&)> on_token;
  // want_prompt_logprobs: called once, before the first on_token, with one event per prompt
  // token after the first (the first has nothing before it to be predicted from): its
  // token, logprob and top alternatives; text is "". Returns false to cancel.
  std::function<bool(const std::vector<TokenEvent>&)> on_prompt_logprobs;
  std::function<void(const FinishEvent&)> on_finish;  // called exactly once
  // Optional, for tools that look inside a request (`shardlm run --logits-out`): the
  // logits[n_vocab] row each generated token is chosen from, as the model computed it
  // (before logit_bias and a grammar's mask), called before that token is sampled. The span
  // lives only during the call. A non-ok Status ends the request with kError and that Status.
  std::function<Status(std::span<const float> logits)> on_logits;
  // Optional: prefill progress, called once per collected batch that wrote prompt positions,
  // with how many of the prompt's positions hold KV now (prefix-cache hits included) and
  // the prompt's length; the last call has done == total.
  std::function<void(int done, int total)> on_prefill;
};

struct EngineStats {
  int32_t slots_total = 0;
  int32_t slots_busy = 0;
  int32_t queue_length = 0;
  int64_t requests_total = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generated_tokens_total = 0;
  int64_t kv_pages_total = 0;
  int64_t kv_pages_used = 0;      // held by running sequences (cached-only pages excluded)
  int64_t kv_pages_retained = 0;  // held only by idle slots' retained sequences (/slots)
  // Prefix cache (zero when disabled): prompt tokens served from it and computed, blocks
  // looked up and hit, pages it holds now and pages it gave back to make room.
  int64_t prompt_tokens_cached = 0;
  int64_t prompt_tokens_computed = 0;
  int64_t prefix_cache_lookup_blocks = 0;
  int64_t prefix_cache_hit_blocks = 0;
  int64_t prefix_cache_pages = 0;
  int64_t prefix_cache_evicted_pages = 0;
  // Of prompt_tokens_cached: from pages the memory index held, from pages read from disk.
  int64_t prompt_tokens_memory = 0;
  int64_t prompt_tokens_disk = 0;
  // Bounded KV pool (zero without --kv-pool): page selections by score, and the pages the
  // engine asked every stage to map and to evict.
  int64_t kv_pool_reselects = 0;
  int64_t kv_pool_pages_mapped = 0;
  int64_t kv_pool_pages_evicted = 0;
  int64_t kv_pool_pinned_pages = 0;   // pinned now by the slots' requests (EngineRequest::pins)
  double kv_pool_select_seconds = 0;  // the engine choosing resident pages (not the scoring)
  // Disk tier (zero without --kv-cache-dir): snapshot bytes read and written, files and
  // bytes on disk now, files evicted for the budget, files that failed validation (deleted)
  // or a stage check, failed and dropped writes, pages whose export failed (a stage down).
  int64_t kv_disk_bytes_read = 0;
  int64_t kv_disk_bytes_written = 0;
  int64_t kv_disk_files = 0;
  int64_t kv_disk_bytes = 0;
  int64_t kv_disk_evicted_files = 0;
  int64_t kv_disk_corrupt_files = 0;
  int64_t kv_disk_write_errors = 0;
  int64_t kv_disk_dropped_writes = 0;
  int64_t kv_disk_export_errors = 0;
  // Prefill worker (zero without one): prompts it prefilled and handed over, their prompt
  // tokens it computed, the state bytes copied at handoffs (recurrent and windowed layers; the
  // KV itself is never copied: it lies in shared pages), requests failed by its loss, and
  // whether it is up now.
  int64_t prefill_worker_handoffs = 0;
  int64_t prefill_worker_tokens = 0;
  int64_t prefill_worker_state_bytes = 0;
  int64_t prefill_worker_failed_requests = 0;
  int32_t prefill_worker_up = 0;
};

struct EngineInfo {
  std::string model_name;  // what /v1/models reports
  std::string architecture;
  int32_t n_ctx = 0;  // per-sequence context limit
  int32_t n_vocab = 0;
  int32_t n_embd = 0;  // the length of an embedding
  int32_t n_parallel = 0;
  bool embeddings = false;  // computes RequestKind::kEmbedding requests
  // Bounded KV residency (kv/pager.h): positions resident per sequence and stage (0:
  // unbounded), the tier ("ram" or "file:DIR"), the selection ("qk" or "lru"), sink, tail
  // and reselect interval in positions.
  int32_t kv_pool = 0;
  std::string kv_tier;
  std::string kv_select;
  int32_t kv_sink = 0;
  int32_t kv_tail = 0;
  int32_t kv_reselect = 0;
  std::vector<StageInfo> stages;  // the placement, in pipeline order (GET /props)
};

// Slots (`/slots`, llama.cpp's shape): each of the n_parallel slots runs one request at a
// time. Once its request ends, a slot keeps the sequence it computed (its retained sequence:
// tokens and KV, and a model with recurrent layers' state at its last whole page) until it
// takes its next request, so the sequence can be saved to a file;
// a restore fills an idle slot from such a file and offers the sequence's full pages to the
// prefix cache, so the next prompt that starts with those tokens does not compute them.
enum class SlotState { kIdle, kProcessing, kSaving, kRestoring, kSentinel };
const char* SlotStateName(SlotState state);  // "idle", "processing", "saving", "restoring"

struct SlotInfo {
  int32_t id = 0;
  SlotState state = SlotState::kIdle;
  int32_t n_tokens = 0;  // positions holding KV: the running request's, or the retained ones
};

struct SlotSaveResult {
  int32_t n_saved = 0;     // tokens saved
  uint64_t n_written = 0;  // file bytes
};

struct SlotRestoreResult {
  int32_t n_restored = 0;  // tokens the slot holds now
  uint64_t n_read = 0;     // file bytes
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request. Errors: queue full (kOutOfRange: the server answers 503), prompt
  // longer than the context (kOutOfRange with "context_length_exceeded" in the message),
  // an embedding request to an engine that computes none (kUnsupported), engine
  // unavailable. On success the callbacks will be called.
  virtual Result<RequestId> Submit(EngineRequest request, RequestCallbacks callbacks) = 0;
  // Cancels a queued or running request; its on_finish reports kCancelled. Idempotent.
  virtual void Cancel(RequestId id) = 0;
  virtual EngineStats Stats() const = 0;
  virtual const EngineInfo& info() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // Healthy (all stages reachable); a message otherwise.
  virtual Status Health() const { return Status::Ok(); }

  // Slots (see SlotInfo). `file` is a path the caller has confined to its slot folder.
  // Errors: no such slot (kNotFound), a slot that is processing a request or another slot
  // operation (kConflict, before the file is touched), another save or restore still
  // running after a bounded wait (kResourceExhausted: retry), a save past the slot
  // folder's byte budget (kQuotaExceeded), nothing to save (kInvalidArgument), a missing
  // file (kNotFound), a corrupt, truncated or foreign file (kInvalidData), too few free KV
  // pages (kOutOfRange), a stage down (kUnavailable), a write that failed (kIoError); an
  // engine without slots, or a slot whose recurrent state at its last whole page is gone (a
  // cancelled request's last batch ran on): kUnsupported. A restore that fails changes nothing
  // in the slot.
  virtual std::vector<SlotInfo> Slots() const { return {}; }
  virtual Result<SlotSaveResult> SaveSlot(int32_t slot, const std::filesystem::path& file);
  virtual Result<SlotRestoreResult> RestoreSlot(int32_t slot, const std::filesystem::path& file);
  // Drops the slot's retained sequence; returns how many tokens it held.
  virtual Result<int32_t> EraseSlot(int32_t slot);
};

}  // namespace shardlm
