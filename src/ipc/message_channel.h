// MessageChannel: framed messages over a connected Unix stream socket, with an optional
// file descriptor passed alongside (SCM_RIGHTS) — the transport of the shard protocol on
// one host.
//
// Frame: u32 magic kShardMagic, u32 type, u32 payload length, then the payload. Receive
// checks the magic and refuses a length above the caller's limit before allocating, so a
// peer sending garbage gets disconnected (InvalidData) instead of costing memory.
//
// Goals: whole messages or a Status; a closed or reset peer is kUnavailable ("connection
// closed"), a timeout kUnavailable ("timed out"); never SIGPIPE (MSG_NOSIGNAL); EINTR
// retried.
// Non-goals: message meaning (shard_protocol.h), several outstanding requests.
//
// Listening sockets are created with mode 0600 (only the owner may connect): the socket is
// bound under a umask of 0177, then chmod'ed, and an existing stale socket file at the
// path is replaced only when nothing is listening on it. Both ends also check the peer's
// uid (peer_credentials.h) before any byte passes: Connect refuses a listener, Accept a
// client, that runs as a uid the PeerUidPolicy does not allow.
//
// Thread safety: one thread sends and receives at a time; Shutdown may be called from any
// thread to wake a blocked Receive. Lifetime: owns its fd (closed in the destructor).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "ipc/peer_credentials.h"
#include "ipc/shard_protocol.h"

namespace shardlm {

class Deadline;  // unix_socket_impl.h

// A file descriptor that closes itself.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

struct ReceivedMessage {
  ShardMessageType type = ShardMessageType::kHello;
  std::vector<uint8_t> payload;
  UniqueFd fd;  // valid when the sender attached one
};

class MessageChannel {
 public:
  // Connects to a listening socket and checks that the process listening on it runs as a
  // uid `peers` allows; a refused listener is hung up on before anything is sent to it.
  // Errors: kUnavailable naming the path (no such socket, connection refused),
  // InvalidArgument for a path longer than sun_path or a listener of another uid (naming the
  // path, its uid and pid, and the allowed uids).
  static Result<std::unique_ptr<MessageChannel>> Connect(const std::string& path,
                                                         const PeerUidPolicy& peers = {});
  explicit MessageChannel(UniqueFd fd);

  // attach_fd >= 0 sends that descriptor with the message.
  Status Send(ShardMessageType type, std::span<const uint8_t> payload, int attach_fd = -1);
  // Waits up to timeout_ms (< 0: forever) for one whole message of at most max_payload
  // bytes. Errors: kUnavailable (peer closed, reset, timed out, Shutdown), kInvalidData
  // (bad magic, unknown type, length over max_payload, too many fds). Only a timeout
  // before any byte of the message arrived leaves the stream usable; after any other
  // error drop the channel (its framing is lost).
  Result<ReceivedMessage> Receive(uint32_t max_payload = kMaxShardMessageBytes,
                                  int timeout_ms = -1);
  // Wakes a blocked Receive (it returns kUnavailable) and makes later calls fail.
  void Shutdown();
  int fd() const { return fd_.get(); }

 private:
  // Reads exactly out.size() bytes by the deadline; a descriptor that arrives is kept in
  // `fd` (the first one) or closed.
  Status ReadFull(std::span<uint8_t> out, const Deadline& deadline, UniqueFd& fd);
  Status ClosedStatus(const char* what) const;

  UniqueFd fd_;
  std::atomic<bool> shut_down_{false};
};

// Called with the reason each time Accept refuses a client (its uid, pid, the allowed uids).
using RefusedPeerLog = std::function<void(const std::string& reason)>;

class UnixListener {
 public:
  // Creates the socket file at `path` with mode 0600 and listens. Errors name the path:
  // a live socket already there (another daemon; InvalidArgument), a file that is not a
  // socket (InvalidArgument, the file is left alone), a missing directory or permissions
  // (IoError). A stale socket file (nobody accepting on it) is replaced. Finding out
  // connects to the existing socket once: a live daemon there accepts a client that hangs
  // up without sending anything.
  // Accept lets in only clients of a uid `peers` allows; `on_refused` hears of the others.
  // The umask is process-wide: bind briefly runs under 0177, so do not create files from
  // other threads while listening starts.
  static Result<std::unique_ptr<UnixListener>> Listen(const std::string& path,
                                                      PeerUidPolicy peers = {},
                                                      RefusedPeerLog on_refused = {});
  ~UnixListener();  // closes, and unlinks the socket file if it is still ours
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Waits up to timeout_ms (< 0: forever) for a client of an allowed uid; kUnavailable on
  // timeout or after Shutdown. A client of another uid is hung up on at once, before a byte
  // is read from it or written to it (a descriptor it sent is closed unseen), reported to
  // on_refused on this thread, and the wait goes on.
  Result<std::unique_ptr<MessageChannel>> Accept(int timeout_ms = -1);
  void Shutdown();  // wakes Accept; thread-safe
  const std::string& path() const { return path_; }

 private:
  UnixListener(UniqueFd fd, std::string path, PeerUidPolicy peers, RefusedPeerLog on_refused);
  // Ok when the accepted client may be served, else why not.
  Status CheckClient(int client_fd) const;

  UniqueFd fd_;         // listening socket, non-blocking (Accept polls first)
  UniqueFd wake_read_;  // self-pipe that Shutdown writes to
  UniqueFd wake_write_;
  std::string path_;
  PeerUidPolicy peers_;
  RefusedPeerLog on_refused_;
  // Identity of the socket file we bound, so the destructor never unlinks a file that
  // someone else put at the path since.
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace shardlm
