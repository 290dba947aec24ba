// HTTP routes, authentication, error shapes, SSE pumping. See http_server.h.
#include "server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>

#include "server/chat_format.h"
#include "server/completion_session.h"
#include "server/openai_types.h"
#include "server/props.h"
#include "server/slot_api.h"

namespace shardlm::server {
namespace {

constexpr const char* kRoutes[] = {
    "/v1/chat/completions", "/v1/completions",   "/v1/models",   "/health", "/metrics", "/tokenize",
    "/detokenize",          "/chat/completions", "/completions", "/models", "/props",   "/slots"};
// How long a streaming handler waits for engine events before checking that the client is
// still there: short enough that a disconnect frees its slot quickly.
constexpr std::chrono::milliseconds kStreamPoll{100};
// Idle keep-alive connections give their handler thread back after this long.
constexpr time_t kKeepAliveSeconds = 2;

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

constexpr std::string_view kSlotPrefix = "/slots/";

// POST /slots/{id}: the id, or nullopt for another path.
std::optional<std::string> SlotActionId(const std::string& path) {
  if (!path.starts_with(kSlotPrefix)) return std::nullopt;
  std::string id = path.substr(kSlotPrefix.size());
  if (id.find('/') != std::string::npos) return std::nullopt;
  return id;
}

bool IsRoute(const std::string& path) {
  for (const char* r : kRoutes) {
    if (path == r) return true;
  }
  return SlotActionId(path).has_value();
}

// A POST whose body the HTTP library cannot size (`curl -X POST` without -d): it would
// wait for the connection to close, then answer 400.
bool UnsizedPost(const httplib::Request& req) {
  return req.method == "POST" && !req.has_header("Content-Length") &&
         req.get_header_value("Transfer-Encoding") != "chunked";
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  ServerOptions options;
  std::optional<ChatFormatter> formatter;
  httplib::Server svr;
  int port = 0;
  std::atomic<uint64_t> next_id{1};
  uint64_t id_salt = std::random_device{}();
  std::mutex counts_mu;
  std::map<int, int64_t> responses_by_status;

  Impl(Engine& e, ServerOptions o) : engine(e), options(std::move(o)) {}

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }
  void SendError(httplib::Response& res, const ApiError& e) const {
    res.status = e.http_status;
    if (e.http_status == 503) res.set_header("Retry-After", "1");
    res.set_content(Dump(ErrorJSON(e)), "application/json");
  }
  void SendStatus(httplib::Response& res, const Status& st, const std::string& param) const {
    SendError(res, ErrorFromStatus(st, param));
  }
  void SendJson(httplib::Response& res, const Json& j) const {
    res.status = 200;
    res.set_content(Dump(j), "application/json");
  }
  ResponseMeta NewMeta(const char* prefix) {
    uint64_t n = next_id.fetch_add(1);
    return ResponseMeta{fmt::format("{}{:08x}{:08x}", prefix, static_cast<uint32_t>(id_salt), n),
                        static_cast<int64_t>(std::time(nullptr)), engine.info().model_name};
  }

  void InstallHandlers();
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void OnError(const httplib::Request& req, httplib::Response& res) const;
  void HandleChat(const httplib::Request& req, httplib::Response& res);
  void HandleCompletion(const httplib::Request& req, httplib::Response& res);
  void Respond(PreparedRequest prep, const char* id_prefix, httplib::Response& res);
  void HandleModels(httplib::Response& res) const;
  void HandleHealth(httplib::Response& res) const;
  void HandleProps(httplib::Response& res) const;
  void HandleMetrics(httplib::Response& res);
  void HandleTokenize(const httplib::Request& req, httplib::Response& res) const;
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res) const;
  void HandleSlotAction(const httplib::Request& req, const std::string& id, httplib::Response& res);
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res);
};

bool HttpServer::Impl::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (options.api_key.empty() || req.path == "/health") return true;
  std::string auth = req.get_header_value("Authorization");
  if (auth == "Bearer " + options.api_key || req.get_header_value("x-api-key") == options.api_key) {
    return true;
  }
  ApiError e;
  e.http_status = 401;
  e.message = "invalid or missing API key (send Authorization: Bearer <key>)";
  e.code = "invalid_api_key";
  SendError(res, e);
  return false;
}

void HttpServer::Impl::OnError(const httplib::Request& req, httplib::Response& res) const {
  if (!res.body.empty()) return;
  ApiError e;
  e.http_status = res.status;
  if (res.status == 404 && IsRoute(req.path)) {
    e.http_status = 405;
    e.message = fmt::format("method {} is not allowed on {}", req.method, req.path);
  } else if (res.status == 404) {
    e.type = "not_found_error";
    e.message = fmt::format("unknown route {} {}", req.method, req.path);
  } else if (res.status == 413) {
    e.message = fmt::format(
        "the request body is too large (limit {} bytes for application/json, 8 KiB for "
        "form-encoded bodies: send Content-Type: application/json)",
        options.max_body_bytes);
  } else {
    e.message = fmt::format("HTTP error {}", res.status);
  }
  SendError(res, e);
}

void HttpServer::Impl::Respond(PreparedRequest prep, const char* id_prefix,
                               httplib::Response& res) {
  const int32_t n_ctx = engine.info().n_ctx;
  if (prep.prompt.empty()) {
    return SendStatus(res, InvalidArgument("the prompt is empty"), "prompt");
  }
  if (n_ctx > 0 && static_cast<int64_t>(prep.prompt.size()) >= n_ctx) {
    return SendStatus(res,
                      OutOfRange("context_length_exceeded: the prompt has {} tokens, the "
                                 "context holds {}",
                                 prep.prompt.size(), n_ctx),
                      prep.endpoint == Endpoint::kChat ? "messages" : "prompt");
  }
  if (!prep.options.seed_given) prep.options.sampling.seed = std::random_device{}();
  bool stream = prep.options.stream;
  ApiError error;
  auto session =
      CompletionSession::Start(engine, std::move(prep), NewMeta(id_prefix), options.log, &error);
  if (!session) return SendError(res, error);
  if (!stream) {
    auto result = session->Wait();
    if (auto* e = std::get_if<ApiError>(&result)) return SendError(res, *e);
    return SendJson(res, std::get<Json>(result));
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [session](size_t, httplib::DataSink& sink) {
        std::string out;
        auto poll = session->NextEvents(kStreamPoll, &out);
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          session->Cancel();
          return false;
        }
        if (poll == CompletionSession::Poll::kDone) {
          sink.done();
          return true;
        }
        if (poll == CompletionSession::Poll::kTimeout && !sink.is_writable()) {
          session->Cancel();
          return false;
        }
        return true;
      },
      [session](bool success) {
        if (!success) session->Cancel();
      });
}

void HttpServer::Impl::HandleChat(const httplib::Request& req, httplib::Response& res) {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return SendStatus(res, body.status(), "");
  std::string param;
  Result<ChatCompletionRequest> chat = ChatCompletionRequestFromJSON(body.value(), &param);
  if (!chat.ok()) return SendStatus(res, chat.status(), param);
  Result<std::string> prompt = formatter->Render(chat.value());
  if (!prompt.ok()) return SendStatus(res, prompt.status(), "messages");
  const Tokenizer& tok = engine.tokenizer();
  PreparedRequest prep;
  prep.endpoint = Endpoint::kChat;
  prep.options = chat->options;
  prep.prompt = tok.Encode(prompt.value(), /*add_special=*/true, /*parse_special=*/true);
  // Templates that write the BOS text themselves would get a second one from add_special.
  if (prep.prompt.size() >= 2 && tok.bos() >= 0 && prep.prompt[0] == tok.bos() &&
      prep.prompt[1] == tok.bos()) {
    prep.prompt.erase(prep.prompt.begin());
  }
  prep.in_reasoning = PromptOpensReasoning(prompt.value());
  prep.parse_tools = !chat->tools.is_null();
  Respond(std::move(prep), "chatcmpl-", res);
}

void HttpServer::Impl::HandleCompletion(const httplib::Request& req, httplib::Response& res) {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return SendStatus(res, body.status(), "");
  std::string param;
  Result<CompletionRequest> cr = CompletionRequestFromJSON(body.value(), &param);
  if (!cr.ok()) return SendStatus(res, cr.status(), param);
  const Tokenizer& tok = engine.tokenizer();
  PreparedRequest prep;
  prep.endpoint = Endpoint::kCompletion;
  prep.options = cr->options;
  if (cr->has_prompt_tokens) {
    for (TokenId id : cr->prompt_tokens) {
      if (id >= tok.n_vocab()) {
        return SendStatus(res, InvalidArgument("token id {} is outside the vocabulary", id),
                          "prompt");
      }
    }
    prep.prompt = cr->prompt_tokens;
    if (cr->echo) prep.echo_prefix = tok.Decode(cr->prompt_tokens);
  } else {
    prep.prompt = tok.Encode(cr->prompt, /*add_special=*/true, /*parse_special=*/true);
    if (cr->echo) prep.echo_prefix = cr->prompt;
  }
  Respond(std::move(prep), "cmpl-", res);
}

void HttpServer::Impl::HandleModels(httplib::Response& res) const {
  const EngineInfo& info = engine.info();
  Json model = Json{{"id", info.model_name},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "shardlm"},
                    {"meta", Json{{"architecture", info.architecture},
                                  {"n_ctx", info.n_ctx},
                                  {"n_vocab", info.n_vocab},
                                  {"n_parallel", info.n_parallel},
                                  {"stages", StagesJSON(info.stages)}}}};
  SendJson(res, Json{{"object", "list"}, {"data", Json::array({model})}});
}

// Healthy: 200 {"status":"ok"}. Otherwise 503 with OpenAI's error object (a down stage:
// code stage_unavailable, the message naming the stage) and "status":"unavailable", so
// both load balancers and OpenAI clients read it.
void HttpServer::Impl::HandleHealth(httplib::Response& res) const {
  Status st = engine.Health();
  if (st.ok()) return SendJson(res, Json{{"status", "ok"}});
  ApiError e = ErrorFromStatus(st);
  e.http_status = 503;
  e.type = "unavailable_error";
  Json body = ErrorJSON(e);
  body["status"] = "unavailable";
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content(Dump(body), "application/json");
}

void HttpServer::Impl::HandleProps(httplib::Response& res) const {
  SendJson(res, PropsJSON(engine.info()));
}

void HttpServer::Impl::HandleMetrics(httplib::Response& res) {
  EngineStats s = engine.Stats();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, int64_t value) {
    out += fmt::format("# HELP shardlm_{0} {1}\n# TYPE shardlm_{0} {2}\nshardlm_{0} {3}\n", name,
                       help, type, value);
  };
  metric("requests_total", "counter", "Requests submitted to the engine.", s.requests_total);
  metric("prompt_tokens_total", "counter", "Prompt tokens submitted.", s.prompt_tokens_total);
  metric("generated_tokens_total", "counter", "Tokens generated.", s.generated_tokens_total);
  metric("queue_length", "gauge", "Requests waiting for a slot.", s.queue_length);
  metric("slots_busy", "gauge", "Slots running a request.", s.slots_busy);
  metric("slots_total", "gauge", "Slots (--parallel).", s.slots_total);
  metric("kv_pages_used", "gauge", "KV pages in use.", s.kv_pages_used);
  metric("kv_pages_total", "gauge", "KV pages in the pool.", s.kv_pages_total);
  metric("kv_pages_retained", "gauge", "KV pages only idle slots hold (their last sequence).",
         s.kv_pages_retained);
  metric("prompt_tokens_cached_total", "counter",
         "Prompt tokens served from the prefix cache (memory + disk).", s.prompt_tokens_cached);
  metric("prompt_tokens_memory_total", "counter",
         "Prompt tokens served from cached pages in memory.", s.prompt_tokens_memory);
  metric("prompt_tokens_disk_total", "counter", "Prompt tokens served from pages read from disk.",
         s.prompt_tokens_disk);
  metric("prompt_tokens_computed_total", "counter", "Prompt tokens computed (prefilled).",
         s.prompt_tokens_computed);
  metric("prefix_cache_lookup_blocks_total", "counter", "Full prompt blocks looked up.",
         s.prefix_cache_lookup_blocks);
  metric("prefix_cache_hit_blocks_total", "counter", "Prompt blocks served from the cache.",
         s.prefix_cache_hit_blocks);
  metric("prefix_cache_pages", "gauge", "KV pages held by the prefix cache.", s.prefix_cache_pages);
  metric("prefix_cache_evicted_pages_total", "counter", "Cached pages evicted to make room.",
         s.prefix_cache_evicted_pages);
  metric("kv_disk_bytes_read_total", "counter", "Cache file bytes read (--kv-cache-dir).",
         s.kv_disk_bytes_read);
  metric("kv_disk_bytes_written_total", "counter", "Cache file bytes written.",
         s.kv_disk_bytes_written);
  metric("kv_disk_files", "gauge", "Cache files of this model and split on disk.", s.kv_disk_files);
  metric("kv_disk_bytes", "gauge", "Bytes of those cache files.", s.kv_disk_bytes);
  metric("kv_disk_evicted_files_total", "counter", "Cache files evicted to stay under the budget.",
         s.kv_disk_evicted_files);
  metric("kv_disk_corrupt_files_total", "counter",
         "Cache files that failed validation (discarded; the prompt was computed).",
         s.kv_disk_corrupt_files);
  metric("kv_disk_write_errors_total", "counter", "Cache file writes that failed.",
         s.kv_disk_write_errors);
  metric("kv_disk_dropped_writes_total", "counter",
         "Pages not persisted (write queue full, disk full, stage down).",
         s.kv_disk_dropped_writes + s.kv_disk_export_errors);
  if (options.metrics_extra) out += options.metrics_extra();
  out +=
      "# HELP shardlm_http_responses_total HTTP responses by status.\n"
      "# TYPE shardlm_http_responses_total counter\n";
  std::lock_guard<std::mutex> lock(counts_mu);
  for (const auto& [status, count] : responses_by_status) {
    out += fmt::format("shardlm_http_responses_total{{status=\"{}\"}} {}\n", status, count);
  }
  res.status = 200;
  res.set_content(out, "text/plain; version=0.0.4");
}

void HttpServer::Impl::HandleTokenize(const httplib::Request& req, httplib::Response& res) const {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return SendStatus(res, body.status(), "");
  std::string param;
  Result<TokenizeRequest> tr = TokenizeRequestFromJSON(body.value(), &param);
  if (!tr.ok()) return SendStatus(res, tr.status(), param);
  std::vector<TokenId> ids =
      engine.tokenizer().Encode(tr->content, tr->add_special, tr->parse_special);
  SendJson(res, Json{{"tokens", ids}});
}

void HttpServer::Impl::HandleDetokenize(const httplib::Request& req, httplib::Response& res) const {
  Result<Json> body = ParseBody(req.body);
  if (!body.ok()) return SendStatus(res, body.status(), "");
  std::string param;
  Result<DetokenizeRequest> dr = DetokenizeRequestFromJSON(body.value(), &param);
  if (!dr.ok()) return SendStatus(res, dr.status(), param);
  const Tokenizer& tok = engine.tokenizer();
  for (TokenId id : dr->tokens) {
    if (id >= tok.n_vocab()) {
      return SendStatus(res, InvalidArgument("token id {} is outside the vocabulary", id),
                        "tokens");
    }
  }
  SendJson(res, Json{{"content", tok.Decode(dr->tokens)}});
}

void HttpServer::Impl::HandleSlotAction(const httplib::Request& req, const std::string& id,
                                        httplib::Response& res) {
  std::string param;
  Result<SlotActionRequest> request =
      SlotActionRequestFrom(id, req.get_param_value("action"), req.body, &param);
  if (!request.ok()) return SendStatus(res, request.status(), param);
  auto answer = RunSlotAction(engine, options.slot_save_dir, *request, options.log);
  if (auto* e = std::get_if<ApiError>(&answer)) return SendError(res, *e);
  SendJson(res, std::get<Json>(answer));
}

// Runs before the body is read: authentication, and POSTs without a sized body, which get
// their answer at once (a slot action runs with an empty body: erase needs none).
httplib::Server::HandlerResponse HttpServer::Impl::PreRoute(const httplib::Request& req,
                                                            httplib::Response& res) {
  if (!Authorized(req, res)) return httplib::Server::HandlerResponse::Handled;
  if (!UnsizedPost(req)) return httplib::Server::HandlerResponse::Unhandled;
  if (std::optional<std::string> id = SlotActionId(req.path)) {
    HandleSlotAction(req, *id, res);
  } else {
    SendStatus(res, InvalidArgument("a POST needs a body or Content-Length: 0 (curl: -d '')"), "");
  }
  return httplib::Server::HandlerResponse::Handled;
}

void HttpServer::Impl::InstallHandlers() {
  svr.set_payload_max_length(options.max_body_bytes);
  svr.set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { return PreRoute(req, res); });
  svr.set_error_handler(
      [this](const httplib::Request& req, httplib::Response& res) { OnError(req, res); });
  svr.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        ApiError e;
        e.http_status = 500;
        e.type = "server_error";
        e.message = "internal error while handling the request";
        SendError(res, e);
      });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(counts_mu);
      responses_by_status[res.status]++;
    }
    if (res.status >= 400) Log(fmt::format("http {} {} -> {}", req.method, req.path, res.status));
  });
  auto chat = [this](const httplib::Request& req, httplib::Response& res) { HandleChat(req, res); };
  auto completion = [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(req, res);
  };
  auto models = [this](const httplib::Request&, httplib::Response& res) { HandleModels(res); };
  svr.Post("/v1/chat/completions", chat);
  svr.Post("/chat/completions", chat);
  svr.Post("/v1/completions", completion);
  svr.Post("/completions", completion);
  svr.Get("/v1/models", models);
  svr.Get("/models", models);
  svr.Get("/health",
          [this](const httplib::Request&, httplib::Response& res) { HandleHealth(res); });
  svr.Get("/props", [this](const httplib::Request&, httplib::Response& res) { HandleProps(res); });
  svr.Get("/metrics",
          [this](const httplib::Request&, httplib::Response& res) { HandleMetrics(res); });
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    HandleTokenize(req, res);
  });
  svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    HandleDetokenize(req, res);
  });
  svr.Get("/slots", [this](const httplib::Request&, httplib::Response& res) {
    SendJson(res, SlotsJSON(engine.Slots(), engine.info().n_ctx));
  });
  svr.Post(R"(/slots/([^/]*))", [this](const httplib::Request& req, httplib::Response& res) {
    HandleSlotAction(req, req.matches[1].str(), res);
  });
  // httplib holds a thread per open keep-alive connection until it idles out, so the pool
  // needs room beyond the engine's slots for clients that keep connections open (16
  // concurrent SDK clients would otherwise wait seconds for a thread); idle threads only
  // cost their stacks.
  int threads =
      options.n_threads > 0 ? options.n_threads : std::max(2 * engine.info().n_parallel + 8, 32);
  svr.set_keep_alive_timeout(kKeepAliveSeconds);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
}

Result<std::unique_ptr<HttpServer>> HttpServer::Create(Engine& engine, ServerOptions options) {
  auto impl = std::make_unique<Impl>(engine, std::move(options));
  bool chatml = false;
  SHARDLM_ASSIGN_OR_RETURN(ChatFormatter f, ChatFormatter::Create(impl->options.chat_template,
                                                                  engine.tokenizer(), &chatml));
  if (chatml) impl->Log("the model has no chat template: using ChatML");
  impl->formatter.emplace(std::move(f));
  impl->InstallHandlers();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Bind() {
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    impl_->port = impl_->svr.bind_to_any_port(o.host);
    if (impl_->port <= 0) return IoError("cannot bind {}", o.host);
  } else {
    if (!impl_->svr.bind_to_port(o.host, o.port)) {
      return IoError("cannot bind {}:{} (in use, or a bad address?)", o.host, o.port);
    }
    impl_->port = o.port;
  }
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::Run() { impl_->svr.listen_after_bind(); }

void HttpServer::Stop() {
  if (impl_) impl_->svr.stop();
}

}  // namespace shardlm::server
