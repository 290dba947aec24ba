// CompletionSession: one OpenAI completion in flight, between the Engine (which pushes
// token events from its own thread) and the HTTP handler thread (which turns them into SSE
// chunks or one JSON response). No HTTP here, so it is testable without sockets.
//
// Goals: engine callbacks stay quick (they only queue events); all JSON building, output
// parsing (reasoning, tool calls) and logprob rendering happen on the handler thread; a
// client gone mid-stream cancels the request (on_token returns false, Engine::Cancel);
// a client gone while it waits for a whole (non-streamed) response cancels it too; one
// structured log line per request when it finishes.
// Non-goals: n > 1, best_of, echo of logprobs for the prompt.
//
// Thread safety: Start/Next/Wait/Cancel are for one handler thread; the engine's callbacks
// may run concurrently on the engine thread. Lifetime: shared_ptr, kept alive by the
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

#include "runtime/engine.h"
#include "server/chat_format.h"
#include "server/openai_types.h"

namespace shardlm::server {

enum class Endpoint { kChat, kCompletion };

// A request ready for the engine: the prompt is tokenized, the options checked.
struct PreparedRequest {
  Endpoint endpoint = Endpoint::kChat;
  GenerationOptions options;
  std::vector<TokenId> prompt;
  bool in_reasoning = false;  // chat: the prompt opened <think>
  bool parse_tools = false;   // chat: tools were offered
  std::string echo_prefix;    // completions with echo: the prompt text
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
  // Submits to the engine. Errors (queue full, context exceeded) come back as ApiError.
  static std::shared_ptr<CompletionSession> Start(Engine& engine, PreparedRequest request,
                                                  ResponseMeta meta, LogFn log, ApiError* error);

  enum class Poll { kData, kTimeout, kDone };
  // Streaming: the next SSE events ("data: {...}\n\n"), waiting up to `wait`. kDone once
  // everything including "data: [DONE]" was returned.
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
  CompletionSession(Engine& engine, PreparedRequest request, ResponseMeta meta, LogFn log);
  struct Event {
    bool finish = false;
    TokenEvent token;
    FinishEvent fin;
  };
  bool OnToken(const TokenEvent& ev);
  void OnFinish(const FinishEvent& fin);
  void LogFinish(const FinishEvent& fin);
  // Handler-thread processing of one event; appends SSE text when streaming.
  void Process(Event& ev, std::string* sse);
  void ProcessToken(const TokenEvent& ev, std::string* sse);
  void ProcessFinish(const FinishEvent& fin, std::string* sse);
  void StreamEcho(std::string* sse);
  void StreamDelta(const OutputDelta& delta, const Json& logprobs, std::string* sse);
  TokenLogprobInfo LogprobInfo(const TokenEvent& ev) const;
  std::string FinishReasonText(FinishReason reason) const;

  Engine& engine_;
  PreparedRequest request_;
  ResponseMeta meta_;
  LogFn log_;
  RequestId id_ = 0;
  std::chrono::steady_clock::time_point start_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool cancelled_ = false;
  bool engine_done_ = false;
  double first_token_ms_ = -1;

  // Handler-thread state.
  OutputParser parser_;
  ChatResult chat_;
  std::string text_;  // completions
  std::vector<TokenLogprobInfo> logprobs_;
  bool role_sent_ = false;
  bool done_sent_ = false;
  std::optional<ApiError> error_;
  RequestUsage usage_;
  std::string finish_reason_;
};

}  // namespace shardlm::server
