// Unix-socket plumbing shared by MessageChannel and UnixListener (message_channel.h):
// addresses, connect, poll with a deadline, errno text.
//
// Goals: every EINTR retried in one place; a deadline that survives retries (the time
// left shrinks instead of restarting).
// Non-goals: framing (message_channel.cc), listening (unix_listener.cc).
//
// Thread safety: free functions; a Deadline is a value.
#pragma once

#include <poll.h>
#include <sys/un.h>

#include <chrono>
#include <string>

#include "base/status.h"
#include "ipc/message_channel.h"

namespace shardlm {

std::string ErrnoText(int err);

// The sockaddr of `path`; InvalidArgument when it is empty or longer than sun_path.
Result<sockaddr_un> UnixSocketAddress(const std::string& path);

// Connects a new stream socket (CLOEXEC | socket_flags, e.g. SOCK_NONBLOCK for a probe
// that must not wait on a full backlog) to addr. Returns 0 and sets `out`, or the errno.
int ConnectUnixSocket(const sockaddr_un& addr, int socket_flags, UniqueFd& out);

// A point in time timeout_ms from now; timeout_ms < 0 never expires.
class Deadline {
 public:
  explicit Deadline(int timeout_ms);
  int timeout_ms() const { return timeout_ms_; }
  // Milliseconds left for poll(): -1 forever, 0 when expired.
  int RemainingMs() const;

 private:
  int timeout_ms_;
  std::chrono::steady_clock::time_point end_;
};

// poll() until an event, the deadline, or an error other than EINTR. Returns the number of
// ready fds (0: timed out) or -errno.
int PollUntil(pollfd* fds, nfds_t n_fds, const Deadline& deadline);

}  // namespace shardlm
