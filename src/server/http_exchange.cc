// One request and its response on a worker thread (http_transport.h "How a connection
// lives"), and the socket I/O both the poller and the workers use.
#include <poll.h>
#include <sys/socket.h>

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <cstring>

#include "server/http_transport_impl.h"

namespace shardlm::server {
namespace {

namespace http = boost::beast::http;
using Parser = http::request_parser<http::string_body>;

// How long a refused client's bytes are read and dropped before its connection closes
// (DrainBeforeClose): enough for a client on a fast link to finish writing the body it
// started and read the refusal. Bounded in time only: a byte bound ends the drain early for
// the fastest clients, exactly those that would otherwise finish, and a slow client holds
// the worker this long either way.
constexpr std::chrono::milliseconds kDrainTime{2000};

// Polls one descriptor, retrying EINTR with the time left. Returns revents (0: timed out).
short PollOne(int fd, short events, std::chrono::milliseconds timeout) {
  const auto end = SteadyClock::now() + timeout;
  while (true) {
    pollfd p{fd, events, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - SteadyClock::now());
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (n > 0) return p.revents;
    if (n == 0) return 0;
    if (errno != EINTR) return POLLERR;
  }
}

// The response side of one exchange.
class Exchange : public ResponseWriter {
 public:
  Exchange(Connection& conn, const TransportOptions& options, HttpService& service,
           const HttpRequest& request, bool keep_alive)
      : conn_(conn),
        options_(options),
        service_(service),
        request_(request),
        keep_alive_(keep_alive) {}

  bool Send(const HttpResponse& r) override {
    if (state_ != State::kNone) return false;
    state_ = State::kDone;
    status_ = r.status;
    std::string bytes = ResponseHead(request_.version, r.status, r.content_type, r.headers,
                                     static_cast<long long>(r.body.size()), false, keep_alive_,
                                     options_.keep_alive_idle);
    bytes += r.body;
    return Write(bytes);
  }
  bool StartStream(int status, std::string_view content_type,
                   const std::vector<HttpHeader>& headers) override {
    if (state_ != State::kNone) return false;
    state_ = State::kStreaming;
    status_ = status;
    // HTTP/1.0 has no chunked encoding: the stream ends when the connection closes.
    chunked_ = request_.version >= 11;
    if (!chunked_) keep_alive_ = false;
    return Write(ResponseHead(request_.version, status, content_type, headers, -1, chunked_,
                              keep_alive_, options_.keep_alive_idle));
  }
  bool WriteStream(std::string_view data) override {
    if (state_ != State::kStreaming) return false;
    if (data.empty()) return !broken_;
    if (!chunked_) return Write(data);
    return Write(fmt::format("{:x}\r\n", data.size())) && Write(data) && Write("\r\n");
  }
  bool EndStream() override {
    if (state_ != State::kStreaming) return false;
    state_ = State::kDone;
    return !chunked_ || Write("0\r\n\r\n");
  }
  bool ClientGone() override { return broken_ || PeerGone(conn_); }

  // After the handler: whether the connection may carry another request.
  bool Finish() {
    // A handler sends nothing when its client left (it cancelled the work): nothing to say.
    if (state_ == State::kNone && !ClientGone()) {
      Send(service_.ErrorBody(request_, 500, "the handler sent no response"));
    }
    if (status_ > 0) service_.OnResponse(request_, status_);
    return state_ == State::kDone && !broken_ && keep_alive_;
  }

 private:
  enum class State { kNone, kStreaming, kDone };
  bool Write(std::string_view bytes) {
    if (broken_) return false;
    broken_ = WriteAll(conn_, bytes, options_.io_timeout) != IoResult::kOk;
    return !broken_;
  }

  Connection& conn_;
  const TransportOptions& options_;
  HttpService& service_;
  const HttpRequest& request_;
  bool keep_alive_;
  State state_ = State::kNone;
  bool chunked_ = false;
  bool broken_ = false;
  int status_ = 0;
};

// Before closing a connection whose client may still be sending (a refused or failed
// request's body): our side is shut for writing and the rest read and dropped for a while.
// Closing with unread bytes would send a reset, and the client would lose the response it
// has not read yet (a client writes its whole body before it reads).
void DrainBeforeClose(Connection& conn) {
  ::shutdown(conn.fd, SHUT_WR);
  const auto end = SteadyClock::now() + kDrainTime;
  std::string sink;
  for (auto now = SteadyClock::now(); now < end; now = SteadyClock::now()) {
    sink.clear();
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(end - now);
    if (ReadSome(conn, left, sink, 1 << 16) != IoResult::kOk) return;
  }
}

// Sends a transport error and ends the connection, draining what the client still sends.
bool Fail(Connection& conn, const TransportOptions& options, HttpService& service,
          const HttpRequest& request, int status, const std::string& message) {
  Exchange exchange(conn, options, service, request, /*keep_alive=*/false);
  exchange.Send(service.ErrorBody(request, status, message));
  exchange.Finish();
  DrainBeforeClose(conn);
  return false;
}

void CopyHead(const Parser& parser, HttpRequest& request) {
  const auto& msg = parser.get();
  request.method = std::string(msg.method_string());
  request.target = std::string(msg.target());
  const size_t q = request.target.find('?');
  request.path = request.target.substr(0, q);
  request.query = q == std::string::npos ? std::string() : request.target.substr(q + 1);
  request.version = msg.version() >= 11 ? 11 : 10;
  for (const auto& field : msg) {
    request.headers.push_back({AsciiLower(field.name_string()), std::string(field.value())});
  }
}

// Feeds buffered and then received bytes to the parser until the body is complete. Returns
// 0 when done, else the HTTP status of the failure (-1: the client left, nothing to send).
int ReadBody(Connection& conn, const TransportOptions& options, Parser& parser, std::string* why) {
  const auto deadline = SteadyClock::now() + 4 * options.io_timeout;
  while (!parser.is_done()) {
    if (!conn.buffer.empty()) {
      boost::system::error_code ec;
      const size_t used = parser.put(boost::asio::buffer(conn.buffer), ec);
      conn.buffer.erase(0, used);
      if (ec == http::error::body_limit) {
        *why = fmt::format("the request body is larger than {} bytes", options.max_body_bytes);
        return 413;
      }
      if (ec && ec != http::error::need_more) {
        *why = "malformed request body: " + ec.message();
        return 400;
      }
      if (!ec && used > 0) continue;
    }
    if (SteadyClock::now() > deadline) {
      *why = "the request body took too long to arrive";
      return 408;
    }
    // A megabyte at a time: the parser copies it into the body, so little is held twice.
    switch (ReadSome(conn, options.io_timeout, conn.buffer, conn.buffer.size() + (1 << 20))) {
      case IoResult::kOk:
        break;
      case IoResult::kTimeout:
        *why = fmt::format("no body bytes for {} ms", options.io_timeout.count());
        return 408;
      default:
        return -1;
    }
  }
  return 0;
}

}  // namespace

size_t HeadEnd(const std::string& buffer) {
  const size_t pos = buffer.find("\r\n\r\n");
  return pos == std::string::npos ? pos : pos + 4;
}

IoResult ReadSome(Connection& conn, std::chrono::milliseconds timeout, std::string& out,
                  size_t max_total) {
  if (timeout.count() > 0) {
    const short ev = PollOne(conn.fd, POLLIN | POLLRDHUP, timeout);
    if (ev == 0) return IoResult::kTimeout;
  }
  bool any = false;
  char chunk[16384];
  while (out.size() < max_total) {
    const ssize_t n =
        ::recv(conn.fd, chunk, std::min(sizeof(chunk), max_total - out.size()), MSG_DONTWAIT);
    if (n > 0) {
      out.append(chunk, static_cast<size_t>(n));
      any = true;
      continue;
    }
    if (n == 0) return any ? IoResult::kOk : IoResult::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return any || timeout.count() == 0 ? IoResult::kOk : IoResult::kTimeout;
    }
    return IoResult::kError;
  }
  return IoResult::kOk;
}

IoResult WriteAll(Connection& conn, std::string_view data, std::chrono::milliseconds timeout) {
  while (!data.empty()) {
    const ssize_t n = ::send(conn.fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const short ev = PollOne(conn.fd, POLLOUT, timeout);
      if (ev == 0) return IoResult::kTimeout;
      if (ev & (POLLERR | POLLHUP | POLLNVAL)) return IoResult::kClosed;
      continue;
    }
    return IoResult::kClosed;  // EPIPE, ECONNRESET: the client is gone
  }
  return IoResult::kOk;
}

bool PeerGone(const Connection& conn) {
  const short ev = PollOne(conn.fd, POLLIN | POLLRDHUP, std::chrono::milliseconds(0));
  return (ev & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

std::string ResponseHead(int version, int status, std::string_view content_type,
                         const std::vector<HttpHeader>& headers, long long content_length,
                         bool chunked, bool keep_alive, std::chrono::milliseconds keep_alive_idle) {
  std::string reason(http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status))));
  std::string head = fmt::format("HTTP/1.{} {} {}\r\n", version >= 11 ? 1 : 0, status, reason);
  if (!content_type.empty()) head += fmt::format("Content-Type: {}\r\n", content_type);
  for (const HttpHeader& h : headers) head += fmt::format("{}: {}\r\n", h.name, h.value);
  if (content_length >= 0) head += fmt::format("Content-Length: {}\r\n", content_length);
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  if (keep_alive) {
    head += fmt::format("Connection: keep-alive\r\nKeep-Alive: timeout={}\r\n",
                        std::chrono::duration_cast<std::chrono::seconds>(keep_alive_idle).count());
  } else {
    head += "Connection: close\r\n";
  }
  head += "\r\n";
  return head;
}

bool ServeExchange(Connection& conn, const TransportOptions& options, HttpService& service) {
  HttpRequest request;
  request.remote = conn.remote;
  Parser parser;
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  // The Content-Length check waits for the service's own checks (a refused request is told
  // why, not that it is large); chunked bodies are counted from the first chunk on.
  parser.body_limit(boost::none);
  parser.eager(false);
  boost::system::error_code ec;
  const size_t used = parser.put(boost::asio::buffer(conn.buffer), ec);
  if (ec || !parser.is_header_done()) {
    return Fail(conn, options, service, request, ec == http::error::header_limit ? 431 : 400,
                "malformed HTTP request: " + (ec ? ec.message() : std::string("incomplete head")));
  }
  conn.buffer.erase(0, used);
  CopyHead(parser, request);
  if (std::optional<HttpResponse> refusal = service.CheckHeaders(request)) {
    // Keep the connection only when no body bytes are left unread behind the refusal.
    const bool bodyless = parser.is_done();
    Exchange exchange(conn, options, service, request, bodyless && parser.keep_alive());
    exchange.Send(*refusal);
    const bool keep = exchange.Finish();
    if (!bodyless) DrainBeforeClose(conn);
    return keep;
  }
  if (parser.content_length() && *parser.content_length() > options.max_body_bytes) {
    return Fail(conn, options, service, request, 413,
                fmt::format("the request body is {} bytes, the limit is {}",
                            *parser.content_length(), options.max_body_bytes));
  }
  parser.body_limit(options.max_body_bytes);
  parser.eager(true);
  const std::string* expect = request.Header("expect");
  if (!parser.is_done() && expect && AsciiLower(*expect) == "100-continue" &&
      request.version >= 11) {
    if (WriteAll(conn, "HTTP/1.1 100 Continue\r\n\r\n", options.io_timeout) != IoResult::kOk) {
      return false;
    }
  }
  std::string why;
  const int failed = ReadBody(conn, options, parser, &why);
  if (failed < 0) return false;
  if (failed > 0) return Fail(conn, options, service, request, failed, why);
  request.body = std::move(parser.get().body());
  Exchange exchange(conn, options, service, request, parser.keep_alive());
  service.Handle(request, exchange);
  return exchange.Finish();
}

}  // namespace shardlm::server
