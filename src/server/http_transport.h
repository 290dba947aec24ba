// HttpTransport: HTTP/1.1 over TCP for the server — accepting connections, reading requests
// under limits, writing whole and streamed (chunked) responses, and telling a handler when
// its client has gone. Requests are parsed by Boost.Beast's parser; the sockets, threads and
// timeouts are ours.
//
// How a connection lives:
//   - One poller thread (the one that calls Run) accepts connections and reads their
//     request headers without blocking, for every connection at once. A connection that
//     sends nothing, or sends its headers slowly, costs a file descriptor, never a thread:
//     headers must be complete within `header_timeout` of the first byte (else 408) and fit
//     `max_header_bytes` (else 431); an idle keep-alive connection is closed after
//     `keep_alive_idle`. Past `max_connections` a new connection gets 503 and is closed.
//   - A request whose headers are complete goes to a worker thread (`n_workers` of them).
//     The service's CheckHeaders runs before any body byte is read (origin, host, key,
//     route, Content-Length); a refusal is sent and the connection closed, so a refused
//     client cannot make us read its body. Then the body is read, Content-Length or chunked
//     alike, under `max_body_bytes` (413 as soon as it is passed, for chunked bodies too), with
//     `io_timeout` of silence allowed between reads (else 408), and the service handles it.
//   - After the response the connection goes back to the poller when it may be kept alive.
//   - Writes wait at most `io_timeout` for the client to take bytes; a client that stops
//     reading is dropped, and a stream's handler sees its writes fail.
// A malformed request gets 400 and the connection is closed. Error bodies come from the
// service (ErrorBody), so every error has the service's shape.
//
// Goals: nothing a client sends or withholds crashes the server or holds a thread for long;
// a handler can ask whether its client is still there while it waits (ClientGone), for
// streamed and whole responses alike; Stop is async-signal-safe.
// Non-goals: TLS (a reverse proxy in front), HTTP/2, pipelining beyond serving requests
// that arrive back to back on one connection in order.
//
// Thread safety: Run on one thread; Stop from any thread or a signal handler. The service's
// methods are called concurrently from the worker threads (ErrorBody also from the poller).
// Lifetime: the service must outlive Run; Run returns after Stop, once every worker has
// finished its exchange (their connections are shut down so that they finish soon).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/http_message.h"

namespace shardlm::server {

// The handler's side of one exchange: either one whole response, or a stream (status and
// headers, then chunks, then the end). Every method returns false once the client is gone.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual bool Send(const HttpResponse& response) = 0;
  virtual bool StartStream(int status, std::string_view content_type,
                           const std::vector<HttpHeader>& headers) = 0;
  virtual bool WriteStream(std::string_view data) = 0;
  virtual bool EndStream() = 0;
  // True when the client closed its side or the connection broke (checked now, without
  // waiting). A client that half-closes after its request counts as gone, as in most servers.
  virtual bool ClientGone() = 0;
};

// What the transport serves. Called from worker threads concurrently.
class HttpService {
 public:
  virtual ~HttpService() = default;
  // After the headers, before the body: a response to send instead (the request is refused
  // and its body never read), or nullopt to go on.
  virtual std::optional<HttpResponse> CheckHeaders(const HttpRequest& request) = 0;
  virtual void Handle(const HttpRequest& request, ResponseWriter& writer) = 0;
  // The response for an error the transport finds itself (400, 408, 413, 431, 503), to
  // `request` as far as it was read (no path when its head was not complete), so the error
  // can take the shape of the API its path belongs to.
  virtual HttpResponse ErrorBody(const HttpRequest& request, int status,
                                 const std::string& message) const = 0;
  // Once per exchange that got a response (also the transport's own errors): for logs and
  // metrics. `request` may lack a body or even a method when the headers were bad.
  virtual void OnResponse(const HttpRequest& request, int status) = 0;
};

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t max_body_bytes = size_t{8} << 20;
  // Request line and headers. Real clients send a few hundred bytes; 64 KiB leaves room for
  // long cookies a browser might attach, and bounds what a slow client makes us hold.
  size_t max_header_bytes = size_t{64} << 10;
  int n_workers = 32;
  // Open connections at once (idle keep-alive ones included); each costs a descriptor and
  // its buffered header bytes.
  int max_connections = 512;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds io_timeout{30'000};
  std::chrono::milliseconds keep_alive_idle{30'000};
};

class HttpTransport {
 public:
  // Binds and listens (errors: address in use, bad host).
  static Result<std::unique_ptr<HttpTransport>> Listen(TransportOptions options,
                                                       HttpService& service);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  int port() const;
  // Serves until Stop (returns at once if Stop came first).
  void Run();
  // Async-signal-safe: sets a flag and wakes the poller.
  void Stop();

 private:
  struct Impl;
  explicit HttpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm::server
