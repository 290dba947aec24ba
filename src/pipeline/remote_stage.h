// RemoteStage: a stage computed by a `shardlm shard` daemon (shard_service.h) on this host,
// reached over its Unix socket; hidden rows and logits travel through a shared-memory
// region (ipc/shm_region.h) that this side creates and hands over in the Hello.
//
// Goals: the same Stage contract as a local stage, bitwise the same outputs; a daemon that
// refuses the handshake is an error that carries its reason ("stage 1 (unix:/s.sock)
// refused: model fingerprint mismatch: ..."); a daemon that dies is a kUnavailable Status
// from Run and from Health until Reconnect succeeds, never a crash or a hang on a dead
// socket; page export/import through the region, for the prefix cache's snapshots.
// Only a daemon of this process's uid (or of allowed_peer_uids) is trusted: the uid of the
// process listening on the socket is checked before the Hello, which carries the region, is
// sent (ipc/peer_credentials.h).
// Non-goals: pipelining several batches in flight (one request at a time, as the protocol
// says), reconnecting by itself (the caller decides when: Reconnect), TCP.
//
// Thread safety: Run, ExportPages, ImportPages, ExportState, ImportState and Reconnect are
// serialized by an internal
// lock (one request on the socket at a time); info, Health and Stats may be called from any
// thread and never wait for a request in flight. Lifetime: owns the connection and the
// region; the daemon frees the session's pages when it is destroyed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/fingerprint.h"
#include "ipc/message_channel.h"
#include "ipc/shard_protocol.h"
#include "ipc/shm_region.h"
#include "model/model_config.h"
#include "pipeline/stage.h"

namespace shardlm {

// What the server tells a daemon about the stage it wants (the Hello's contents).
struct RemoteStageOptions {
  int index = 0;  // position in the pipeline, for messages
  // The daemon's `--listen unix:NAME`: a name without '/' is a socket in the private socket
  // folder (ipc/socket_dir.h), a path with '/' is used as given.
  std::string socket_path;
  std::vector<uid_t> allowed_peer_uids;  // daemon uids trusted besides this process's own
  std::string model_path;                // the daemon opens this file itself
  Fingerprint128 fingerprint;            // ModelFingerprint of the file the server loaded
  ModelConfig config;                    // of the whole model (n_layers, n_embd, n_vocab, KV shape)
  LayerRange layers;
  KvGeometry kv;                 // the same page ids and sizes as every other stage
  int threads = 0;               // 0: the daemon's own --cores / --threads
  int max_logit_rows = 0;        // 0: max_batch_tokens (only the last stage gives logits)
  int max_embedding_rows = 0;    // most rows wanting their embedding per batch (last stage)
  int hello_timeout_ms = 60000;  // the daemon opens and maps the model before replying
  int run_timeout_ms = 600000;   // a reply slower than this marks the stage down
  // Neither a reply nor a Working message for this long marks the stage down (a hung or
  // stopped daemon); the daemon is asked for Working every heartbeat_timeout_ms / 4 while
  // it computes. 0: only run_timeout_ms applies.
  int heartbeat_timeout_ms = 10000;
  // A prefill worker: the daemon's pages lie in the server's own page memory, one region per
  // decode stage, each holding the pages of that stage's layers (shared_kv_layers[i], in order,
  // covering `layers`); it writes the pages the server reads, and its session's end frees
  // nothing. shared_kv_regions gives the regions at every handshake (one per range; null for
  // layers without pages), since a decode stage in a daemon that came back has new ones.
  // Empty: the daemon's pages are its own.
  std::vector<LayerRange> shared_kv_layers = {};
  std::function<std::vector<const ShmRegion*>()> shared_kv_regions = {};
  // A decode stage: the daemon keeps its pages in a region it shares (shared_kv()), for a
  // prefill worker to write. Not with a bounded pool.
  bool share_kv = false;
};

class RemoteStage : public Stage {
 public:
  // Connects, checks the daemon's uid, creates the region, sends the Hello and waits for the
  // reply. Errors: InvalidArgument for a bad option, a socket folder that is not private, or
  // a daemon of an untrusted uid (naming the socket and both uids); kUnavailable when
  // nothing listens at the path ("stage N (unix:PATH) is down: ..."); the daemon's refusal
  // prefixed by "stage N (unix:PATH) refused: ". PATH is the resolved socket path.
  static Result<std::unique_ptr<RemoteStage>> Create(const RemoteStageOptions& options);
  ~RemoteStage() override;

  const StageInfo& info() const override { return info_; }
  Status Run(const StageBatch& batch, const float* hidden_in, float* out) override;
  Status Health() const override;
  Status Reconnect() override;
  // Health, and between requests whether the daemon hung up (a dead daemon is otherwise only
  // noticed by the next request): then the stage is down. A request in flight is not waited
  // for (Health alone then).
  Status Probe();
  StageStats Stats() const override;

  size_t page_bytes() const override { return page_bytes_; }
  // Through the daemon's pool, kShardPagesPerTransfer pages per round trip; serialized with
  // Run (one connection), so an export waits for the batch the daemon is computing.
  Status ExportPages(std::span<const PageId> pages, uint8_t* dst) override;
  Status ImportPages(std::span<const PageId> pages, const uint8_t* src) override;
  size_t state_bytes() const override { return state_bytes_; }
  Status ExportState(int32_t slot, int32_t position, uint8_t* dst) override;
  Status ImportState(int32_t slot, int32_t position, const uint8_t* src) override;
  // The daemon's own statistics (its batches, busy time, resident set).
  Result<ShardStatsReply> DaemonStats();
  // share_kv: the daemon's page region as of the last handshake (null: its pages have no
  // bytes, or the stage never connected). Replaced by Reconnect: read it from the thread that
  // reconnects.
  const ShmRegion* shared_kv() const override { return shared_kv_.get(); }
  // Ends the session as if the daemon had gone (Health is then kUnavailable with `why`) so the
  // next Reconnect makes a new one: a prefill worker whose decode stage came back must map its
  // new pages. Waits for a request in flight.
  void Disconnect(const Status& why);
  // The process of the daemon the last connection reached (0: none yet, or unknown): what a
  // supervisor that started the daemon stops when the stage is lost to a hang.
  pid_t daemon_pid() const { return daemon_pid_.load(); }
  // The daemon's answer to the last accepted Hello (device, threads, bytes, RSS). Not to be
  // read while another thread may call Reconnect.
  const ShardHelloReply& hello_reply() const { return hello_reply_; }

 private:
  RemoteStage(const RemoteStageOptions& options, const ShardHello& hello, size_t page_bytes,
              size_t state_bytes, const ShardRegionLayout& layout);
  std::string Name() const;  // "stage N (unix:PATH)"
  Status Handshake();        // connect + Hello + reply; requires io_mu_
  // Sends one request and waits for its reply of `reply_type`; a transport failure marks
  // the stage down. Requires io_mu_.
  Result<ReceivedMessage> RoundTrip(ShardMessageType type, const std::vector<uint8_t>& payload,
                                    ShardMessageType reply_type, int timeout_ms);
  Status MarkDown(const Status& cause);  // returns the kUnavailable Status
  // InvalidArgument unless `regions` has one region per Hello.shared_kv entry, each at least
  // that entry's bytes (null only for an entry of 0 bytes).
  Status CheckSharedKv(const std::vector<const ShmRegion*>& regions) const;
  Status CheckUp() const;
  Status TransferState(ShardMessageType type, int32_t slot, int32_t position, uint8_t* dst,
                       const uint8_t* src);
  Status TransferPages(ShardMessageType type, std::span<const PageId> pages, uint8_t* dst,
                       const uint8_t* src);

  RemoteStageOptions options_;
  ShardHello hello_;
  size_t page_bytes_ = 0;
  size_t state_bytes_ = 0;  // one slot's recurrent state in the stage's layers
  ShardRegionLayout layout_;
  StageInfo info_;

  std::mutex io_mu_;  // one request at a time; guards the fields below
  std::unique_ptr<MessageChannel> channel_;
  std::unique_ptr<ShmRegion> region_;
  std::unique_ptr<ShmRegion> shared_kv_;  // share_kv: the daemon's pages
  ShardHelloReply hello_reply_;
  bool connected_once_ = false;  // info_'s daemon figures are set
  uint64_t next_batch_id_ = 1;
  std::vector<uint8_t> scratch_;

  std::atomic<pid_t> daemon_pid_{0};
  mutable std::mutex state_mu_;  // guards the fields below
  std::string down_reason_;      // empty: healthy
  StageStats stats_;
};

}  // namespace shardlm
