// ShardHeartbeat: the daemon side of the shard protocol's Working messages — while a
// request runs longer than the Hello's heartbeat_ms, tell the server every heartbeat_ms
// that the daemon is alive and computing, so a long batch is not taken for a hung daemon
// (shard_protocol.h).
//
// Use: Begin() when a request starts; Reply(...) sends its answer and ends it. Between the
// two, a thread of its own sends Working every interval. The reply and the heartbeats go
// through one mutex, so the channel is only ever used by one thread at a time (the session
// thread never receives while a request runs).
//
// Goals: no Working for requests shorter than the interval; no message after the reply.
// Non-goals: the server's timeout (remote_stage.h), detecting a hung compute thread inside
// the daemon (the heartbeat proves the process runs, not that the batch progresses).
//
// Thread safety: Begin and Reply from the session thread only. Lifetime: borrows the
// channel; the destructor stops and joins the thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>

#include "base/status.h"
#include "ipc/message_channel.h"
#include "ipc/shard_protocol.h"

namespace shardlm {

class ShardHeartbeat {
 public:
  // interval 0: never sends Working (and starts no thread).
  ShardHeartbeat(MessageChannel& channel, std::chrono::milliseconds interval);
  ~ShardHeartbeat();
  ShardHeartbeat(const ShardHeartbeat&) = delete;
  ShardHeartbeat& operator=(const ShardHeartbeat&) = delete;

  void Begin();
  // Sends the request's answer (a failed send is the channel's error) and ends the request.
  Status Reply(ShardMessageType type, std::span<const uint8_t> payload);
  uint64_t sent() const;  // Working messages sent so far

 private:
  void Loop();

  MessageChannel& channel_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false;
  bool stop_ = false;
  std::chrono::steady_clock::time_point next_beat_;
  uint64_t sent_ = 0;
  std::thread thread_;
};

}  // namespace shardlm
