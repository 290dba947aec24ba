// HTTP routes, the checks before a body is read, error shapes, SSE pumping. See
// http_server.h; the sockets are http_transport.h's.
#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>

#include "server/anthropic_api.h"
#include "server/anthropic_output.h"
#include "server/chat_format.h"
#include "server/completion_session.h"
#include "server/embeddings_api.h"
#include "server/engine_metrics.h"
#include "server/http_transport.h"
#include "server/openai_output.h"
#include "server/openai_types.h"
#include "server/output_constraint.h"
#include "server/props.h"
#include "server/request_guard.h"
#include "server/response_store.h"
#include "server/responses_api.h"
#include "server/responses_output.h"
#include "server/slot_api.h"

namespace shardlm::server {
namespace {

// How long a handler waits for engine events before checking that its client is still
// there: short enough that a disconnect frees its slot quickly.
constexpr std::chrono::milliseconds kClientPoll{100};

// Every Json the server writes was built by it or parsed under the request limits
// (json_limits.h), so its depth and size are bounded before it gets here.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

enum class Route {
  kChat,
  kCompletion,
  kModels,
  kHealth,
  kMetrics,
  kTokenize,
  kDetokenize,
  kProps,
  kSlots,
  kSlotAction,
  kModel,
  kResponses,
  kMessages,
  kCountTokens,
  kEmbeddings,
  kSentinel
};

struct RouteEntry {
  const char* path;
  Route route;
  const char* method;
};

constexpr RouteEntry kRoutes[] = {
    {"/v1/chat/completions", Route::kChat, "POST"},
    {"/chat/completions", Route::kChat, "POST"},
    {"/v1/completions", Route::kCompletion, "POST"},
    {"/completions", Route::kCompletion, "POST"},
    {"/v1/models", Route::kModels, "GET"},
    {"/models", Route::kModels, "GET"},
    {"/health", Route::kHealth, "GET"},
    {"/metrics", Route::kMetrics, "GET"},
    {"/tokenize", Route::kTokenize, "POST"},
    {"/detokenize", Route::kDetokenize, "POST"},
    {"/props", Route::kProps, "GET"},
    {"/slots", Route::kSlots, "GET"},
    {"/v1/responses", Route::kResponses, "POST"},
    {"/responses", Route::kResponses, "POST"},
    {"/v1/messages", Route::kMessages, "POST"},
    {"/v1/messages/count_tokens", Route::kCountTokens, "POST"},
    {"/v1/embeddings", Route::kEmbeddings, "POST"},
    {"/embeddings", Route::kEmbeddings, "POST"},
};

constexpr std::string_view kSlotPrefix = "/slots/";
// GET /v1/models/{id}: an id may hold '/' ("org/model"), sent as is or percent-encoded.
constexpr std::string_view kModelPrefixes[] = {"/v1/models/", "/models/"};

// The route of a path and the method it takes, or nullopt for an unknown path.
std::optional<RouteEntry> FindRoute(const std::string& path) {
  for (const RouteEntry& r : kRoutes) {
    if (path == r.path) return r;
  }
  if (path.starts_with(kSlotPrefix) && path.find('/', kSlotPrefix.size()) == std::string::npos) {
    return RouteEntry{"/slots/{id}", Route::kSlotAction, "POST"};
  }
  for (std::string_view prefix : kModelPrefixes) {
    if (path.starts_with(prefix) && path.size() > prefix.size()) {
      return RouteEntry{"/v1/models/{id}", Route::kModel, "GET"};
    }
  }
  return std::nullopt;
}

HttpResponse JsonResponse(int status, const Json& j) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(j);
  return r;
}

// An error in the shape of the API its path belongs to: Anthropic's on the /v1/messages
// routes, else OpenAI's.
HttpResponse ErrorResponse(const ApiError& e, std::string_view path) {
  HttpResponse r =
      JsonResponse(e.http_status, IsAnthropicPath(path) ? AnthropicErrorJSON(e) : ErrorJSON(e));
  // Unavailable (503) and too much at once (429): both pass, so say when to try again.
  if (e.http_status == 503 || e.http_status == 429) r.headers.push_back({"Retry-After", "1"});
  return r;
}

// One exchange's way back to its client: every response carries `headers` (CORS).
struct Reply {
  ResponseWriter& writer;
  std::vector<HttpHeader> headers;
  std::string_view path;  // the request's: whose error shape to answer in

  void Send(HttpResponse r) {
    r.headers.insert(r.headers.end(), headers.begin(), headers.end());
    writer.Send(r);
  }
  void Json(const server::Json& j) { Send(JsonResponse(200, j)); }
  void Error(const ApiError& e) { Send(ErrorResponse(e, path)); }
  void Status(const shardlm::Status& st, const std::string& param) {
    Error(ErrorFromStatus(st, param));
  }
};

}  // namespace

struct HttpServer::Impl : HttpService {
  Engine& engine;
  ServerOptions options;
  std::optional<ChatFormatter> formatter;
  std::optional<RequestGuard> guard;
  std::unique_ptr<HttpTransport> transport;
  std::atomic<uint64_t> next_id{1};
  uint64_t id_salt = std::random_device{}();
  std::mutex counts_mu;
  std::map<int, int64_t> responses_by_status;
  // Time to first token, between tokens, per request; shared with the sessions, which the
  // engine may finish after this server is gone.
  std::shared_ptr<LatencyHistograms> latency = std::make_shared<LatencyHistograms>();
  ResponseStore response_store;  // previous_response_id and item_reference of /v1/responses

  Impl(Engine& e, ServerOptions o) : engine(e), options(std::move(o)) {}

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }
  ResponseMeta NewMeta(const char* prefix) {
    uint64_t n = next_id.fetch_add(1);
    return ResponseMeta{fmt::format("{}{:08x}{:08x}", prefix, static_cast<uint32_t>(id_salt), n),
                        static_cast<int64_t>(std::time(nullptr)), engine.info().model_name};
  }

  // HttpService.
  std::optional<HttpResponse> CheckHeaders(const HttpRequest& request) override;
  void Handle(const HttpRequest& request, ResponseWriter& writer) override;
  HttpResponse ErrorBody(const HttpRequest& request, int status,
                         const std::string& message) const override;
  void OnResponse(const HttpRequest& request, int status) override;

  void HandleChat(const HttpRequest& req, Reply& res);
  void HandleCompletion(const HttpRequest& req, Reply& res);
  void HandleResponses(const HttpRequest& req, Reply& res);
  void HandleMessages(const HttpRequest& req, Reply& res);
  void HandleCountTokens(const HttpRequest& req, Reply& res) const;
  // A chat request's prompt, rendered and tokenized; nullopt when it failed (answered).
  std::optional<PreparedRequest> PrepareChat(const ChatCompletionRequest& chat, Endpoint endpoint,
                                             Reply& res) const;
  // Sets the output constraint of a generating chat-shaped request (output_constraint.h);
  // false when the request was refused (answered).
  bool Constrain(const ChatCompletionRequest& chat, PreparedRequest& prep, Reply& res) const;
  void Respond(PreparedRequest prep, std::unique_ptr<OutputFormatter> output, Reply& res);
  void Stream(const std::shared_ptr<CompletionSession>& session, Reply& res);
  Json ModelJSON() const;
  void HandleModels(Reply& res) const;
  void HandleModel(const HttpRequest& req, Reply& res) const;
  void HandleHealth(Reply& res) const;
  void HandleMetrics(Reply& res);
  void HandleTokenize(const HttpRequest& req, Reply& res) const;
  void HandleDetokenize(const HttpRequest& req, Reply& res) const;
  void HandleSlotAction(const HttpRequest& req, Reply& res);
  void HandleEmbeddings(const HttpRequest& req, Reply& res);
};

HttpResponse HttpServer::Impl::ErrorBody(const HttpRequest& request, int status,
                                         const std::string& message) const {
  ApiError e;
  e.http_status = status;
  e.message = message;
  if (status >= 500) e.type = "server_error";
  if (status == 413) e.code = "request_too_large";
  return ErrorResponse(e, request.path);
}

void HttpServer::Impl::OnResponse(const HttpRequest& req, int status) {
  {
    std::lock_guard<std::mutex> lock(counts_mu);
    responses_by_status[status]++;
  }
  if (status >= 400) {
    Log(fmt::format("http {} {} -> {} client={}", LogSafe(req.method, 16), LogSafe(req.target),
                    status, req.remote));
  }
}

// Before the body: who is asking (Host, Origin), CORS preflight, the API key, the route and
// its method. The transport then checks the body's size.
std::optional<HttpResponse> HttpServer::Impl::CheckHeaders(const HttpRequest& req) {
  if (std::optional<ApiError> e = guard->CheckSource(req)) return ErrorResponse(*e, req.path);
  if (req.method == "OPTIONS") return guard->Options(req);
  std::vector<HttpHeader> cors = guard->ResponseHeaders(req);
  auto refuse = [&](const ApiError& e) {
    HttpResponse r = ErrorResponse(e, req.path);
    r.headers.insert(r.headers.end(), cors.begin(), cors.end());
    return r;
  };
  if (std::optional<ApiError> e = guard->CheckKey(req)) return refuse(*e);
  std::optional<RouteEntry> route = FindRoute(req.path);
  ApiError e;
  if (!route) {
    e.http_status = 404;
    e.type = "not_found_error";
    e.message = fmt::format("unknown route {} {}", LogSafe(req.method, 16), LogSafe(req.path));
    return refuse(e);
  }
  if (req.method != route->method) {
    e.http_status = 405;
    e.message = fmt::format("method {} is not allowed on {} (use {})", LogSafe(req.method, 16),
                            LogSafe(req.path), route->method);
    return refuse(e);
  }
  return std::nullopt;
}

void HttpServer::Impl::Handle(const HttpRequest& req, ResponseWriter& writer) {
  Reply res{writer, guard->ResponseHeaders(req), req.path};
  const RouteEntry route = *FindRoute(req.path);  // CheckHeaders found it
  // A POST with no body at all (`curl -X POST` without -d): only a slot action takes none.
  if (req.body.empty() && route.route != Route::kSlotAction && req.method == "POST") {
    return res.Status(InvalidArgument("the request has no body: send a JSON object, or "
                                      "Content-Length: 0 (curl: -d '')"),
                      "");
  }
  switch (route.route) {
    case Route::kChat:
      return HandleChat(req, res);
    case Route::kCompletion:
      return HandleCompletion(req, res);
    case Route::kModels:
      return HandleModels(res);
    case Route::kHealth:
      return HandleHealth(res);
    case Route::kMetrics:
      return HandleMetrics(res);
    case Route::kTokenize:
      return HandleTokenize(req, res);
    case Route::kDetokenize:
      return HandleDetokenize(req, res);
    case Route::kProps:
      return res.Json(PropsJSON(engine.info()));
    case Route::kSlots:
      return res.Json(SlotsJSON(engine.Slots(), engine.info().n_ctx));
    case Route::kSlotAction:
      return HandleSlotAction(req, res);
    case Route::kModel:
      return HandleModel(req, res);
    case Route::kResponses:
      return HandleResponses(req, res);
    case Route::kMessages:
      return HandleMessages(req, res);
    case Route::kCountTokens:
      return HandleCountTokens(req, res);
    case Route::kEmbeddings:
      return HandleEmbeddings(req, res);
    case Route::kSentinel:
      break;
  }
}

void HttpServer::Impl::Respond(PreparedRequest prep, std::unique_ptr<OutputFormatter> output,
                               Reply& res) {
  const int32_t n_ctx = engine.info().n_ctx;
  if (prep.prompt.empty()) {
    return res.Status(InvalidArgument("the prompt is empty"), "prompt");
  }
  if (n_ctx > 0 && static_cast<int64_t>(prep.prompt.size()) >= n_ctx) {
    return res.Status(OutOfRange("context_length_exceeded: the prompt has {} tokens, the "
                                 "context holds {}",
                                 prep.prompt.size(), n_ctx),
                      PromptParam(prep.endpoint));
  }
  for (const auto& [id, bias] : prep.options.logit_bias) {
    if (id >= engine.tokenizer().n_vocab()) {
      return res.Status(InvalidArgument("logit_bias: token id {} is outside the vocabulary "
                                        "(0 to {})",
                                        id, engine.tokenizer().n_vocab() - 1),
                        "logit_bias");
    }
  }
  if (!prep.options.seed_given) prep.options.sampling.seed = std::random_device{}();
  bool stream = prep.options.stream;
  ApiError error;
  auto session = CompletionSession::Start(engine, std::move(prep), std::move(output), options.log,
                                          latency, &error);
  if (!session) return res.Error(error);
  if (stream) return Stream(session, res);
  auto result = session->Wait(kClientPoll, [&res] { return res.writer.ClientGone(); });
  if (!result) return;  // the client left: nothing to send
  if (auto* e = std::get_if<ApiError>(&*result)) return res.Error(*e);
  res.Json(std::get<Json>(*result));
}

// SSE: events as the engine makes them; a client that leaves (a failed write, or a closed
// connection noticed while waiting) cancels the request.
void HttpServer::Impl::Stream(const std::shared_ptr<CompletionSession>& session, Reply& res) {
  std::vector<HttpHeader> headers = res.headers;
  headers.push_back({"Cache-Control", "no-cache"});
  if (!res.writer.StartStream(200, "text/event-stream", headers)) return session->Cancel();
  auto next_check = std::chrono::steady_clock::now() + kClientPoll;
  while (true) {
    std::string out;
    const CompletionSession::Poll poll = session->NextEvents(kClientPoll, &out);
    if (!out.empty() && !res.writer.WriteStream(out)) return session->Cancel();
    if (poll == CompletionSession::Poll::kDone) {
      res.writer.EndStream();
      return;
    }
    // Also while tokens come but nothing is written (held back by a stop string or a tag).
    if (std::chrono::steady_clock::now() >= next_check) {
      if (res.writer.ClientGone()) return session->Cancel();
      next_check = std::chrono::steady_clock::now() + kClientPoll;
    }
  }
}

void HttpServer::Impl::HandleChat(const HttpRequest& req, Reply& res) {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return res.Status(body.status(), "");
  std::string param;
  Result<ChatCompletionRequest> chat = ChatCompletionRequestFromJSON(body.value(), &param);
  if (!chat.ok()) return res.Status(chat.status(), param);
  std::optional<PreparedRequest> prep = PrepareChat(chat.value(), Endpoint::kChat, res);
  if (!prep || !Constrain(chat.value(), *prep, res)) return;
  auto output = std::make_unique<ChatCompletionFormatter>(NewMeta("chatcmpl-"), prep->options);
  Respond(std::move(*prep), std::move(output), res);
}

std::optional<PreparedRequest> HttpServer::Impl::PrepareChat(const ChatCompletionRequest& chat,
                                                             Endpoint endpoint, Reply& res) const {
  Result<ChatPrompt> prompt = formatter->Tokenize(chat, engine.tokenizer());
  if (!prompt.ok()) {
    res.Status(prompt.status(), PromptParam(endpoint));
    return std::nullopt;
  }
  PreparedRequest prep;
  prep.endpoint = endpoint;
  prep.options = chat.options;
  prep.prompt = std::move(prompt->tokens);
  prep.in_reasoning = prompt->opens_reasoning;
  prep.parse_tools = !chat.tools.is_null();
  prep.reasoning_tags = formatter->reasoning_tags();
  prep.tool_call_tags = formatter->tool_call_tags();
  prep.rendered_specials = formatter->markup_tokens();
  prep.tools = chat.tools;
  // Agents resend their system prompt and tools every turn: a bounded pool keeps them.
  if (engine.info().kv_pool > 0) {
    prep.pin_prefix = formatter->StandingPrefix(chat, prep.prompt, engine.tokenizer());
  }
  return prep;
}

bool HttpServer::Impl::Constrain(const ChatCompletionRequest& chat, PreparedRequest& prep,
                                 Reply& res) const {
  ConstraintContext context;
  context.endpoint = prep.endpoint;
  context.in_reasoning = prep.in_reasoning;
  context.reasoning_tags = prep.reasoning_tags;
  context.tool_call_syntax = formatter->tool_call_syntax();
  context.tool_call_tags = formatter->tool_call_tags();
  std::string param;
  Result<OutputGrammar> constraint = ChatOutputConstraint(chat, context, &param);
  if (!constraint.ok()) {
    res.Status(constraint.status(), param);
    return false;
  }
  prep.constraint = std::move(constraint).value();
  return true;
}

void HttpServer::Impl::HandleCompletion(const HttpRequest& req, Reply& res) {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return res.Status(body.status(), "");
  std::string param;
  Result<CompletionRequest> cr = CompletionRequestFromJSON(body.value(), &param);
  if (!cr.ok()) return res.Status(cr.status(), param);
  const Tokenizer& tok = engine.tokenizer();
  PreparedRequest prep;
  prep.endpoint = Endpoint::kCompletion;
  prep.options = cr->options;
  std::string echo_prefix;
  if (cr->has_prompt_tokens) {
    for (TokenId id : cr->prompt_tokens) {
      if (id >= tok.n_vocab()) {
        return res.Status(InvalidArgument("token id {} is outside the vocabulary", id), "prompt");
      }
    }
    prep.prompt = cr->prompt_tokens;
    if (cr->echo) echo_prefix = tok.Decode(cr->prompt_tokens);
  } else {
    prep.prompt = tok.Encode(cr->prompt, /*add_special=*/true, /*parse_special=*/true);
    if (cr->echo) echo_prefix = cr->prompt;
  }
  prep.prompt_logprobs = cr->echo && cr->options.logprobs;
  Result<OutputGrammar> constraint = CompletionOutputConstraint(cr.value(), &param);
  if (!constraint.ok()) return res.Status(constraint.status(), param);
  prep.constraint = std::move(constraint).value();
  auto output = std::make_unique<TextCompletionFormatter>(NewMeta("cmpl-"), prep.options,
                                                          std::move(echo_prefix));
  Respond(std::move(prep), std::move(output), res);
}

void HttpServer::Impl::HandleResponses(const HttpRequest& req, Reply& res) {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return res.Status(body.status(), "");
  std::string param;
  Result<ResponsesRequest> request =
      ResponsesRequestFromJSON(body.value(), &response_store, &param);
  if (!request.ok()) return res.Status(request.status(), param);
  std::optional<PreparedRequest> prep = PrepareChat(request->chat, Endpoint::kResponses, res);
  if (!prep || !Constrain(request->chat, *prep, res)) return;
  ResponsesOutputOptions out;
  out.echo = std::move(request->echo);
  out.store = request->store ? &response_store : nullptr;
  out.input_items = std::move(request->input_items);
  out.previous_response_id = std::move(request->previous_response_id);
  auto output = std::make_unique<ResponsesFormatter>(NewMeta("resp_"), std::move(out));
  Respond(std::move(*prep), std::move(output), res);
}

void HttpServer::Impl::HandleMessages(const HttpRequest& req, Reply& res) {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return res.Status(body.status(), "");
  std::string param;
  Result<ChatCompletionRequest> chat = MessagesRequestFromJSON(body.value(), &param);
  if (!chat.ok()) return res.Status(chat.status(), param);
  std::optional<PreparedRequest> prep = PrepareChat(chat.value(), Endpoint::kMessages, res);
  if (!prep || !Constrain(chat.value(), *prep, res)) return;
  prep->tool_call_prefix = "toolu_";
  const auto prompt_tokens = static_cast<int32_t>(prep->prompt.size());
  auto output = std::make_unique<AnthropicFormatter>(NewMeta("msg_"), prompt_tokens);
  Respond(std::move(*prep), std::move(output), res);
}

// The prompt's length as /v1/messages would render it; nothing is generated.
void HttpServer::Impl::HandleCountTokens(const HttpRequest& req, Reply& res) const {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return res.Status(body.status(), "");
  std::string param;
  Result<ChatCompletionRequest> chat = CountTokensRequestFromJSON(body.value(), &param);
  if (!chat.ok()) return res.Status(chat.status(), param);
  std::optional<PreparedRequest> prep = PrepareChat(chat.value(), Endpoint::kMessages, res);
  if (!prep) return;
  res.Json(Json{{"input_tokens", prep->prompt.size()}});
}

Json HttpServer::Impl::ModelJSON() const {
  const EngineInfo& info = engine.info();
  return Json{{"id", info.model_name},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "shardlm"},
              {"meta", Json{{"architecture", info.architecture},
                            {"n_ctx", info.n_ctx},
                            {"n_vocab", info.n_vocab},
                            {"n_parallel", info.n_parallel},
                            {"stages", StagesJSON(info.stages)}}}};
}

void HttpServer::Impl::HandleModels(Reply& res) const {
  res.Json(Json{{"object", "list"}, {"data", Json::array({ModelJSON()})}});
}

void HttpServer::Impl::HandleModel(const HttpRequest& req, Reply& res) const {
  std::string_view rest = req.path;
  for (std::string_view prefix : kModelPrefixes) {
    if (rest.starts_with(prefix)) rest.remove_prefix(prefix.size());
  }
  const std::string id = PercentDecode(rest);
  if (id == engine.info().model_name) return res.Json(ModelJSON());
  ApiError e;
  e.http_status = 404;
  e.type = "invalid_request_error";
  e.code = "model_not_found";
  e.param = "model";
  e.message = fmt::format("the model '{}' does not exist here (this server serves '{}')", id,
                          engine.info().model_name);
  res.Error(e);
}

// Healthy: 200 {"status":"ok"}. Otherwise 503 with OpenAI's error object (a down stage:
// code stage_unavailable, the message naming the stage) and "status":"unavailable", so
// both load balancers and OpenAI clients read it.
void HttpServer::Impl::HandleHealth(Reply& res) const {
  Status st = engine.Health();
  if (st.ok()) return res.Json(Json{{"status", "ok"}});
  ApiError e = ErrorFromStatus(st);
  e.http_status = 503;
  e.type = "unavailable_error";
  Json body = ErrorJSON(e);
  body["status"] = "unavailable";
  HttpResponse r = JsonResponse(503, body);
  r.headers.push_back({"Retry-After", "1"});
  res.Send(std::move(r));
}

void HttpServer::Impl::HandleMetrics(Reply& res) {
  std::string out = EngineMetricsText(engine.Stats());
  out += latency->Text();
  if (options.metrics_extra) out += options.metrics_extra();
  out +=
      "# HELP shardlm_http_responses_total HTTP responses by status.\n"
      "# TYPE shardlm_http_responses_total counter\n";
  std::lock_guard<std::mutex> lock(counts_mu);
  for (const auto& [status, count] : responses_by_status) {
    out += fmt::format("shardlm_http_responses_total{{status=\"{}\"}} {}\n", status, count);
  }
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = std::move(out);
  res.Send(std::move(r));
}

void HttpServer::Impl::HandleTokenize(const HttpRequest& req, Reply& res) const {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return res.Status(body.status(), "");
  std::string param;
  Result<TokenizeRequest> tr = TokenizeRequestFromJSON(body.value(), &param);
  if (!tr.ok()) return res.Status(tr.status(), param);
  std::vector<TokenId> ids =
      engine.tokenizer().Encode(tr->content, tr->add_special, tr->parse_special);
  res.Json(Json{{"tokens", ids}});
}

void HttpServer::Impl::HandleDetokenize(const HttpRequest& req, Reply& res) const {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return res.Status(body.status(), "");
  std::string param;
  Result<DetokenizeRequest> dr = DetokenizeRequestFromJSON(body.value(), &param);
  if (!dr.ok()) return res.Status(dr.status(), param);
  const Tokenizer& tok = engine.tokenizer();
  for (TokenId id : dr->tokens) {
    if (id >= tok.n_vocab()) {
      return res.Status(InvalidArgument("token id {} is outside the vocabulary", id), "tokens");
    }
  }
  res.Json(Json{{"content", tok.Decode(dr->tokens)}});
}

void HttpServer::Impl::HandleSlotAction(const HttpRequest& req, Reply& res) {
  std::string param;
  const std::string id = PercentDecode(std::string_view(req.path).substr(kSlotPrefix.size()));
  Result<SlotActionRequest> request =
      SlotActionRequestFrom(id, req.QueryParam("action"), req.body, &param);
  if (!request.ok()) return res.Status(request.status(), param);
  auto answer = RunSlotAction(engine, options.slot_save_dir, *request, options.log);
  if (auto* e = std::get_if<ApiError>(&answer)) return res.Error(*e);
  res.Json(std::get<Json>(answer));
}

// embeddings_api.h does the work; a client that leaves cancels every input.
void HttpServer::Impl::HandleEmbeddings(const HttpRequest& req, Reply& res) {
  if (!engine.info().embeddings) return res.Error(EmbeddingsDisabledError());
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return res.Status(body.status(), "");
  std::string param;
  Result<EmbeddingsRequest> request = EmbeddingsRequestFromJSON(body.value(), &param);
  if (!request.ok()) return res.Status(request.status(), param);
  auto answer = RunEmbeddings(engine, *request, NewMeta("embd-").id, options.log, kClientPoll,
                              [&res] { return res.writer.ClientGone(); });
  if (!answer) return;  // the client left: nothing to send
  if (auto* e = std::get_if<ApiError>(&*answer)) return res.Error(*e);
  res.Json(std::get<Json>(*answer));
}

Result<std::unique_ptr<HttpServer>> HttpServer::Create(Engine& engine, ServerOptions options) {
  auto impl = std::make_unique<Impl>(engine, std::move(options));
  bool chatml = false;
  SHARDLM_ASSIGN_OR_RETURN(ChatFormatter f, ChatFormatter::Create(impl->options.chat_template,
                                                                  engine.tokenizer(), &chatml));
  if (chatml) impl->Log("the model has no chat template: using ChatML");
  impl->formatter.emplace(std::move(f));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Bind() {
  const ServerOptions& o = impl_->options;
  TransportOptions t;
  t.host = o.host;
  t.port = o.port;
  t.max_body_bytes = o.max_body_bytes;
  // Handler threads: one per request in flight (idle connections hold none), with room
  // beyond the engine's slots for queued requests and quick routes.
  t.n_workers =
      o.n_threads > 0 ? o.n_threads : std::max(2 * impl_->engine.info().n_parallel + 8, 32);
  t.header_timeout = o.header_timeout;
  t.io_timeout = o.io_timeout;
  SHARDLM_ASSIGN_OR_RETURN(impl_->transport, HttpTransport::Listen(t, *impl_));
  GuardOptions g;
  g.bind_host = o.host;
  g.port = impl_->transport->port();
  g.api_key = o.api_key;
  g.cors_origin = o.cors_origin;
  impl_->guard.emplace(std::move(g));
  return Status::Ok();
}

int HttpServer::port() const { return impl_->transport ? impl_->transport->port() : 0; }

void HttpServer::Run() {
  if (impl_->transport) impl_->transport->Run();
}

void HttpServer::Stop() {
  if (impl_ && impl_->transport) impl_->transport->Stop();
}

}  // namespace shardlm::server
