// HttpServer: the OpenAI-compatible HTTP front of an Engine (sockets: http_transport.h).
//
// Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses (OpenAI's
// Responses API: responses_api.h), POST /v1/messages and /v1/messages/count_tokens
// (Anthropic's Messages API: anthropic_api.h), the generating ones streamed as SSE when
// "stream": true; GET /v1/models (its model entry's "meta" carries the stages), GET /props
// (model, context, slots, placement: props.h), GET /health, GET /metrics (Prometheus text),
// POST /tokenize, POST /detokenize, GET /slots and POST /slots/{id}?action=save|restore|
// erase (slot_api.h; files confined to ServerOptions::slot_save_dir), POST /v1/embeddings
// (embeddings_api.h; a 400 saying how to enable it when the engine computes none), OPTIONS
// anywhere (CORS preflight). Before a body is read (request_guard.h): a foreign Host on a
// loopback bind or a foreign browser Origin is 403, a wrong or missing API key 401 (every
// route but /health), an unknown route 404, a wrong method 405, a body over the cap 413
// (chunked bodies too).
// After: 400 bad JSON or parameters (code context_length_exceeded for an over-long prompt;
// JSON too deep or with too many values names the field: json_limits.h), 503 with
// Retry-After for a full queue (code server_overloaded) or a stage that is down (type
// unavailable_error, code stage_unavailable: on submit, on /health, and for a request the
// stage failed mid-way; a stream then ends with an SSE error event). A POST with no body
// gets a 400 saying how to send one, but a slot action runs with none. Every error uses
// OpenAI's error object, but on the /v1/messages routes Anthropic's.
//
// Goals: nothing a client sends crashes the server; a client that disconnects cancels its
// request, streamed or not, so its slot is freed at once; handler threads sized for the
// engine's parallelism.
// Non-goals: TLS (put a reverse proxy in front), the legacy llama.cpp /completion route.
//
// Thread safety: Create/Bind/Run from one controlling thread; Stop from any thread or a
// signal handler; handlers run on the transport's workers. Lifetime: the Engine must outlive
// the server; the destructor stops it (Run must have returned before it is destroyed).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/engine.h"

namespace shardlm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (see HttpServer::port())
  std::string api_key;  // empty: no authentication
  // The one web origin allowed to call the server from a browser (CORS), e.g.
  // "http://localhost:3000"; empty: browsers' cross-origin requests are refused.
  std::string cors_origin;
  // Request bodies above this are refused with 413: 8 MiB holds ~2M tokens of text, far
  // above any context we serve, and bounds what one client can make us buffer.
  size_t max_body_bytes = 8u << 20;
  int n_threads = 0;  // handler threads; 0: max(2 * parallel + 8, 32)
  // A request's headers must arrive within header_timeout of its first byte; a body or a
  // client reading the response may stall io_timeout at most (http_transport.h).
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds io_timeout{30'000};
  std::string chat_template;                    // Jinja source; empty: ChatML
  std::function<void(const std::string&)> log;  // one line per request and event
  // Where /slots save and restore keep their files (a save creates it when missing);
  // empty: both answer 400 naming the flags that enable them.
  std::string slot_save_dir;
  // Prometheus text appended to GET /metrics (the engine's pipeline counters), or empty.
  // Called on handler threads, concurrently: it must be thread-safe.
  std::function<std::string()> metrics_extra;
};

class HttpServer {
 public:
  // Checks the chat template against the engine's vocabulary.
  static Result<std::unique_ptr<HttpServer>> Create(Engine& engine, ServerOptions options);
  ~HttpServer();

  // Binds the socket (errors: address in use, bad host).
  Status Bind();
  int port() const;
  // Serves until Stop(); call after Bind().
  void Run();
  // Async-signal-safe.
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm::server
