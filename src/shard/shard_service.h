// ShardService: the daemon behind `shardlm shard` — serves one stage of a model to one server at a
// time over a Unix socket (ipc/message_channel.h) and a shared-memory region (ipc/shm_region.h),
// speaking the shard protocol (ipc/shard_protocol.h).
//
// A session: the server connects and sends Hello (with the region's fd) within hello_timeout_ms;
// the daemon checks the protocol version, opens the model file itself, verifies its fingerprint and
// shape against the Hello, checks the geometry (shard_geometry.h), maps the region, builds a
// LocalStage for the layer range on its cores and replies. Then it answers RunBatch / ExportPages /
// ImportPages / StatsRequest until the server disconnects; the session's KV pages die with it
// (unless they are the server's own, shared: shard_protocol.h SharedKv).
//
// Goals: a hostile or broken client costs one log line and its connection, never the daemon (every
// count, page id and offset it sends is checked; a request the stage refuses — bad slot, bad
// position — is answered with the error and the session goes on; anything that is not the protocol
// closes the session); a refusal says why on both sides; a second server while one is connected is
// refused ("busy: serving another server"); a reconnect after a server restart is fast (the opened
// model file stays mapped between sessions while the next Hello names the same file and
// fingerprint); one stderr line per session start, end and refusal; only servers of this daemon's
// own uid (or of the allowed_uids) get a session: a client of another uid is hung up on before the
// daemon reads or sends a byte, and logged with its uid and pid (ipc/peer_credentials.h).
// Non-goals: several sessions at once, TCP (later: UCX), authentication beyond the peer's uid.
//
// Thread safety: Run is called by one thread; Stop may be called from any thread (and from nowhere
// else that blocks: it only wakes Run).
// Lifetime: the socket file exists from Create until destruction.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "ipc/message_channel.h"
#include "pipeline/placement.h"

namespace shardlm {

struct ShardServiceOptions {
  // `--listen unix:NAME`: a name without '/' is a socket in the private socket folder
  // (ipc/socket_dir.h), a path with '/' is used as given.
  std::string socket_path;
  // Uids besides the daemon's own whose servers it serves (`--allow-uid`).
  std::vector<uid_t> allowed_uids;
  // Where the stage computes: kCpu with `cores` = pinned threads (one per core), or no cores =
  // `threads` unpinned threads (0: every core).
  DeviceSpec device;
  int threads = 0;
  // One line per event, without a newline. Empty: stderr, prefixed "shard: ".
  std::function<void(const std::string&)> log;
  int hello_timeout_ms = 10000;  // for the first message of a session
  // Test hook: every batch waits this long before computing (a slow stage).
  std::chrono::milliseconds run_delay_for_test{0};
};

class ShardService {
 public:
  // Listens on options.socket_path (mode 0600; a bare name in the socket folder, made if
  // missing). Errors name the path (another daemon listening there, a missing folder, a socket
  // folder that is not private) or the bad option.
  static Result<std::unique_ptr<ShardService>> Create(ShardServiceOptions options);
  ~ShardService();  // stops, joins the session, removes the socket file
  ShardService(const ShardService&) = delete;
  ShardService& operator=(const ShardService&) = delete;

  // Serves sessions until Stop. Ok after Stop; an error only when accepting fails for another
  // reason.
  Status Run();
  // Wakes Run and ends the current session. Thread-safe, idempotent.
  void Stop();

  // The socket file's path (a bare name resolved into the socket folder).
  const std::string& socket_path() const { return options_.socket_path; }
  int threads() const { return threads_; }
  // "cpu:0-1 (2 threads)" or "cpu (4 threads)".
  std::string DeviceDescription() const;

 private:
  struct CachedModel;
  class HelloCheck;
  explicit ShardService(ShardServiceOptions options);

  void Log(const std::string& line) const;
  void ServeSession(std::unique_ptr<MessageChannel> channel, uint64_t session_id);
  // Handshake then requests; Ok for a normal end (logged), else why the session was closed.
  Status RunSession(MessageChannel& channel, const std::string& tag);
  void RefuseBusy(MessageChannel& channel);

  ShardServiceOptions options_;
  int threads_ = 1;
  std::unique_ptr<UnixListener> listener_;
  std::atomic<bool> stopping_{false};

  std::mutex mu_;  // guards the fields below
  std::thread session_thread_;
  bool session_active_ = false;
  std::condition_variable session_ended_;     // session_active_ became false
  MessageChannel* active_channel_ = nullptr;  // to wake its Receive on Stop
  std::shared_ptr<CachedModel> cache_;        // the last session's model file
  uint64_t sessions_ = 0;
};

}  // namespace shardlm
