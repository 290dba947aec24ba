// MessageChannel (message_channel.h): frames over a connected Unix stream socket, with a
// file descriptor passed as SCM_RIGHTS ancillary data on the frame's first chunk.
#include "ipc/message_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ipc/unix_socket_impl.h"

namespace shardlm {
namespace {

// u32 magic, u32 type, u32 payload length, little-endian.
constexpr size_t kFrameHeaderBytes = 12;
// Room for a few descriptors in one recvmsg: the protocol sends at most one per message,
// anything more is closed; a sender exceeding this sets MSG_CTRUNC and is refused.
constexpr size_t kMaxFdsPerRead = 4;

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Keeps the first descriptor that arrives for a message in `fd`; closes any other.
void CollectFds(msghdr& msg, UniqueFd& fd) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      UniqueFd owned(received);
      if (!fd.valid()) fd = std::move(owned);  // else closed here: unexpected extra fd
    }
  }
}

}  // namespace

MessageChannel::MessageChannel(UniqueFd fd) : fd_(std::move(fd)) {}

Result<std::unique_ptr<MessageChannel>> MessageChannel::Connect(const std::string& path,
                                                                const PeerUidPolicy& peers) {
  SHARDLM_ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  UniqueFd fd;
  if (int err = ConnectUnixSocket(addr, 0, fd); err != 0) {
    return Unavailable("cannot connect to shard socket {}: {}", path, ErrnoText(err));
  }
  // Checked before the caller can send anything (a Hello carries the shared-memory region):
  // a refused listener only sees the connection close.
  Result<PeerCredentials> peer = ReadPeerCredentials(fd.get());
  if (!peer.ok()) return peer.status().WithContext("shard socket " + path);
  SHARDLM_TRY(CheckPeerUid(*peer, peers, "the process listening on " + path));
  return std::make_unique<MessageChannel>(std::move(fd));
}

Status MessageChannel::ClosedStatus(const char* what) const {
  if (shut_down_.load()) return Unavailable("connection closed (channel shut down)");
  return Unavailable("connection closed{}", what);
}

Status MessageChannel::Send(ShardMessageType type, std::span<const uint8_t> payload,
                            int attach_fd) {
  if (shut_down_.load()) return ClosedStatus("");
  if (payload.size() > UINT32_MAX) {
    return InvalidArgument("{} payload of {} bytes does not fit a frame",
                           ShardMessageTypeName(type), payload.size());
  }
  uint8_t header[kFrameHeaderBytes];
  PutU32(header, kShardMagic);
  PutU32(header + 4, static_cast<uint32_t>(type));
  PutU32(header + 8, static_cast<uint32_t>(payload.size()));
  const size_t total = kFrameHeaderBytes + payload.size();
  size_t sent = 0;
  while (sent < total) {
    iovec iov[2];
    int n_iov = 0;
    if (sent < kFrameHeaderBytes) {
      iov[n_iov++] = {header + sent, kFrameHeaderBytes - sent};
    }
    size_t payload_sent = sent > kFrameHeaderBytes ? sent - kFrameHeaderBytes : 0;
    if (payload_sent < payload.size()) {
      iov[n_iov++] = {const_cast<uint8_t*>(payload.data()) + payload_sent,
                      payload.size() - payload_sent};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n_iov;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (sent == 0 && attach_fd >= 0) {  // the descriptor rides on the first byte only
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &attach_fd, sizeof(int));
    }
    ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a non-blocking socket handed to us: wait for room
        pollfd pfd{.fd = fd_.get(), .events = POLLOUT, .revents = 0};
        if (PollUntil(&pfd, 1, Deadline(-1)) >= 0) continue;
      }
      if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
        return ClosedStatus(" while sending");
      }
      return IoError("sending {} ({} bytes): {}", ShardMessageTypeName(type), payload.size(),
                     ErrnoText(errno));
    }
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status MessageChannel::ReadFull(std::span<uint8_t> out, const Deadline& deadline, UniqueFd& fd) {
  size_t got = 0;
  while (got < out.size()) {
    pollfd pfd{.fd = fd_.get(), .events = POLLIN, .revents = 0};
    int rc = PollUntil(&pfd, 1, deadline);
    if (rc < 0) return IoError("waiting for a message: {}", ErrnoText(-rc));
    if (rc == 0)
      return Unavailable("timed out after {} ms waiting for a message", deadline.timeout_ms());
    iovec iov{out.data() + got, out.size() - got};
    alignas(cmsghdr) char control[CMSG_SPACE(kMaxFdsPerRead * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == ECONNRESET) return ClosedStatus(" (reset by peer)");
      return IoError("receiving a message: {}", ErrnoText(errno));
    }
    CollectFds(msg, fd);
    if (msg.msg_flags & MSG_CTRUNC) {
      return InvalidData("peer sent more than {} file descriptors with one message",
                         kMaxFdsPerRead);
    }
    if (n == 0) {
      if (shut_down_.load() || got == 0) return ClosedStatus("");
      return ClosedStatus(" in the middle of a message");
    }
    got += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<ReceivedMessage> MessageChannel::Receive(uint32_t max_payload, int timeout_ms) {
  if (shut_down_.load()) return ClosedStatus("");
  Deadline deadline(timeout_ms);
  ReceivedMessage message;
  uint8_t header[kFrameHeaderBytes];
  SHARDLM_TRY(ReadFull(header, deadline, message.fd));
  uint32_t magic = GetU32(header);
  uint32_t type = GetU32(header + 4);
  uint32_t length = GetU32(header + 8);
  if (magic != kShardMagic) {
    return InvalidData("bad frame magic {:#010x} (expected {:#010x}): not a shardlm peer", magic,
                       kShardMagic);
  }
  if (!ShardMessageTypeValid(type)) return InvalidData("unknown message type {}", type);
  message.type = static_cast<ShardMessageType>(type);
  if (length > max_payload) {
    return InvalidData("{} message of {} bytes exceeds the limit of {} bytes",
                       ShardMessageTypeName(message.type), length, max_payload);
  }
  message.payload.resize(length);
  SHARDLM_TRY(ReadFull(message.payload, deadline, message.fd));
  return message;
}

void MessageChannel::Shutdown() {
  shut_down_.store(true);
  ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace shardlm
