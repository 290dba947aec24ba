// HttpTransport: the listening socket, the poller that accepts connections and gathers
// request heads, and the worker threads (see http_transport.h). One exchange on a worker is
// http_exchange.cc.
#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "base/thread_name.h"
#include "server/http_transport_impl.h"

namespace shardlm::server {
namespace {

// The poller wakes at least this often to expire deadlines.
constexpr int kMaxPollMs = 1000;
constexpr int kListenBacklog = 512;
// How long accepting pauses when the process is out of descriptors.
constexpr std::chrono::milliseconds kAcceptPause{100};

std::string Errno() { return std::strerror(errno); }

std::string AddressText(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return fmt::format("[{}]:{}", host, port);
  }
  return fmt::format("{}:{}", host, port);
}

// A bound, listening, non-blocking socket on host:port, or the error.
Result<int> ListenOn(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return InvalidArgument("cannot resolve --host {}: {}", host, ::gai_strerror(rc));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* ai = found; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
      error = Errno();
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0)
    return IoError("cannot bind {}:{}: {} (in use, or a bad address?)", host, port, error);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

struct HttpTransport::Impl {
  TransportOptions options;
  HttpService& service;
  int listen_fd = -1;
  int wake_read = -1;
  int wake_write = -1;
  int port = 0;
  std::atomic<bool> stop{false};
  std::atomic<int> open_connections{0};

  std::mutex mu;
  std::condition_variable work_cv;
  std::deque<std::unique_ptr<Connection>> ready;     // heads complete, waiting for a worker
  std::deque<std::unique_ptr<Connection>> returned;  // workers → poller (kept alive)
  std::unordered_set<int> active_fds;                // connections a worker serves now
  bool stopping = false;

  // Poller thread only: connections waiting for (the rest of) a head, or idle.
  std::vector<std::unique_ptr<Connection>> waiting;
  SteadyClock::time_point accept_paused_until{};

  Impl(TransportOptions o, HttpService& s) : options(std::move(o)), service(s) {}
  ~Impl() {
    for (int fd : {listen_fd, wake_read, wake_write}) {
      if (fd >= 0) ::close(fd);
    }
  }

  void PollLoop();
  void Accept();
  void TakeReturned();
  void Watch(std::unique_ptr<Connection> conn);
  // Reads what arrived on a waiting connection; false when it leaves the waiting list.
  bool OnReadable(std::unique_ptr<Connection>& conn);
  void Dispatch(std::unique_ptr<Connection> conn);
  // A transport error answered from the poller, then the connection closes.
  void Refuse(std::unique_ptr<Connection> conn, int status, const std::string& message);
  int NextTimeoutMs() const;
  void ExpireDeadlines();
  void WorkerLoop();
  void Shutdown(std::vector<std::thread>& workers);
};

Connection::~Connection() {
  if (fd >= 0) ::close(fd);
}

void HttpTransport::Impl::Refuse(std::unique_ptr<Connection> conn, int status,
                                 const std::string& message) {
  HttpResponse r = service.ErrorBody(HttpRequest{}, status, message);
  std::string bytes =
      ResponseHead(11, status, r.content_type, r.headers, static_cast<long long>(r.body.size()),
                   false, false, options.keep_alive_idle) +
      r.body;
  // Small, so one non-blocking send normally takes it all; the poller never waits.
  [[maybe_unused]] ssize_t n = ::send(conn->fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  HttpRequest request;
  request.remote = conn->remote;
  service.OnResponse(request, status);
  open_connections.fetch_sub(1);
}

void HttpTransport::Impl::Dispatch(std::unique_ptr<Connection> conn) {
  {
    std::lock_guard<std::mutex> lock(mu);
    ready.push_back(std::move(conn));
  }
  work_cv.notify_one();
}

void HttpTransport::Impl::Watch(std::unique_ptr<Connection> conn) {
  const auto now = SteadyClock::now();
  if (HeadEnd(conn->buffer) != std::string::npos) return Dispatch(std::move(conn));
  conn->receiving_head = !conn->buffer.empty();
  conn->deadline = now + (conn->receiving_head ? options.header_timeout : options.keep_alive_idle);
  waiting.push_back(std::move(conn));
}

void HttpTransport::Impl::Accept() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the listening socket stays readable, so polling it again at
      // once would spin. Leave the pending connections in the backlog for a moment.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until = SteadyClock::now() + kAcceptPause;
      }
      return;  // EAGAIN: all taken; ECONNABORTED and the like: next round
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    conn->remote = AddressText(addr);
    if (open_connections.fetch_add(1) >= options.max_connections) {
      Refuse(std::move(conn), 503,
             fmt::format("the server has {} connections open: retry shortly",
                         options.max_connections));
      continue;
    }
    conn->deadline = SteadyClock::now() + options.header_timeout;
    waiting.push_back(std::move(conn));
  }
}

bool HttpTransport::Impl::OnReadable(std::unique_ptr<Connection>& conn) {
  const size_t cap = options.max_header_bytes + 1;
  const IoResult r = ReadSome(*conn, std::chrono::milliseconds(0), conn->buffer, cap);
  if (HeadEnd(conn->buffer) != std::string::npos) {
    Dispatch(std::move(conn));
    return false;
  }
  if (r == IoResult::kClosed || r == IoResult::kError) {
    open_connections.fetch_sub(1);
    conn.reset();
    return false;
  }
  if (conn->buffer.size() > options.max_header_bytes) {
    Refuse(std::move(conn), 431,
           fmt::format("the request line and headers exceed {} bytes", options.max_header_bytes));
    return false;
  }
  if (!conn->receiving_head && !conn->buffer.empty()) {
    conn->receiving_head = true;
    conn->deadline = SteadyClock::now() + options.header_timeout;
  }
  return true;
}

void HttpTransport::Impl::TakeReturned() {
  std::deque<std::unique_ptr<Connection>> back;
  {
    std::lock_guard<std::mutex> lock(mu);
    back.swap(returned);
  }
  for (auto& conn : back) Watch(std::move(conn));
}

int HttpTransport::Impl::NextTimeoutMs() const {
  const auto now = SteadyClock::now();
  long long ms = kMaxPollMs;
  if (accept_paused_until > now) {
    ms = std::chrono::duration_cast<std::chrono::milliseconds>(accept_paused_until - now).count() +
         1;
  }
  for (const auto& conn : waiting) {
    ms = std::min<long long>(
        ms,
        std::chrono::duration_cast<std::chrono::milliseconds>(conn->deadline - now).count() + 1);
  }
  return static_cast<int>(std::max<long long>(ms, 0));
}

void HttpTransport::Impl::ExpireDeadlines() {
  const auto now = SteadyClock::now();
  for (auto& conn : waiting) {
    if (!conn || conn->deadline > now) continue;
    if (conn->receiving_head) {
      Refuse(std::move(conn), 408,
             fmt::format("the request headers did not arrive within {} ms",
                         options.header_timeout.count()));
    } else {
      open_connections.fetch_sub(1);  // idle: close quietly
      conn.reset();
    }
  }
  std::erase(waiting, nullptr);
}

void HttpTransport::Impl::PollLoop() {
  std::vector<pollfd> fds;
  while (!stop.load()) {
    TakeReturned();
    const bool accepting = SteadyClock::now() >= accept_paused_until;
    fds.assign({{accepting ? listen_fd : -1, POLLIN, 0}, {wake_read, POLLIN, 0}});
    for (const auto& conn : waiting) fds.push_back({conn->fd, POLLIN | POLLRDHUP, 0});
    const int n = ::poll(fds.data(), fds.size(), NextTimeoutMs());
    if (n < 0 && errno != EINTR) break;
    if (n > 0) {
      if (fds[1].revents != 0) {
        char drain[64];
        while (::read(wake_read, drain, sizeof(drain)) > 0) {
        }
      }
      // The connections first: Accept appends to `waiting`, past the polled entries.
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0 && !OnReadable(waiting[i - 2])) waiting[i - 2] = nullptr;
      }
      std::erase(waiting, nullptr);
      if (fds[0].revents != 0) Accept();
    }
    ExpireDeadlines();
  }
}

void HttpTransport::Impl::WorkerLoop() {
  SetThreadName("http-worker");
  while (true) {
    std::unique_ptr<Connection> conn;
    {
      std::unique_lock<std::mutex> lock(mu);
      work_cv.wait(lock, [&] { return stopping || !ready.empty(); });
      if (stopping) return;
      conn = std::move(ready.front());
      ready.pop_front();
      active_fds.insert(conn->fd);
    }
    const bool keep = ServeExchange(*conn, options, service);
    bool closed = true;
    {
      std::lock_guard<std::mutex> lock(mu);
      active_fds.erase(conn->fd);
      if (keep && !stopping) {
        returned.push_back(std::move(conn));
        closed = false;
      }
    }
    if (closed) {
      open_connections.fetch_sub(1);
    } else {
      [[maybe_unused]] ssize_t n = ::write(wake_write, "r", 1);
    }
  }
}

void HttpTransport::Impl::Shutdown(std::vector<std::thread>& workers) {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
    // A handler waiting on its client or writing to it sees the connection end and returns.
    for (int fd : active_fds) ::shutdown(fd, SHUT_RDWR);
  }
  work_cv.notify_all();
  for (std::thread& t : workers) t.join();
  ::close(listen_fd);
  listen_fd = -1;
  waiting.clear();
  std::lock_guard<std::mutex> lock(mu);
  ready.clear();
  returned.clear();
}

Result<std::unique_ptr<HttpTransport>> HttpTransport::Listen(TransportOptions options,
                                                             HttpService& service) {
  auto impl = std::make_unique<Impl>(std::move(options), service);
  SHARDLM_ASSIGN_OR_RETURN(impl->listen_fd, ListenOn(impl->options.host, impl->options.port));
  impl->port = BoundPort(impl->listen_fd);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return IoError("cannot create the HTTP server's wake pipe: {}", Errno());
  }
  impl->wake_read = pipe_fds[0];
  impl->wake_write = pipe_fds[1];
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(impl)));
}

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpTransport::~HttpTransport() = default;

int HttpTransport::port() const { return impl_->port; }

void HttpTransport::Run() {
  std::vector<std::thread> workers;
  for (int i = 0; i < std::max(impl_->options.n_workers, 1); ++i) {
    workers.emplace_back([this] { impl_->WorkerLoop(); });
  }
  impl_->PollLoop();
  impl_->Shutdown(workers);
}

void HttpTransport::Stop() {
  impl_->stop.store(true);
  [[maybe_unused]] ssize_t n = ::write(impl_->wake_write, "s", 1);
}

}  // namespace shardlm::server
