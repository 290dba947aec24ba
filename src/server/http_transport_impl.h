// HttpTransport internals shared by the poller (http_transport.cc) and the workers'
// exchanges (http_exchange.cc): a connection, socket I/O with deadlines, and the bytes of
// a response head.
//
// Thread safety: a Connection belongs to one thread at a time (the poller, or the worker it
// was handed to); the functions are reentrant.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "server/http_message.h"
#include "server/http_transport.h"

namespace shardlm::server {

using SteadyClock = std::chrono::steady_clock;

// One accepted TCP connection, non-blocking.
struct Connection {
  int fd = -1;
  std::string remote;  // "address:port"
  // Bytes read and not yet parsed: a request head being received, or what a client sent
  // after the previous request (pipelined).
  std::string buffer;
  // Poller: when the current wait ends (header_timeout from the first byte of a head, or
  // keep_alive_idle for an idle connection).
  SteadyClock::time_point deadline{};
  bool receiving_head = false;  // bytes of a head arrived (a deadline is 408, not a close)

  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();
};

// Where the request head in `buffer` ends (just past "\r\n\r\n"), or npos while incomplete.
size_t HeadEnd(const std::string& buffer);

enum class IoResult { kOk, kTimeout, kClosed, kError };

// Reads what is available into `out` (appending) until `out` holds max_total bytes, waiting
// up to `timeout` for the first byte (0: not at all). kClosed: the client closed its side and
// nothing more came.
IoResult ReadSome(Connection& conn, std::chrono::milliseconds timeout, std::string& out,
                  size_t max_total);
// Writes all of `data`, waiting up to `timeout` each time the client stops taking bytes.
IoResult WriteAll(Connection& conn, std::string_view data, std::chrono::milliseconds timeout);
// The client closed or broke the connection (checked without waiting).
bool PeerGone(const Connection& conn);

// "HTTP/1.1 <status> <reason>\r\n" and the headers of a response, ending with the blank line.
// `content_length` < 0: no Content-Length (chunked, or delimited by closing).
std::string ResponseHead(int version, int status, std::string_view content_type,
                         const std::vector<HttpHeader>& headers, long long content_length,
                         bool chunked, bool keep_alive, std::chrono::milliseconds keep_alive_idle);

// Serves one request on a worker: reads the head already buffered and the body, calls the
// service, writes the response. Returns whether the connection may carry another request.
bool ServeExchange(Connection& conn, const TransportOptions& options, HttpService& service);

}  // namespace shardlm::server
