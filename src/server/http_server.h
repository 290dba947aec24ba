// HttpServer: the OpenAI-compatible HTTP front of an Engine (cpp-httplib underneath).
//
// Routes: POST /v1/chat/completions, POST /v1/completions (SSE when "stream": true),
// GET /v1/models (its model entry's "meta" carries the stages), GET /props (model,
// context, slots, placement: props.h), GET /health, GET /metrics (Prometheus text),
// POST /tokenize, POST /detokenize, GET /slots and POST /slots/{id}?action=save|restore|
// erase (slot_api.h; files confined to ServerOptions::slot_save_dir). Errors always use
// OpenAI's error object: 400 bad JSON or parameters (code context_length_exceeded for an
// over-long prompt), 401 wrong or missing API key (every route but /health), 404 unknown
// route, 405 wrong method, 413 body over the cap, 503 with Retry-After for a full queue
// (code server_overloaded) or a stage that is down (type unavailable_error, code
// stage_unavailable: on submit, on /health, and for a request the stage failed mid-way; a
// stream then ends with an SSE error event). A POST that sends no Content-Length (`curl -X
// POST` without -d) is answered at once: a slot action runs with an empty body, anything
// else gets a 400 saying how to send one.
//
// Goals: nothing a client sends crashes the server; a client that disconnects mid-stream
// cancels its request; handler threads sized for the engine's parallelism; httplib.h is
// included by http_server.cc only.
// Non-goals: TLS, CORS preflight, the legacy llama.cpp /completion route.
//
// Thread safety: Start/Stop from one controlling thread; handlers run on the server's own
// pool. Lifetime: the Engine must outlive the server; the destructor stops it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "runtime/engine.h"

namespace shardlm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (see HttpServer::port())
  std::string api_key;  // empty: no authentication
  // Request bodies above this are refused with 413: 8 MiB holds ~2M tokens of text, far
  // above any context we serve, and bounds what one client can make us buffer.
  size_t max_body_bytes = 8u << 20;
  int n_threads = 0;                            // handler threads; 0: max(2 * parallel + 8, 32)
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
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm::server
