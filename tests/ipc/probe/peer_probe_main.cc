// shardlm_peer_probe: one end of a shard socket for the peer-credential tests, to be run as
// another user (setpriv) so that a test can show what a peer of a foreign uid gets.
//
//   shardlm_peer_probe connect PATH UID         connect (trusting UID besides its own uid),
//                                               then wait for one message
//   shardlm_peer_probe listen PATH UID CLIENTS  listen (letting UID in besides its own uid),
//                                               then serve CLIENTS clients: accept each and
//                                               wait for one message from it
//
// It prints one line per step on stdout, flushed at once: "listening", "connect: ok" or
// "connect: ERROR", "accept: ok" or "accept: ERROR", then "received: TYPE, N bytes, with a
// descriptor" / "received: TYPE, N bytes, no descriptor" or "received: nothing (REASON)".
// Goals: what the peer saw, in words a test can match. Non-goals: speaking the protocol.
#include <sys/types.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "ipc/message_channel.h"

namespace shardlm {
namespace {

// How long a step waits for its peer: far beyond what a test needs, short enough that a
// probe left behind by a failed test ends by itself.
constexpr int kStepTimeoutMs = 10000;

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void ReportOneMessage(MessageChannel& channel) {
  Result<ReceivedMessage> message = channel.Receive(kMaxShardMessageBytes, kStepTimeoutMs);
  if (!message.ok()) {
    Say("received: nothing (" + message.status().message() + ")");
    return;
  }
  Say(std::string("received: ") + ShardMessageTypeName(message->type) + ", " +
      std::to_string(message->payload.size()) + " bytes, " +
      (message->fd.valid() ? "with a descriptor" : "no descriptor"));
}

int Connect(const std::string& path, uid_t trusted) {
  Result<std::unique_ptr<MessageChannel>> channel =
      MessageChannel::Connect(path, PeerUidPolicy({trusted}));
  if (!channel.ok()) {
    Say("connect: " + channel.status().message());
    return 0;
  }
  Say("connect: ok");
  ReportOneMessage(**channel);
  return 0;
}

int Listen(const std::string& path, uid_t trusted, int clients) {
  Result<std::unique_ptr<UnixListener>> listener = UnixListener::Listen(
      path, PeerUidPolicy({trusted}), [](const std::string& reason) { Say("refused: " + reason); });
  if (!listener.ok()) {
    Say("listen: " + listener.status().message());
    return 1;
  }
  Say("listening");
  for (int i = 0; i < clients; ++i) {
    Result<std::unique_ptr<MessageChannel>> channel = (*listener)->Accept(kStepTimeoutMs);
    if (!channel.ok()) {
      Say("accept: " + channel.status().message());
      return 0;
    }
    Say("accept: ok");
    ReportOneMessage(**channel);
  }
  return 0;
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "connect" && argc == 4) {
    return shardlm::Connect(argv[2], uid_t(std::strtoul(argv[3], nullptr, 10)));
  }
  if (mode == "listen" && argc == 5) {
    return shardlm::Listen(argv[2], uid_t(std::strtoul(argv[3], nullptr, 10)), std::atoi(argv[4]));
  }
  std::fprintf(stderr, "usage: %s connect PATH UID | listen PATH UID CLIENTS\n", argv[0]);
  return 2;
}
