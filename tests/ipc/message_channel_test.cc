// MessageChannel over a socketpair: whole messages with and without a passed descriptor,
// multi-megabyte payloads, and every way a peer can misbehave (close mid-message, garbage
// header, over-limit length, silence, Shutdown from another thread).
#include "ipc/message_channel.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "ipc/shard_protocol.h"
#include "ipc/shm_region.h"

namespace shardlm {
namespace {

struct ChannelPair {
  std::unique_ptr<MessageChannel> a;
  std::unique_ptr<MessageChannel> b;
};

ChannelPair MakePair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {std::make_unique<MessageChannel>(UniqueFd(fds[0])),
          std::make_unique<MessageChannel>(UniqueFd(fds[1]))};
}

// A raw peer: one end of a socketpair as a plain fd, the other as a channel.
struct RawPair {
  UniqueFd raw;
  std::unique_ptr<MessageChannel> channel;
};

RawPair MakeRawPair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {UniqueFd(fds[0]), std::make_unique<MessageChannel>(UniqueFd(fds[1]))};
}

std::vector<uint8_t> Header(uint32_t magic, uint32_t type, uint32_t length) {
  std::vector<uint8_t> h(12);
  for (int i = 0; i < 4; ++i) {
    h[i] = static_cast<uint8_t>(magic >> (8 * i));
    h[4 + i] = static_cast<uint8_t>(type >> (8 * i));
    h[8 + i] = static_cast<uint8_t>(length >> (8 * i));
  }
  return h;
}

void WriteAll(int fd, const std::vector<uint8_t>& bytes) {
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
}

int OpenFdCount() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
  ::closedir(dir);
  return n;
}

TEST(MessageChannel, MessageWithoutFd) {
  ChannelPair pair = MakePair();
  ShardPages pages{{3, 1, 4, 1, 5}};
  std::vector<uint8_t> payload;
  EncodePages(pages, payload);
  ASSERT_TRUE(pair.a->Send(ShardMessageType::kExportPages, payload).ok());
  ASSERT_TRUE(pair.a->Send(ShardMessageType::kStatsRequest, {}).ok());

  auto first = pair.b->Receive();
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->type, ShardMessageType::kExportPages);
  EXPECT_FALSE(first->fd.valid());
  auto decoded = DecodePages(first->payload);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->pages, pages.pages);

  auto second = pair.b->Receive();
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(second->type, ShardMessageType::kStatsRequest);
  EXPECT_TRUE(second->payload.empty());
}

TEST(MessageChannel, PassedMemfdMapsTheSameBytes) {
  ChannelPair pair = MakePair();
  auto region = ShmRegion::Create("shardlm-test", 1 << 16);
  ASSERT_TRUE(region.ok()) << region.status().message();
  std::memcpy((*region)->data() + 100, "hello", 5);
  ShardHello hello;
  hello.shm_bytes = (*region)->size();
  std::vector<uint8_t> payload;
  EncodeHello(hello, payload);
  ASSERT_TRUE(pair.a->Send(ShardMessageType::kHello, payload, (*region)->fd()).ok());

  auto message = pair.b->Receive();
  ASSERT_TRUE(message.ok()) << message.status().message();
  ASSERT_TRUE(message->fd.valid());
  EXPECT_NE(message->fd.get(), (*region)->fd());
  EXPECT_TRUE(::fcntl(message->fd.get(), F_GETFD) & FD_CLOEXEC);
  auto received_hello = DecodeHello(message->payload);
  ASSERT_TRUE(received_hello.ok());
  auto peer = ShmRegion::Map(message->fd.release(), received_hello->shm_bytes);
  ASSERT_TRUE(peer.ok()) << peer.status().message();
  EXPECT_EQ(std::memcmp((*peer)->data() + 100, "hello", 5), 0);
  (*peer)->data()[7] = 42;  // and back the other way
  EXPECT_EQ((*region)->data()[7], 42);
}

TEST(MessageChannel, SeveralMegabytesInBothDirections) {
  ChannelPair pair = MakePair();
  std::vector<uint8_t> big(9 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  // The socket buffer is far smaller than the payload: send from another thread.
  Status send_status;
  std::thread sender([&] { send_status = pair.a->Send(ShardMessageType::kRunBatch, big); });
  auto message = pair.b->Receive();
  sender.join();
  ASSERT_TRUE(send_status.ok()) << send_status.message();
  ASSERT_TRUE(message.ok()) << message.status().message();
  EXPECT_EQ(message->type, ShardMessageType::kRunBatch);
  EXPECT_TRUE(message->payload == big);

  std::thread reply([&] { send_status = pair.b->Send(ShardMessageType::kRunReply, big); });
  auto back = pair.a->Receive();
  reply.join();
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->payload == big);
}

TEST(MessageChannel, PeerCloseIsUnavailable) {
  ChannelPair pair = MakePair();
  pair.a.reset();
  auto message = pair.b->Receive();
  ASSERT_FALSE(message.ok());
  EXPECT_EQ(message.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(message.status().message().find("connection closed"), std::string::npos);
  Status send = pair.b->Send(ShardMessageType::kStatsRequest, {});
  EXPECT_EQ(send.code(), StatusCode::kUnavailable) << send.message();
}

TEST(MessageChannel, PeerCloseMidMessageIsUnavailable) {
  RawPair pair = MakeRawPair();
  std::vector<uint8_t> bytes = Header(kShardMagic, 4, 100);
  bytes.resize(bytes.size() + 10, 7);  // 10 of the 100 promised bytes
  WriteAll(pair.raw.get(), bytes);
  pair.raw = UniqueFd();
  auto message = pair.channel->Receive();
  ASSERT_FALSE(message.ok());
  EXPECT_EQ(message.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(message.status().message().find("connection closed"), std::string::npos)
      << message.status().message();
}

TEST(MessageChannel, GarbageHeaderIsInvalidData) {
  RawPair pair = MakeRawPair();
  WriteAll(pair.raw.get(), {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1'});
  auto message = pair.channel->Receive();
  ASSERT_FALSE(message.ok());
  EXPECT_EQ(message.status().code(), StatusCode::kInvalidData);
  EXPECT_NE(message.status().message().find("magic"), std::string::npos);
}

TEST(MessageChannel, UnknownTypeIsInvalidData) {
  for (uint32_t type : {0u, uint32_t(ShardMessageType::kSharedKv) + 1, 0xffffffffu}) {
    RawPair pair = MakeRawPair();
    WriteAll(pair.raw.get(), Header(kShardMagic, type, 0));
    auto message = pair.channel->Receive();
    ASSERT_FALSE(message.ok()) << type;
    EXPECT_EQ(message.status().code(), StatusCode::kInvalidData);
    EXPECT_NE(message.status().message().find("type"), std::string::npos);
  }
}

TEST(MessageChannel, OverLimitLengthRefusedBeforeReadingPayload) {
  RawPair pair = MakeRawPair();
  // Only the header is sent: a Receive that allocated and waited for the payload would
  // time out instead of refusing at once.
  WriteAll(pair.raw.get(), Header(kShardMagic, 3, 0xfffffff0u));
  auto start = std::chrono::steady_clock::now();
  auto message = pair.channel->Receive(kMaxShardMessageBytes, 5000);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ASSERT_FALSE(message.ok());
  EXPECT_EQ(message.status().code(), StatusCode::kInvalidData);
  EXPECT_NE(message.status().message().find("limit"), std::string::npos);

  RawPair small = MakeRawPair();
  WriteAll(small.raw.get(), Header(kShardMagic, 3, 1001));
  EXPECT_EQ(small.channel->Receive(1000, 5000).status().code(), StatusCode::kInvalidData);
}

TEST(MessageChannel, ReceiveTimesOut) {
  ChannelPair pair = MakePair();
  auto start = std::chrono::steady_clock::now();
  auto message = pair.b->Receive(kMaxShardMessageBytes, 50);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  ASSERT_FALSE(message.ok());
  EXPECT_EQ(message.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(message.status().message().find("timed out"), std::string::npos);
  // Nothing was consumed: the channel still works.
  ASSERT_TRUE(pair.a->Send(ShardMessageType::kStatsRequest, {}).ok());
  EXPECT_TRUE(pair.b->Receive(kMaxShardMessageBytes, 5000).ok());
}

TEST(MessageChannel, ShutdownWakesBlockedReceive) {
  ChannelPair pair = MakePair();
  Result<ReceivedMessage> message = Status(StatusCode::kInternal, "not run");
  std::thread receiver([&] { message = pair.b->Receive(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  pair.b->Shutdown();
  receiver.join();
  ASSERT_FALSE(message.ok());
  EXPECT_EQ(message.status().code(), StatusCode::kUnavailable) << message.status().message();
  EXPECT_EQ(pair.b->Send(ShardMessageType::kStatsRequest, {}).code(), StatusCode::kUnavailable);
}

TEST(MessageChannel, ExtraPassedFdsAreClosed) {
  RawPair pair = MakeRawPair();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  int before = OpenFdCount();
  std::vector<uint8_t> header = Header(kShardMagic, 8, 0);
  iovec iov{header.data(), header.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  std::memcpy(CMSG_DATA(c), pipe_fds, 2 * sizeof(int));
  ASSERT_EQ(::sendmsg(pair.raw.get(), &msg, 0), static_cast<ssize_t>(header.size()));
  {
    auto message = pair.channel->Receive();
    ASSERT_TRUE(message.ok()) << message.status().message();
    EXPECT_TRUE(message->fd.valid());
    EXPECT_EQ(OpenFdCount(), before + 1);  // the first kept, the second closed
  }
  EXPECT_EQ(OpenFdCount(), before);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(MessageChannel, RandomStreamsNeverCrash) {
  std::mt19937 rng(7);
  int messages = 0;
  for (int iter = 0; iter < 300; ++iter) {
    RawPair pair = MakeRawPair();
    std::vector<uint8_t> bytes;
    for (int frame = 0; frame < 3; ++frame) {  // mostly plausible headers, some noise
      uint32_t magic = rng() % 4 ? kShardMagic : rng();
      std::vector<uint8_t> header = Header(magic, rng() % 11, rng() % 64);
      bytes.insert(bytes.end(), header.begin(), header.end());
      for (uint32_t i = rng() % 80; i > 0; --i) bytes.push_back(static_cast<uint8_t>(rng()));
    }
    bytes.resize(rng() % (bytes.size() + 1));
    WriteAll(pair.raw.get(), bytes);
    pair.raw = UniqueFd();
    for (;;) {
      auto message = pair.channel->Receive(48, 5000);
      if (!message.ok()) {
        EXPECT_NE(message.status().code(), StatusCode::kInternal);
        break;
      }
      EXPECT_LE(message->payload.size(), 48u);
      ++messages;
    }
  }
  EXPECT_GT(messages, 0);
}

}  // namespace
}  // namespace shardlm
