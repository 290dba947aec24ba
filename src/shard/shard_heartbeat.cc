// ShardHeartbeat: Working messages while a request runs. See shard_heartbeat.h.
#include "shard/shard_heartbeat.h"

#include "base/thread_name.h"

namespace shardlm {

ShardHeartbeat::ShardHeartbeat(MessageChannel& channel, std::chrono::milliseconds interval)
    : channel_(channel), interval_(interval) {
  if (interval_.count() > 0) thread_ = std::thread([this] { Loop(); });
}

ShardHeartbeat::~ShardHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ShardHeartbeat::Begin() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = true;
    next_beat_ = std::chrono::steady_clock::now() + interval_;
  }
  cv_.notify_all();
}

Status ShardHeartbeat::Reply(ShardMessageType type, std::span<const uint8_t> payload) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
  return channel_.Send(type, payload);
}

uint64_t ShardHeartbeat::sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

void ShardHeartbeat::Loop() {
  SetThreadName("shard-heartbeat");
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!busy_) {
      cv_.wait(lock, [&] { return stop_ || busy_; });
      continue;
    }
    const auto beat = next_beat_;
    if (cv_.wait_until(lock, beat, [&] { return stop_ || !busy_ || next_beat_ != beat; })) {
      continue;  // stopped, answered, or a new request began
    }
    // A failed send means the server is gone: the session thread will see it at its reply.
    if (channel_.Send(ShardMessageType::kWorking, {}).ok()) ++sent_;
    next_beat_ = beat + interval_;
  }
}

}  // namespace shardlm
