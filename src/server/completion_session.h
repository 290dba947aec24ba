// CompletionSession: one completion in flight, between the Engine (which pushes token events
// from its own thread) and the HTTP handler thread (which turns them into SSE events or one
// JSON response). No HTTP here, so it is testable without sockets.
//
// The session parses the model's output into API-neutral pieces (content, reasoning, tool
// calls, logprobs, then the finish reason, matched stop string and usage) and hands them to
// the request's OutputFormatter, which writes them in its API's shape: chat and legacy
// completions, the Responses API, Anthropic Messages (output_formatter.h). A request may also
// ask for the logprobs of its prompt's tokens (legacy completions' echo), which come before
// the first token.
//
// Goals: engine callbacks stay quick (they only queue events); all parsing, logprob rendering
// and formatting happen on the handler thread; a client gone mid-stream cancels the request
// (on_token returns false, Engine::Cancel); a client gone while it waits for a whole
// (non-streamed) response cancels it too; one structured log line per request when it
// finishes.
// Non-goals: n > 1, best_of, the shape of any API's output.
//
// Thread safety: Start/NextEvents/Wait/Cancel are for one handler thread; the engine's
// callbacks may run concurrently on the engine thread. Lifetime: shared_ptr, kept alive by the
// callbacks until the engine's on_finish and by the handler until the response is sent.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "server/chat_format.h"
#include "server/latency_histograms.h"
#include "server/openai_types.h"
#include "server/output_formatter.h"

namespace shardlm::server {

enum class Endpoint { kChat, kCompletion, kResponses, kMessages, kSentinel };
// The endpoint's name in the request log line: chat, completions, responses, messages.
const char* EndpointName(Endpoint endpoint);
// The request parameter that holds the prompt, for errors about its length: messages, prompt,
// input.
const char* PromptParam(Endpoint endpoint);

// A request ready for the engine: the prompt is tokenized, the options checked.
struct PreparedRequest {
  Endpoint endpoint = Endpoint::kChat;
  GenerationOptions options;
  std::vector<TokenId> prompt;
  bool in_reasoning = false;  // the prompt opened the reasoning (not for completions)
  bool parse_tools = false;   // tools were offered
  ReasoningTags reasoning_tags = kThinkTags;    // the model's, from its chat template
  ToolCallTags tool_call_tags = kToolCallTags;  // the model's, from its chat template
  // The special tokens whose text the output shows (ChatFormatter::markup_tokens).
  std::vector<TokenId> rendered_specials;
  Json tools;  // the tools offered (their schemas type the arguments the output parser reads)
  // Bounded KV pool: the prompt's standing prefix (a chat's system prompt and tools), pinned
  // as far as the pool has room (EngineRequest::pin_prefix).
  int32_t pin_prefix = 0;
  // How the ids of tool calls parsed from the output begin; the session appends the end of
  // the response id and a counter.
  std::string tool_call_prefix = "call_";
  // Also the logprobs of the prompt's tokens (options.top_logprobs alternatives each),
  // before the output's: legacy completions with echo and logprobs.
  bool prompt_logprobs = false;
  // What the output must be (output_constraint.h); null: unconstrained.
  std::shared_ptr<const grammar::Grammar> constraint;
};

// Log sink for the per-request line.
using LogFn = std::function<void(const std::string&)>;

// Maps an engine or parse Status to OpenAI's error (HTTP status, type, code).
// kUnavailable (a stage is down) is 503, type unavailable_error, code stage_unavailable;
// kNotFound 404; kConflict (a slot busy) 409.
ApiError ErrorFromStatus(const Status& status, const std::string& param = "");
// The error of a request that finished with FinishReason::kError: ErrorFromStatus for a
// down stage (503), else 500 server_error.
ApiError EngineError(const Status& status);

class CompletionSession : public std::enable_shared_from_this<CompletionSession> {
 public:
  // Submits to the engine; `formatter` writes the output; `latency` (null: none) observes
  // its time to first token, the time between its tokens and its duration (shared: the
  // engine may finish a request after the server that started it is gone). Errors (queue
  // full, context exceeded) come back as ApiError.
  static std::shared_ptr<CompletionSession> Start(Engine& engine, PreparedRequest request,
                                                  std::unique_ptr<OutputFormatter> formatter,
                                                  LogFn log,
                                                  std::shared_ptr<LatencyHistograms> latency,
                                                  ApiError* error);

  enum class Poll { kData, kTimeout, kDone };
  // Streaming: the next SSE events, waiting up to `wait`. kDone once everything including
  // the stream's last event was returned.
  Poll NextEvents(std::chrono::milliseconds wait, std::string* out);
  // Non-stream: blocks until finished; the response JSON, or an error. Every `poll` without
  // an event it asks `client_gone`: when true the request is cancelled (its slot freed at
  // once, not when the context fills) and the result is nullopt.
  std::optional<std::variant<Json, ApiError>> Wait(
      std::chrono::milliseconds poll = std::chrono::milliseconds(100),
      const std::function<bool()>& client_gone = nullptr);
  // The client is gone: cancel in the engine (idempotent).
  void Cancel();
  bool finished() const;

 private:
  CompletionSession(Engine& engine, PreparedRequest request,
                    std::unique_ptr<OutputFormatter> formatter, LogFn log,
                    std::shared_ptr<LatencyHistograms> latency);
  enum class EventKind { kToken, kPrompt, kFinish, kSentinel };
  struct Event {
    EventKind kind = EventKind::kToken;
    TokenEvent token;
    FinishEvent fin;
    std::vector<TokenEvent> prompt;  // kPrompt: one per prompt token after the first
  };
  bool OnToken(const TokenEvent& ev);
  bool OnPromptLogprobs(const std::vector<TokenEvent>& events);
  void OnFinish(const FinishEvent& fin);
  void LogFinish(const FinishEvent& fin);
  // Handler-thread processing of one event; appends SSE text when streaming.
  void Process(Event& ev, std::string* sse);
  void ProcessToken(const TokenEvent& ev, std::string* sse);
  void ProcessPrompt(const std::vector<TokenEvent>& events, std::string* sse);
  void ProcessFinish(const FinishEvent& fin, std::string* sse);
  // What `text` adds to the output: parsed for chat-like endpoints, verbatim for completions.
  OutputDelta Parse(const std::string& text);
  void Accumulate(const OutputDelta& delta);
  TokenLogprobInfo LogprobInfo(const TokenEvent& ev) const;

  Engine& engine_;
  PreparedRequest request_;
  std::unique_ptr<OutputFormatter> formatter_;
  LogFn log_;
  std::shared_ptr<LatencyHistograms> latency_;
  RequestId id_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_token_;  // under mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool cancelled_ = false;
  bool engine_done_ = false;
  double first_token_ms_ = -1;

  // Handler-thread state.
  OutputParser parser_;
  GenerationResult result_;
  bool stream_started_ = false;
  bool done_sent_ = false;
  std::optional<ApiError> error_;
};

}  // namespace shardlm::server
