// One completion in flight between the engine and an HTTP handler. See completion_session.h.
#include "server/completion_session.h"

#include <fmt/format.h>

namespace shardlm::server {
namespace {

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string SseData(const Json& j) { return "data: " + Dump(j) + "\n\n"; }

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// A request the engine failed after accepting it: 503 when a stage went down (the client
// may retry once /health is back), else 500; never a 4xx (the request was fine).
ApiError EngineError(const Status& status) {
  if (status.code() == StatusCode::kUnavailable) return ErrorFromStatus(status);
  ApiError e =
      ErrorFromStatus(status.ok() ? Status(StatusCode::kInternal, "engine error") : status);
  e.http_status = 500;
  e.type = "server_error";
  e.code = "";
  return e;
}

ApiError ErrorFromStatus(const Status& status, const std::string& param) {
  ApiError e;
  e.message = status.message();
  e.param = param;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kInvalidData:
      e.http_status = 400;
      break;
    case StatusCode::kOutOfRange:
      if (status.message().find("context_length_exceeded") != std::string::npos) {
        e.http_status = 400;
        e.code = "context_length_exceeded";
      } else {
        e.http_status = 503;
        e.type = "server_error";
        e.code = "server_overloaded";
      }
      break;
    case StatusCode::kUnsupported:
      e.http_status = 400;
      break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      break;
    case StatusCode::kConflict:  // busy with something else: retry once it is done
      e.http_status = 409;
      break;
    case StatusCode::kUnavailable:  // a stage is down: retry once it is back
      e.http_status = 503;
      e.type = "unavailable_error";
      e.code = "stage_unavailable";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
  }
  return e;
}

CompletionSession::CompletionSession(Engine& engine, PreparedRequest request, ResponseMeta meta,
                                     LogFn log)
    : engine_(engine),
      request_(std::move(request)),
      meta_(std::move(meta)),
      log_(std::move(log)),
      start_(std::chrono::steady_clock::now()),
      parser_(request_.in_reasoning, request_.parse_tools,
              "call_" + meta_.id.substr(meta_.id.size() > 8 ? meta_.id.size() - 8 : 0) + "_") {}

std::shared_ptr<CompletionSession> CompletionSession::Start(Engine& engine, PreparedRequest request,
                                                            ResponseMeta meta, LogFn log,
                                                            ApiError* error) {
  std::shared_ptr<CompletionSession> s(
      new CompletionSession(engine, std::move(request), std::move(meta), std::move(log)));
  const GenerationOptions& o = s->request_.options;
  EngineRequest er;
  er.prompt = s->request_.prompt;
  er.sampling = o.sampling;
  er.sampling.n_logprobs = o.logprobs ? o.top_logprobs : 0;
  er.max_tokens = o.max_tokens;
  er.stop = o.stop;
  er.ignore_eos = o.ignore_eos;
  er.want_logprobs = o.logprobs;
  RequestCallbacks cb;
  cb.on_token = [s](const TokenEvent& ev) { return s->OnToken(ev); };
  cb.on_finish = [s](const FinishEvent& fin) { s->OnFinish(fin); };
  Result<RequestId> id = engine.Submit(std::move(er), std::move(cb));
  if (!id.ok()) {
    *error = ErrorFromStatus(id.status());
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(s->mu_);
  s->id_ = id.value();
  return s;
}

bool CompletionSession::OnToken(const TokenEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return false;
  if (first_token_ms_ < 0) first_token_ms_ = MsSince(start_);
  events_.push_back(Event{false, ev, {}});
  cv_.notify_all();
  return true;
}

void CompletionSession::OnFinish(const FinishEvent& fin) {
  LogFinish(fin);
  std::lock_guard<std::mutex> lock(mu_);
  engine_done_ = true;
  events_.push_back(Event{true, {}, fin});
  cv_.notify_all();
}

void CompletionSession::LogFinish(const FinishEvent& fin) {
  if (!log_) return;
  const RequestUsage& u = fin.usage;
  double ttft = u.queue_ms + u.prefill_ms;
  double tps = u.decode_ms > 0 ? (u.completion_tokens - 1) * 1000.0 / u.decode_ms : 0.0;
  log_(fmt::format(
           "request id={} endpoint={} finish={} prompt_tokens={} cached_tokens={} "
           "cached_disk={} completion_tokens={} ttft_ms={:.1f} decode_tok_s={:.1f} total_ms={:.1f}",
           meta_.id, request_.endpoint == Endpoint::kChat ? "chat" : "completions",
           FinishReasonName(fin.reason), u.prompt_tokens, u.cached_tokens, u.cached_disk_tokens,
           u.completion_tokens, ttft, tps < 0 ? 0.0 : tps, MsSince(start_)) +
       (fin.reason == FinishReason::kError ? " error=\"" + fin.error.message() + "\"" : ""));
}

void CompletionSession::Cancel() {
  RequestId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || engine_done_) return;
    cancelled_ = true;
    id = id_;
  }
  engine_.Cancel(id);
}

bool CompletionSession::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_done_;
}

CompletionSession::Poll CompletionSession::NextEvents(std::chrono::milliseconds wait,
                                                      std::string* out) {
  if (done_sent_) return Poll::kDone;
  std::deque<Event> batch;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return !events_.empty(); });
    batch.swap(events_);
  }
  if (batch.empty()) return Poll::kTimeout;
  for (Event& ev : batch) Process(ev, out);
  return Poll::kData;
}

std::optional<std::variant<Json, ApiError>> CompletionSession::Wait(
    std::chrono::milliseconds poll, const std::function<bool()>& client_gone) {
  auto next_check = std::chrono::steady_clock::now() + poll;
  while (!done_sent_) {
    std::deque<Event> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next_check, [&] { return !events_.empty(); });
      batch.swap(events_);
    }
    // Every `poll`, whether or not tokens keep coming.
    if (client_gone && std::chrono::steady_clock::now() >= next_check) {
      if (client_gone()) {
        Cancel();
        return std::nullopt;
      }
      next_check = std::chrono::steady_clock::now() + poll;
    }
    for (Event& ev : batch) Process(ev, nullptr);
  }
  if (error_) return *error_;
  if (request_.endpoint == Endpoint::kCompletion) {
    std::optional<std::vector<TokenLogprobInfo>> lp;
    if (request_.options.logprobs) lp = logprobs_;
    return CompletionJSON(meta_, request_.echo_prefix + text_, finish_reason_, usage_, lp);
  }
  if (request_.options.logprobs) chat_.logprobs = logprobs_;
  chat_.finish_reason = finish_reason_;
  while (!chat_.reasoning_content.empty() && chat_.reasoning_content.back() == '\n') {
    chat_.reasoning_content.pop_back();
  }
  return ChatCompletionJSON(meta_, chat_, usage_);
}

void CompletionSession::Process(Event& ev, std::string* sse) {
  if (done_sent_) return;
  if (ev.finish) {
    ProcessFinish(ev.fin, sse);
  } else {
    ProcessToken(ev.token, sse);
  }
}

TokenLogprobInfo CompletionSession::LogprobInfo(const TokenEvent& ev) const {
  const Tokenizer& tok = engine_.tokenizer();
  TokenLogprobInfo info;
  info.token = tok.Piece(ev.token, /*render_special=*/true);
  info.logprob = ev.logprob;
  for (const TokenLogprob& t : ev.top) info.top.emplace_back(tok.Piece(t.id, true), t.logprob);
  return info;
}

void CompletionSession::ProcessToken(const TokenEvent& ev, std::string* sse) {
  Json lp_json = nullptr;
  if (request_.options.logprobs) {
    logprobs_.push_back(LogprobInfo(ev));
    lp_json = request_.endpoint == Endpoint::kChat
                  ? ChatLogprobsJSON({logprobs_.back()})
                  : CompletionLogprobsJSON(std::span(&logprobs_.back(), 1));
  }
  if (request_.endpoint == Endpoint::kCompletion) {
    StreamEcho(sse);
    text_ += ev.text;
    // A token whose bytes are held back (part of a UTF-8 character or of a possible stop
    // string) still gets its chunk when logprobs were asked for: one entry per token.
    if (sse && (!ev.text.empty() || !lp_json.is_null())) {
      *sse += SseData(CompletionChunkJSON(meta_, ev.text, "", lp_json));
    }
    return;
  }
  OutputDelta delta = parser_.Push(ev.text);
  if (sse) {
    StreamDelta(delta, lp_json, sse);
  } else {
    chat_.content += delta.content;
    chat_.reasoning_content += delta.reasoning;
    for (ToolCall& c : delta.tool_calls) chat_.tool_calls.push_back(std::move(c));
  }
}

void CompletionSession::StreamDelta(const OutputDelta& delta, const Json& logprobs,
                                    std::string* sse) {
  if (!role_sent_) {
    *sse += SseData(ChatChunkJSON(meta_, Json{{"role", "assistant"}, {"content", ""}}, ""));
    role_sent_ = true;
  }
  if (!delta.reasoning.empty()) {
    *sse += SseData(ChatChunkJSON(meta_, Json{{"reasoning_content", delta.reasoning}}, ""));
  }
  if (!delta.content.empty() || !logprobs.is_null()) {
    *sse += SseData(ChatChunkJSON(meta_, Json{{"content", delta.content}}, "", logprobs));
  }
  for (const ToolCall& call : delta.tool_calls) {
    int index = static_cast<int>(chat_.tool_calls.size());
    chat_.tool_calls.push_back(call);
    Json calls = Json::array({ToolCallJSON(call, index)});
    *sse += SseData(ChatChunkJSON(meta_, Json{{"tool_calls", calls}}, ""));
  }
}

void CompletionSession::StreamEcho(std::string* sse) {
  if (!sse || role_sent_) return;
  role_sent_ = true;  // for completions: the echoed prompt went out first
  if (!request_.echo_prefix.empty()) {
    *sse += SseData(CompletionChunkJSON(meta_, request_.echo_prefix, ""));
  }
}

std::string CompletionSession::FinishReasonText(FinishReason reason) const {
  if (reason == FinishReason::kLength) return "length";
  if (request_.endpoint == Endpoint::kChat && !chat_.tool_calls.empty()) return "tool_calls";
  return "stop";
}

void CompletionSession::ProcessFinish(const FinishEvent& fin, std::string* sse) {
  usage_ = fin.usage;
  done_sent_ = true;
  if (fin.reason == FinishReason::kError) {
    error_ = EngineError(fin.error);
    // As OpenAI does: the error event is the stream's last (no [DONE]), so a client
    // cannot take the text so far for a complete answer.
    if (sse) *sse += SseData(ErrorJSON(*error_));
    return;
  }
  if (request_.endpoint == Endpoint::kCompletion) {
    StreamEcho(sse);
    text_ += fin.text;
    finish_reason_ = FinishReasonText(fin.reason);
    if (sse) *sse += SseData(CompletionChunkJSON(meta_, fin.text, finish_reason_));
  } else {
    OutputDelta delta = parser_.Push(fin.text);
    OutputDelta rest = parser_.Finish();
    delta.content += rest.content;
    delta.reasoning += rest.reasoning;
    for (ToolCall& c : rest.tool_calls) delta.tool_calls.push_back(std::move(c));
    if (sse) {
      StreamDelta(delta, nullptr, sse);
    } else {
      chat_.content += delta.content;
      chat_.reasoning_content += delta.reasoning;
      for (ToolCall& c : delta.tool_calls) chat_.tool_calls.push_back(std::move(c));
    }
    finish_reason_ = FinishReasonText(fin.reason);
    if (sse) *sse += SseData(ChatChunkJSON(meta_, Json::object(), finish_reason_));
  }
  if (!sse) return;
  if (request_.options.include_usage) {
    const char* object =
        request_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
    *sse += SseData(UsageChunkJSON(meta_, object, usage_));
  }
  *sse += "data: [DONE]\n\n";
}

}  // namespace shardlm::server
