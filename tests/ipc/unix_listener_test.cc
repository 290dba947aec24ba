// UnixListener and MessageChannel::Connect: a 0600 socket file, stale sockets replaced,
// live sockets and ordinary files left alone, Accept that times out and wakes on Shutdown.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "ipc/message_channel.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace {

using testing_util::TempDir;

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Connects a client, accepts it, and passes one message each way.
void ExpectServes(UnixListener& listener) {
  auto client = MessageChannel::Connect(listener.path());
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto server = listener.Accept(5000);
  ASSERT_TRUE(server.ok()) << server.status().message();
  ASSERT_TRUE((*client)->Send(ShardMessageType::kStatsRequest, {}).ok());
  auto request = (*server)->Receive(kMaxShardMessageBytes, 5000);
  ASSERT_TRUE(request.ok()) << request.status().message();
  EXPECT_EQ(request->type, ShardMessageType::kStatsRequest);
  std::vector<uint8_t> reply = {1, 2, 3};
  ASSERT_TRUE((*server)->Send(ShardMessageType::kStatsReply, reply).ok());
  auto got = (*client)->Receive(kMaxShardMessageBytes, 5000);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->payload, reply);
}

TEST(UnixListener, SocketFileIsOwnerOnlyAndServes) {
  TempDir dir;
  std::string path = dir.File("shard.sock");
  mode_t old_mask = ::umask(0);  // a permissive umask must not leak into the socket mode
  auto listener = UnixListener::Listen(path);
  ::umask(old_mask);
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ExpectServes(**listener);
}

TEST(UnixListener, AcceptedChannelIsCloexec) {
  TempDir dir;
  auto listener = UnixListener::Listen(dir.File("s"));
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  auto client = MessageChannel::Connect((*listener)->path());
  ASSERT_TRUE(client.ok());
  auto server = (*listener)->Accept(5000);
  ASSERT_TRUE(server.ok()) << server.status().message();
  EXPECT_TRUE(::fcntl((*server)->fd(), F_GETFD) & FD_CLOEXEC);
  EXPECT_TRUE(::fcntl((*client)->fd(), F_GETFD) & FD_CLOEXEC);
}

TEST(UnixListener, DestructorRemovesSocketFile) {
  TempDir dir;
  std::string path = dir.File("s");
  {
    auto listener = UnixListener::Listen(path);
    ASSERT_TRUE(listener.ok()) << listener.status().message();
    EXPECT_TRUE(Exists(path));
  }
  EXPECT_FALSE(Exists(path));
}

TEST(UnixListener, StaleSocketFileIsReplaced) {
  TempDir dir;
  std::string path = dir.File("s");
  {  // a daemon that died: its socket file stays, nobody listens
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(fd);
  }
  ASSERT_TRUE(Exists(path));
  auto listener = UnixListener::Listen(path);
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  ExpectServes(**listener);
}

TEST(UnixListener, LiveSocketIsRefused) {
  TempDir dir;
  std::string path = dir.File("s");
  auto first = UnixListener::Listen(path);
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto second = UnixListener::Listen(path);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("another process is listening on " + path),
            std::string::npos)
      << second.status().message();
  // The probe that found it alive connected and hung up: the live daemon sees a client
  // that closes before sending anything, then serves on as before.
  auto probe = (*first)->Accept(5000);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  EXPECT_EQ((*probe)->Receive(kMaxShardMessageBytes, 5000).status().code(),
            StatusCode::kUnavailable);
  ExpectServes(**first);
}

TEST(UnixListener, NonSocketFileIsRefusedAndKept) {
  TempDir dir;
  std::string path = dir.File("notes.txt");
  std::ofstream(path) << "precious";
  auto listener = UnixListener::Listen(path);
  ASSERT_FALSE(listener.ok());
  EXPECT_NE(listener.status().message().find(path), std::string::npos);
  EXPECT_NE(listener.status().message().find("not a socket"), std::string::npos);
  std::stringstream contents;
  contents << std::ifstream(path).rdbuf();
  EXPECT_EQ(contents.str(), "precious");
}

TEST(UnixListener, MissingDirectoryNamesPath) {
  TempDir dir;
  std::string path = dir.File("no/such/dir.sock");
  auto listener = UnixListener::Listen(path);
  ASSERT_FALSE(listener.ok());
  EXPECT_NE(listener.status().message().find(path), std::string::npos);
}

TEST(UnixListener, AcceptTimesOut) {
  TempDir dir;
  auto listener = UnixListener::Listen(dir.File("s"));
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  auto start = std::chrono::steady_clock::now();
  auto channel = (*listener)->Accept(50);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(channel.status().message().find("timed out"), std::string::npos);
}

TEST(UnixListener, ShutdownWakesAccept) {
  TempDir dir;
  auto listener = UnixListener::Listen(dir.File("s"));
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  Result<std::unique_ptr<MessageChannel>> channel = Status(StatusCode::kInternal, "not run");
  std::thread acceptor([&] { channel = (*listener)->Accept(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  (*listener)->Shutdown();
  acceptor.join();
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*listener)->Accept(0).status().code(), StatusCode::kUnavailable);
}

TEST(MessageChannelConnect, MissingSocketIsUnavailableNamingPath) {
  TempDir dir;
  std::string path = dir.File("nobody.sock");
  auto channel = MessageChannel::Connect(path);
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(channel.status().message().find(path), std::string::npos);
}

TEST(MessageChannelConnect, OverLongPathIsInvalidArgument) {
  std::string path = "/tmp/" + std::string(200, 'x') + ".sock";
  EXPECT_EQ(MessageChannel::Connect(path).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(UnixListener::Listen(path).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardlm
