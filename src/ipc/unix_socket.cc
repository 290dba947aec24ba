// Unix-socket plumbing (unix_socket_impl.h) and UniqueFd (message_channel.h).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ipc/unix_socket_impl.h"

namespace shardlm {

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

std::string ErrnoText(int err) { return std::strerror(err); }

Result<sockaddr_un> UnixSocketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty()) return InvalidArgument("empty Unix socket path");
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument(
        "Unix socket path {} is {} bytes; the limit is {} (choose a shorter "
        "path)",
        path, path.size(), sizeof(addr.sun_path) - 1);
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

int ConnectUnixSocket(const sockaddr_un& addr, int socket_flags, UniqueFd& out) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | socket_flags, 0));
  if (!fd.valid()) return errno;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINTR) return errno;
    // An interrupted connect completes in the background: wait for it, then ask how it went.
    pollfd pfd{.fd = fd.get(), .events = POLLOUT, .revents = 0};
    int rc = PollUntil(&pfd, 1, Deadline(-1));
    if (rc < 0) return -rc;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    if (err != 0) return err;
  }
  out = std::move(fd);
  return 0;
}

Deadline::Deadline(int timeout_ms)
    : timeout_ms_(timeout_ms),
      end_(std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0))) {}

int Deadline::RemainingMs() const {
  if (timeout_ms_ < 0) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(end_ - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

int PollUntil(pollfd* fds, nfds_t n_fds, const Deadline& deadline) {
  for (;;) {
    int rc = ::poll(fds, n_fds, deadline.RemainingMs());
    if (rc >= 0) return rc;
    if (errno != EINTR) return -errno;
  }
}

}  // namespace shardlm
