// Peer uid checks on shard sockets: SO_PEERCRED reads the peer's pid and uid; a listener
// hangs up on a client of another uid before a byte or a descriptor passes, and reports its
// uid and pid; a client refuses a listener of another uid with an error naming the socket and
// both uids; an allowed other uid gets through both ways. The other uid is a real process
// (tests/ipc/probe) run as uid 65534, so those tests run as root only.
#include "ipc/peer_credentials.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ipc/message_channel.h"
#include "support/other_user.h"

namespace shardlm {
namespace {

using testing::ChildProcess;
using testing::kOtherUid;
using testing::OtherUserDir;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(PeerCredentials, SocketPairPeerIsThisProcess) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  UniqueFd a(fds[0]), b(fds[1]);
  Result<PeerCredentials> peer = ReadPeerCredentials(a.get());
  ASSERT_TRUE(peer.ok()) << peer.status().message();
  EXPECT_EQ(peer->pid, ::getpid());
  EXPECT_EQ(peer->uid, ::geteuid());
  EXPECT_EQ(peer->gid, ::getegid());
}

TEST(PeerCredentials, NotASocketIsAnError) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  UniqueFd a(fds[0]), b(fds[1]);
  Result<PeerCredentials> peer = ReadPeerCredentials(a.get());
  ASSERT_FALSE(peer.ok());
  EXPECT_TRUE(Contains(peer.status().message(), "SO_PEERCRED")) << peer.status().message();
}

TEST(PeerUidPolicy, OwnUidAndTheNamedOnes) {
  const uid_t own = ::geteuid();
  const uid_t other = own + 1;
  PeerUidPolicy only_own;
  EXPECT_TRUE(only_own.Allows(own));
  EXPECT_FALSE(only_own.Allows(other));
  EXPECT_EQ(only_own.Describe(), "uid " + std::to_string(own));
  PeerUidPolicy with_other({other, own, other});
  EXPECT_TRUE(with_other.Allows(own));
  EXPECT_TRUE(with_other.Allows(other));
  EXPECT_FALSE(with_other.Allows(own + 2));
  EXPECT_EQ(with_other.Describe(), "uids " + std::to_string(own) + ", " + std::to_string(other));

  const PeerCredentials stranger{4242, other, other};
  EXPECT_TRUE(CheckPeerUid(stranger, with_other, "the peer").ok());
  Status refused = CheckPeerUid(stranger, only_own, "the process listening on /s");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(), "the process listening on /s runs as uid " + std::to_string(other) +
                                   " (pid 4242); only uid " + std::to_string(own) + " may");
}

// A descriptor to pass along with a message: the read end of a fresh pipe.
struct PassableFd {
  UniqueFd read_end, write_end;
  PassableFd() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read_end = UniqueFd(fds[0]);
    write_end = UniqueFd(fds[1]);
  }
  int get() const { return read_end.get(); }
};

// A listener of this test process, with the refusals it reports.
struct LoggingListener {
  std::unique_ptr<UnixListener> listener;
  std::mutex mu;
  std::vector<std::string> refusals;

  LoggingListener(const std::string& path, const PeerUidPolicy& peers) {
    Result<std::unique_ptr<UnixListener>> made =
        UnixListener::Listen(path, peers, [this](const std::string& reason) {
          std::lock_guard<std::mutex> lock(mu);
          refusals.push_back(reason);
        });
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (made.ok()) listener = std::move(made).value();
  }
  std::vector<std::string> Refusals() {
    std::lock_guard<std::mutex> lock(mu);
    return refusals;
  }
};

// The probe (run as the other user) connects to `path`, trusting this process's uid.
std::vector<std::string> ProbeConnect(const OtherUserDir& dir, const std::string& path) {
  return testing::AsOtherUser({dir.Copy(SHARDLM_PEER_PROBE, "probe_connect"), "connect", path,
                               std::to_string(::geteuid())});
}

// A root-owned socket folder and socket file that everyone may reach (0711 and 0666): only
// the uid check stands between the other user and the listener.
std::string OpenSocket(const OtherUserDir& dir) {
  return dir.Subdir("open", ::geteuid(), 0711) + "/s.sock";
}

TEST(PeerUidCheck, ClientOfAnotherUidIsHungUpOnBeforeAnyByte) {
  SHARDLM_REQUIRE_ROOT_FOR_OTHER_USER();
  OtherUserDir dir;
  const std::string path = OpenSocket(dir);
  LoggingListener daemon(path, PeerUidPolicy());
  ASSERT_TRUE(daemon.listener);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  // Were the client let in, it would get this reply with a descriptor.
  const PassableFd fd;
  Result<std::unique_ptr<MessageChannel>> accepted = Unavailable("not run");
  std::thread acceptor([&] {
    accepted = daemon.listener->Accept(20000);
    if (accepted.ok()) (void)(*accepted)->Send(ShardMessageType::kHelloReply, {}, fd.get());
  });
  ChildProcess probe(ProbeConnect(dir, path), dir.File("probe.out"));
  EXPECT_EQ(probe.Wait(std::chrono::seconds(30)), 0) << probe.output();
  daemon.listener->Shutdown();
  acceptor.join();

  // The client connected (the kernel let it), then saw only the connection end.
  EXPECT_TRUE(Contains(probe.output(), "connect: ok\nreceived: nothing (connection closed)"))
      << probe.output();
  EXPECT_FALSE(accepted.ok()) << "Accept returned a client of uid " << kOtherUid;
  const std::vector<std::string> refusals = daemon.Refusals();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_EQ(refusals[0], "the client on " + path + " runs as uid " + std::to_string(kOtherUid) +
                             " (pid " + std::to_string(probe.pid()) + "); only uid " +
                             std::to_string(::geteuid()) + " may");
}

TEST(PeerUidCheck, AllowedOtherUidClientIsServed) {
  SHARDLM_REQUIRE_ROOT_FOR_OTHER_USER();
  OtherUserDir dir;
  const std::string path = OpenSocket(dir);
  LoggingListener daemon(path, PeerUidPolicy({kOtherUid}));
  ASSERT_TRUE(daemon.listener);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  ChildProcess probe(ProbeConnect(dir, path), dir.File("probe.out"));
  Result<std::unique_ptr<MessageChannel>> accepted = daemon.listener->Accept(20000);
  ASSERT_TRUE(accepted.ok()) << accepted.status().message() << "\n" << probe.output();
  const std::vector<uint8_t> reply = {1, 2, 3};
  const PassableFd fd;
  ASSERT_TRUE((*accepted)->Send(ShardMessageType::kHelloReply, reply, fd.get()).ok());
  EXPECT_EQ(probe.Wait(std::chrono::seconds(30)), 0) << probe.output();
  EXPECT_TRUE(Contains(probe.output(),
                       "connect: ok\nreceived: HelloReply, 3 bytes, with a "
                       "descriptor"))
      << probe.output();
  EXPECT_TRUE(daemon.Refusals().empty());
}

TEST(PeerUidCheck, ListenerOfAnotherUidIsRefusedBeforeTheHello) {
  SHARDLM_REQUIRE_ROOT_FOR_OTHER_USER();
  OtherUserDir dir;
  // The other user's own folder; root may still enter it, and connect to what is in it.
  const std::string path = dir.Subdir("theirs", kOtherUid, 0700) + "/s.sock";
  // The impostor lets this process in, and reports what each client sends it.
  ChildProcess probe(testing::AsOtherUser({dir.Copy(SHARDLM_PEER_PROBE, "probe_listen"), "listen",
                                           path, std::to_string(::geteuid()), "2"}),
                     dir.File("probe.out"));
  ASSERT_TRUE(probe.WaitFor("listening", std::chrono::seconds(20))) << probe.output();

  Result<std::unique_ptr<MessageChannel>> refused = MessageChannel::Connect(path);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "the process listening on " + path + " runs as uid " +
                                            std::to_string(kOtherUid) + " (pid " +
                                            std::to_string(probe.pid()) + "); only uid " +
                                            std::to_string(::geteuid()) + " may");
  ASSERT_TRUE(probe.WaitFor("received:", std::chrono::seconds(20))) << probe.output();
  EXPECT_TRUE(Contains(probe.output(), "accept: ok\nreceived: nothing (connection closed)"))
      << probe.output();

  // Trusting that uid, the same connection carries a Hello and its descriptor.
  Result<std::unique_ptr<MessageChannel>> trusted =
      MessageChannel::Connect(path, PeerUidPolicy({kOtherUid}));
  ASSERT_TRUE(trusted.ok()) << trusted.status().message();
  const std::vector<uint8_t> hello = {7, 7};
  const PassableFd fd;
  ASSERT_TRUE((*trusted)->Send(ShardMessageType::kHello, hello, fd.get()).ok());
  EXPECT_EQ(probe.Wait(std::chrono::seconds(30)), 0) << probe.output();
  EXPECT_TRUE(Contains(probe.output(), "accept: ok\nreceived: Hello, 2 bytes, with a descriptor"))
      << probe.output();
}

}  // namespace
}  // namespace shardlm
