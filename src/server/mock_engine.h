// MockEngine: an Engine with no model, so the HTTP layer can be tested
// end to end in milliseconds: it "generates" a scripted reply one byte-token at a time on
// its own thread, honours max_tokens, stop strings, cancellation, a bounded queue and the
// context limit, and counts what the real engine counts. Slot 0 runs every request and
// retains its prompt and reply as its sequence; save writes it to a small file of the
// mock's own format, restore reads one back (a missing file is kNotFound, any other bytes
// kInvalidData), a busy slot 0 is kConflict, like the real engine. It can play a placement (stages)
// and a stage that goes down: refused submits, an unhealthy /health, and a request that
// fails mid-stream, as the real scheduler does when a shard daemon dies. With `embeddings`
// it answers embedding requests with MockEmbedding of their prompt, and it scores a prompt
// (want_prompt_logprobs) with MockPromptLogprob. A request with an output constraint
// (EngineRequest::grammar) checks the reply against it token by token: the reply ends
// (stop) once the grammar is complete, and a token the grammar refuses ends it with kError,
// so HTTP tests see that the constraint reached the engine.
// MockTokenizer: bytes are tokens 0..255, plus ChatML/Qwen special tokens after them, then
// Gemma 4's markup as CONTROL tokens (as its vocabulary has them), which give text only
// when a request asks for them (EngineRequest::rendered_specials), as in the real engine.
//
// Goals: deterministic behaviour that tests can steer (reply text, per-token delay).
// Non-goals: sampling, batching, realistic timing.
//
// Thread safety: every Engine method may be called from any thread; callbacks run on the
// mock's worker thread. Lifetime: the destructor finishes every pending request
// (kCancelled) and joins the worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace shardlm::server {

class MockTokenizer : public Tokenizer {
 public:
  MockTokenizer();
  std::vector<TokenId> Encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string Piece(TokenId id, bool render_special = false) const override;
  int32_t n_vocab() const override { return 256 + static_cast<int32_t>(specials_.size()); }
  TokenId bos() const override { return -1; }
  TokenId eos() const override { return kImEnd; }
  bool add_bos() const override { return false; }
  bool IsEog(TokenId id) const override { return id == kImEnd; }
  bool IsControl(TokenId id) const override {
    return id == kImEnd || id == kImStart || (id >= kChannelOpen && id < n_vocab());
  }
  std::string_view TokenText(TokenId id) const override;
  TokenId FindToken(std::string_view text) const override;

  static constexpr TokenId kImEnd = 256;
  static constexpr TokenId kImStart = 257;
  // Gemma 4's: <|channel>, then <channel|>, <|tool_call>, <tool_call|>, <|"|>, <|turn>.
  static constexpr TokenId kChannelOpen = 262;

 private:
  std::vector<std::string> specials_;
  std::string byte_text_[256];
};

struct MockEngineOptions {
  int32_t n_ctx = 256;
  int32_t n_parallel = 2;
  int32_t max_queue = 4;
  std::string model_name = "mock-model";
  std::vector<StageInfo> stages;  // empty: one local stage "cpu" over layers [0, 2)
  bool embeddings = false;        // computes RequestKind::kEmbedding requests
  int32_t n_embd = 4;
};

// The mock's embedding of `prompt`: n_embd values, value i the mean over the prompt of
// (token % 7) − i (not normalised, like the real engine's).
std::vector<float> MockEmbedding(const std::vector<TokenId>& prompt, int32_t n_embd);
// The mock's logprob of prompt token `position` (>= 1): −0.25 × position; alternative k
// (the token itself first, then the next ids) 0.125 × k less.
float MockPromptLogprob(int position);

class MockEngine : public Engine {
 public:
  explicit MockEngine(MockEngineOptions options = {});
  ~MockEngine() override;

  // The text every request generates (then EOG). Empty: echo the prompt's last 16 bytes.
  void SetReply(std::string reply);
  // Sleep this long before each token, and before each embedding (to test streaming and
  // disconnects).
  void SetTokenDelayMs(int ms) { delay_ms_ = ms; }
  // Accept requests but do not run them until Resume() (to fill the queue).
  void Pause(bool paused);
  // A stage is down (status kUnavailable naming it) or back (Ok): Submit refuses with the
  // status and Health reports it.
  void SetStageDown(Status status);
  // Each request that gets `after_tokens` tokens out then finishes with kError and
  // `status`; a kUnavailable status also takes the stage down (SetStageDown). Ok: off.
  void FailAfterTokens(int after_tokens, Status status);
  int64_t cancelled_count() const { return cancelled_; }
  // Engine::Cancel calls so far (each counts, whether or not its request was still running).
  int64_t cancel_calls() const;
  // The prompt of the last request submitted, as text (special tokens written out): what the
  // chat template rendered for it.
  std::string LastPromptText() const;

  Result<RequestId> Submit(EngineRequest request, RequestCallbacks callbacks) override;
  void Cancel(RequestId id) override;
  EngineStats Stats() const override;
  const EngineInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  Status Health() const override;
  std::vector<SlotInfo> Slots() const override;
  Result<SlotSaveResult> SaveSlot(int32_t slot, const std::filesystem::path& file) override;
  Result<SlotRestoreResult> RestoreSlot(int32_t slot, const std::filesystem::path& file) override;
  Result<int32_t> EraseSlot(int32_t slot) override;

 private:
  struct Pending {
    RequestId id;
    EngineRequest request;
    RequestCallbacks callbacks;
  };
  void Loop();
  void Run(Pending& p);
  // Embedding requests and prompt logprobs; false when the request ended here.
  bool RunPromptOutputs(Pending& p);
  // A request that ends before generating: slot 0 keeps its prompt and is free, then the
  // finish is told.
  void FinishEarly(Pending& p, const FinishEvent& fin);
  std::string ReplyFor(const EngineRequest& request) const;
  bool IsCancelled(RequestId id);
  bool ShouldFail(int32_t tokens_out, Status* status);
  // Under mu_: NotFound for a slot out of range, Conflict while slot 0 runs a request.
  Status CheckSlotLocked(int32_t slot) const;

  MockEngineOptions options_;
  EngineInfo info_;
  MockTokenizer tokenizer_;
  std::atomic<int> delay_ms_{0};
  std::atomic<int64_t> cancelled_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::vector<RequestId> cancel_requests_;
  std::string reply_;
  bool paused_ = false;
  Status down_;          // !ok: a stage is down
  int fail_after_ = -1;  // < 0: no mid-stream failure
  Status fail_status_;
  bool stop_ = false;
  bool busy_ = false;
  std::vector<std::vector<TokenId>> slot_tokens_;  // [slot] retained sequence
  std::vector<TokenId> last_prompt_;
  RequestId next_id_ = 1;
  EngineStats stats_;
  std::thread worker_;
};

}  // namespace shardlm::server
