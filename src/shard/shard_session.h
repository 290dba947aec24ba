// ShardSession: the request loop of one accepted shard session, inside the daemon
// (shard_service.h): RunBatch, ExportPages, ImportPages and StatsRequest, each answered before the
// next is read, until the server disconnects or breaks the protocol.
//
// Goals: every count, page id and size the server sends is checked against the Hello's geometry,
// the region and the pool before anything is touched; a request the stage refuses is answered with
// its Status and the session goes on; a message that is not the protocol (undecodable, unexpected
// type, bad frame) ends the session with that reason.
// While a request runs longer than the Hello's heartbeat_ms the session sends Working
// (shard_heartbeat.h), clamped to [kMinHeartbeat, kMaxHeartbeat].
// Non-goals: the handshake and model loading (shard_service.cc), the socket.
//
// Thread safety: one thread (the daemon's session thread) calls Serve.
// Lifetime: borrows the channel; owns the region and the stage for the session.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "base/status.h"
#include "ipc/message_channel.h"
#include "ipc/shard_protocol.h"
#include "ipc/shm_region.h"
#include "pipeline/stage.h"
#include "shard/shard_heartbeat.h"

namespace shardlm {

struct ShardSessionStats {
  uint64_t batches = 0;
  uint64_t tokens = 0;
  double busy_seconds = 0.0;
};

// Heartbeat intervals a Hello may ask for (a smaller or larger one is clamped; 0: none).
inline constexpr std::chrono::milliseconds kMinHeartbeat{10};
inline constexpr std::chrono::milliseconds kMaxHeartbeat{60000};

class ShardSession {
 public:
  // run_delay: test hook, every batch waits this long before computing (a slow stage).
  ShardSession(MessageChannel& channel, const ShardHello& hello, std::unique_ptr<ShmRegion> region,
               const ShardRegionLayout& layout, std::unique_ptr<Stage> stage,
               std::chrono::milliseconds run_delay = std::chrono::milliseconds{0});

  // Serves until the session ends; returns why: kUnavailable when the peer closed or was shut down
  // (a normal end), another code when it broke the protocol.
  Status Serve();
  const ShardSessionStats& stats() const { return stats_; }

 private:
  Status HandleRun(std::span<const uint8_t> payload);
  Status HandlePages(ShardMessageType type, std::span<const uint8_t> payload);
  Status HandleState(ShardMessageType type, std::span<const uint8_t> payload);
  Status HandleStats();
  // Ok, or why the batch may not run (sizes beyond the Hello, page ids beyond the pool).
  Status CheckBatch(const ShardRunBatch& batch, BatchOutputRows& rows) const;
  Status CheckPage(PageId page) const;
  Status Reply(ShardMessageType type, const std::vector<uint8_t>& payload);

  MessageChannel& channel_;
  ShardHello hello_;
  std::unique_ptr<ShmRegion> region_;
  ShardRegionLayout layout_;
  std::unique_ptr<Stage> stage_;
  ShardSessionStats stats_;
  std::vector<uint8_t> scratch_;  // encoded reply, reused
  std::chrono::milliseconds run_delay_;
  ShardHeartbeat heartbeat_;
};

}  // namespace shardlm
