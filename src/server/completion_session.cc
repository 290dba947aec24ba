// One completion in flight between the engine and an HTTP handler. See completion_session.h.
#include "server/completion_session.h"

#include <fmt/format.h>

#include "base/elapsed.h"

namespace shardlm::server {
namespace {

// The end of a response id ("chatcmpl-0a1b2c3d00000007" → "00000007"): enough to tell apart
// the tool calls of concurrent responses in a log.
std::string IdTail(const std::string& id) { return id.substr(id.size() > 8 ? id.size() - 8 : 0); }

}  // namespace

const char* EndpointName(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kChat:
      return "chat";
    case Endpoint::kCompletion:
      return "completions";
    case Endpoint::kResponses:
      return "responses";
    case Endpoint::kMessages:
      return "messages";
    case Endpoint::kSentinel:
      break;
  }
  return "?";
}

const char* PromptParam(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kCompletion:
      return "prompt";
    case Endpoint::kResponses:
      return "input";
    default:
      return "messages";
  }
}

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

CompletionSession::CompletionSession(Engine& engine, PreparedRequest request,
                                     std::unique_ptr<OutputFormatter> formatter, LogFn log,
                                     std::shared_ptr<LatencyHistograms> latency)
    : engine_(engine),
      request_(std::move(request)),
      formatter_(std::move(formatter)),
      log_(std::move(log)),
      latency_(std::move(latency)),
      start_(std::chrono::steady_clock::now()),
      parser_(request_.in_reasoning, request_.parse_tools,
              request_.tool_call_prefix + IdTail(formatter_->meta().id) + "_",
              request_.reasoning_tags, request_.tools, request_.tool_call_tags) {}

std::shared_ptr<CompletionSession> CompletionSession::Start(
    Engine& engine, PreparedRequest request, std::unique_ptr<OutputFormatter> formatter, LogFn log,
    std::shared_ptr<LatencyHistograms> latency, ApiError* error) {
  std::shared_ptr<CompletionSession> s(new CompletionSession(
      engine, std::move(request), std::move(formatter), std::move(log), std::move(latency)));
  const GenerationOptions& o = s->request_.options;
  EngineRequest er;
  er.prompt = s->request_.prompt;
  er.sampling = o.sampling;
  er.sampling.n_logprobs = o.logprobs ? o.top_logprobs : 0;
  er.max_tokens = o.max_tokens;
  er.stop = o.stop;
  er.ignore_eos = o.ignore_eos;
  er.want_logprobs = o.logprobs;
  er.want_prompt_logprobs = s->request_.prompt_logprobs;
  er.logit_bias = o.logit_bias;
  er.pins = o.pins;
  er.pin_prefix = s->request_.pin_prefix;
  er.rendered_specials = s->request_.rendered_specials;
  er.grammar = s->request_.constraint;
  RequestCallbacks cb;
  cb.on_token = [s](const TokenEvent& ev) { return s->OnToken(ev); };
  if (er.want_prompt_logprobs) {
    cb.on_prompt_logprobs = [s](const std::vector<TokenEvent>& evs) {
      return s->OnPromptLogprobs(evs);
    };
  }
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
  const auto now = std::chrono::steady_clock::now();
  const bool first = first_token_ms_ < 0;
  if (first) first_token_ms_ = MsSince(start_);
  if (latency_ != nullptr) {
    const std::string_view endpoint = EndpointName(request_.endpoint);
    if (first) {
      latency_->Observe(LatencyHistograms::Kind::kTimeToFirstToken, endpoint,
                        std::chrono::duration<double>(now - start_).count());
    } else {
      latency_->Observe(LatencyHistograms::Kind::kInterToken, endpoint,
                        std::chrono::duration<double>(now - last_token_).count());
    }
  }
  last_token_ = now;
  events_.push_back(Event{EventKind::kToken, ev, {}, {}});
  cv_.notify_all();
  return true;
}

bool CompletionSession::OnPromptLogprobs(const std::vector<TokenEvent>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return false;
  events_.push_back(Event{EventKind::kPrompt, {}, {}, events});
  cv_.notify_all();
  return true;
}

void CompletionSession::OnFinish(const FinishEvent& fin) {
  LogFinish(fin);
  if (latency_ != nullptr) {
    latency_->Observe(LatencyHistograms::Kind::kRequest, EndpointName(request_.endpoint),
                      MsSince(start_) / 1000.0);
  }
  std::lock_guard<std::mutex> lock(mu_);
  engine_done_ = true;
  events_.push_back(Event{EventKind::kFinish, {}, fin, {}});
  cv_.notify_all();
}

void CompletionSession::LogFinish(const FinishEvent& fin) {
  if (!log_) return;
  const RequestUsage& u = fin.usage;
  double ttft = u.queue_ms + u.prefill_ms;
  double tps = u.decode_ms > 0 ? (u.completion_tokens - 1) * 1000.0 / u.decode_ms : 0.0;
  log_(fmt::format(
           "request id={} endpoint={} finish={} prompt_tokens={} cached_tokens={} "
           "cached_disk={} kv_page_ins={} completion_tokens={} ttft_ms={:.1f} decode_tok_s={:.1f} "
           "total_ms={:.1f}",
           formatter_->meta().id, EndpointName(request_.endpoint), FinishReasonName(fin.reason),
           u.prompt_tokens, u.cached_tokens, u.cached_disk_tokens, u.kv_page_ins,
           u.completion_tokens, ttft, tps < 0 ? 0.0 : tps, MsSince(start_)) +
       (u.prefill_worker ? fmt::format(" prefill=worker handoff_ms={:.2f}", u.handoff_ms) : "") +
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
  bool wrote_start = false;
  if (!stream_started_) {
    stream_started_ = true;
    const size_t before = out->size();
    formatter_->StreamStart(out);
    wrote_start = out->size() > before;
  }
  std::deque<Event> batch;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // What StreamStart wrote goes out at once, not after the first token.
    cv_.wait_for(lock, wrote_start ? std::chrono::milliseconds(0) : wait,
                 [&] { return !events_.empty(); });
    batch.swap(events_);
  }
  for (Event& ev : batch) Process(ev, out);
  return batch.empty() && !wrote_start ? Poll::kTimeout : Poll::kData;
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
  // A whole response's reasoning ends where the model's text does; a stream has already sent
  // whatever newlines came before </think>.
  while (!result_.reasoning.empty() && result_.reasoning.back() == '\n') {
    result_.reasoning.pop_back();
  }
  return formatter_->Whole(result_);
}

void CompletionSession::Process(Event& ev, std::string* sse) {
  if (done_sent_) return;
  switch (ev.kind) {
    case EventKind::kToken:
      return ProcessToken(ev.token, sse);
    case EventKind::kPrompt:
      return ProcessPrompt(ev.prompt, sse);
    case EventKind::kFinish:
      return ProcessFinish(ev.fin, sse);
    case EventKind::kSentinel:
      break;
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

OutputDelta CompletionSession::Parse(const std::string& text) {
  if (request_.endpoint != Endpoint::kCompletion) return parser_.Push(text);
  OutputDelta delta;
  delta.content = text;
  return delta;
}

void CompletionSession::Accumulate(const OutputDelta& delta) {
  result_.content += delta.content;
  result_.reasoning += delta.reasoning;
  result_.tool_calls.insert(result_.tool_calls.end(), delta.tool_calls.begin(),
                            delta.tool_calls.end());
}

void CompletionSession::ProcessToken(const TokenEvent& ev, std::string* sse) {
  const TokenLogprobInfo* logprob = nullptr;
  if (request_.options.logprobs) {
    result_.logprobs.push_back(LogprobInfo(ev));
    logprob = &result_.logprobs.back();
  }
  // A token inside <think>…</think> (either tag included) is a reasoning token.
  const bool was_reasoning = parser_.in_reasoning();
  OutputDelta delta = Parse(ev.text);
  if (was_reasoning || parser_.in_reasoning()) ++result_.reasoning_tokens;
  Accumulate(delta);
  if (sse) formatter_->StreamDelta(delta, logprob, sse);
}

// The prompt's first token has no logprob (nothing before it predicts it); each event is
// the token after the one before.
void CompletionSession::ProcessPrompt(const std::vector<TokenEvent>& events, std::string* sse) {
  result_.prompt_logprobs.clear();
  if (!request_.prompt.empty()) {
    TokenLogprobInfo first;
    first.token = engine_.tokenizer().Piece(request_.prompt.front(), /*render_special=*/true);
    first.has_logprob = false;
    result_.prompt_logprobs.push_back(std::move(first));
  }
  for (const TokenEvent& ev : events) result_.prompt_logprobs.push_back(LogprobInfo(ev));
  if (sse) formatter_->StreamPromptLogprobs(result_.prompt_logprobs, sse);
}

void CompletionSession::ProcessFinish(const FinishEvent& fin, std::string* sse) {
  result_.usage = fin.usage;
  done_sent_ = true;
  if (fin.reason == FinishReason::kError) {
    error_ = EngineError(fin.error);
    if (sse) formatter_->StreamError(*error_, sse);
    return;
  }
  OutputDelta last = Parse(fin.text);
  if (request_.endpoint != Endpoint::kCompletion) {
    OutputDelta rest = parser_.Finish();
    last.content += rest.content;
    last.reasoning += rest.reasoning;
    for (ToolCall& c : rest.tool_calls) last.tool_calls.push_back(std::move(c));
  }
  Accumulate(last);
  result_.finish = fin.reason;
  result_.stop_sequence = fin.stop_sequence;
  if (sse) formatter_->StreamEnd(last, result_, sse);
}

}  // namespace shardlm::server
