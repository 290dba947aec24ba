// UnixListener (message_channel.h): a 0600 listening socket file that lets in clients of
// allowed uids only, with a self-pipe so that Shutdown can wake a blocked Accept from
// another thread.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "ipc/message_channel.h"
#include "ipc/unix_socket_impl.h"

namespace shardlm {
namespace {

// Clients queued before Accept; one server connects per daemon, so this is ample.
constexpr int kListenBacklog = 16;

// Makes room at `path`: nothing there, or a socket file nobody accepts on (a daemon that
// died without unlinking it), which is removed. Anything else is refused and left alone.
Status RemoveStaleSocket(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return IoError("cannot inspect {}: {}", path, ErrnoText(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return InvalidArgument(
        "{} exists and is not a socket; refusing to replace it (choose "
        "another socket path)",
        path);
  }
  UniqueFd probe;
  int err = ConnectUnixSocket(addr, SOCK_NONBLOCK, probe);
  // EAGAIN: a full backlog, so someone is listening.
  if (err == 0 || err == EAGAIN) {
    return InvalidArgument(
        "another process is listening on {} (stop it or choose another "
        "socket path)",
        path);
  }
  if (err != ECONNREFUSED) return IoError("cannot probe {}: {}", path, ErrnoText(err));
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return IoError("cannot remove stale socket {}: {}", path, ErrnoText(errno));
  }
  return Status::Ok();
}

// bind() under umask 0177 so the socket file is never, even briefly, connectable by
// others; then chmod in case the file system ignored the umask.
Status BindOwnerOnly(int fd, const std::string& path, const sockaddr_un& addr) {
  mode_t old_mask = ::umask(0177);
  int rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  ::umask(old_mask);
  if (rc != 0) {
    if (err == EADDRINUSE) {
      return InvalidArgument("another process is listening on {} (it appeared while binding)",
                             path);
    }
    return IoError("cannot bind {}: {}", path, ErrnoText(err));
  }
  if (::chmod(path.c_str(), 0600) != 0) {
    err = errno;
    ::unlink(path.c_str());
    return IoError("cannot chmod 0600 {}: {}", path, ErrnoText(err));
  }
  return Status::Ok();
}

}  // namespace

UnixListener::UnixListener(UniqueFd fd, std::string path, PeerUidPolicy peers,
                           RefusedPeerLog on_refused)
    : fd_(std::move(fd)),
      path_(std::move(path)),
      peers_(std::move(peers)),
      on_refused_(std::move(on_refused)) {}

Result<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path,
                                                           PeerUidPolicy peers,
                                                           RefusedPeerLog on_refused) {
  SHARDLM_ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  SHARDLM_TRY(RemoveStaleSocket(path, addr));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return IoError("cannot create a socket for {}: {}", path, ErrnoText(errno));
  SHARDLM_TRY(BindOwnerOnly(fd.get(), path, addr));
  // From here the file is ours: the listener's destructor unlinks it on any error below.
  std::unique_ptr<UnixListener> listener(
      new UnixListener(std::move(fd), path, std::move(peers), std::move(on_refused)));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return IoError("cannot stat {} after binding: {}", path, ErrnoText(errno));
  }
  listener->dev_ = st.st_dev;
  listener->ino_ = st.st_ino;
  if (::listen(listener->fd_.get(), kListenBacklog) != 0) {
    return IoError("cannot listen on {}: {}", path, ErrnoText(errno));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return IoError("cannot create a wake-up pipe: {}", ErrnoText(errno));
  }
  listener->wake_read_ = UniqueFd(pipe_fds[0]);
  listener->wake_write_ = UniqueFd(pipe_fds[1]);
  return listener;
}

UnixListener::~UnixListener() {
  struct stat st {};
  if (ino_ != 0 && ::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    ::unlink(path_.c_str());
  }
}

Result<std::unique_ptr<MessageChannel>> UnixListener::Accept(int timeout_ms) {
  Deadline deadline(timeout_ms);
  for (;;) {
    pollfd fds[2] = {{.fd = fd_.get(), .events = POLLIN, .revents = 0},
                     {.fd = wake_read_.get(), .events = POLLIN, .revents = 0}};
    int rc = PollUntil(fds, 2, deadline);
    if (rc < 0) return IoError("waiting for a connection on {}: {}", path_, ErrnoText(-rc));
    // The wake byte is never drained, so every Accept after Shutdown fails at once.
    if (fds[1].revents != 0) return Unavailable("listener on {} shut down", path_);
    if (rc == 0) {
      return Unavailable("timed out after {} ms waiting for a connection on {}", timeout_ms, path_);
    }
    UniqueFd client(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (client.valid()) {
      Status allowed = CheckClient(client.get());
      if (allowed.ok()) return std::make_unique<MessageChannel>(std::move(client));
      // Closed unread and unanswered: the client sees its connection end, nothing more.
      client = UniqueFd();
      if (on_refused_) on_refused_(allowed.message());
      continue;
    }
    // The client may have gone between poll and accept: wait again.
    if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
    return IoError("accepting on {}: {}", path_, ErrnoText(errno));
  }
}

Status UnixListener::CheckClient(int client_fd) const {
  Result<PeerCredentials> peer = ReadPeerCredentials(client_fd);
  if (!peer.ok()) return peer.status().WithContext("a client on " + path_);
  return CheckPeerUid(*peer, peers_, "the client on " + path_);
}

void UnixListener::Shutdown() {
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_write_.get(), &byte, 1);  // EAGAIN: already set
}

}  // namespace shardlm
