// ShardService: accept loop, handshake and model cache of the shard daemon (see shard_service.h);
// the request loop is ShardSession.
#include "shard/shard_service.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "base/elapsed.h"
#include "base/thread_name.h"
#include "gguf/fingerprint.h"
#include "ipc/shm_region.h"
#include "ipc/socket_dir.h"
#include "model/model.h"
#include "model/model_config.h"
#include "pipeline/local_stage.h"
#include "pipeline/shard_geometry.h"
#include "pipeline/stage_chain.h"
#include "shard/shard_session.h"

namespace shardlm {
namespace {

// A Hello is a few hundred bytes plus the model path (at most kMaxShardString).
constexpr uint32_t kMaxHelloBytes = 64 << 10;
// How long a busy daemon waits for the second client's Hello before refusing it: its reply is read
// only after the Hello is sent, so the refusal must follow the Hello.
constexpr int kBusyHelloTimeoutMs = 2000;
// How long a new connection waits for the current session to end before it is refused as busy:
// covers the teardown of a session whose server just disconnected (freeing its pool).
constexpr int kSessionEndGraceMs = 500;

std::string Mib(size_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// The file's identity on disk: a cached mapping is reused only for the very same file.
struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
};

Result<FileIdentity> StatFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return NotFound("cannot open {}: {}", path, std::strerror(errno));
  }
  return FileIdentity{st.st_dev, st.st_ino, st.st_size,
                      int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// Hello fields a refusal can name before the full decode: magic and version lead the payload, so a
// peer of another protocol version still gets a clear answer.
Status CheckVersion(std::span<const uint8_t> payload) {
  if (payload.size() < 8) return InvalidData("Hello of {} bytes", payload.size());
  uint32_t magic = 0, version = 0;
  std::memcpy(&magic, payload.data(), 4);
  std::memcpy(&version, payload.data() + 4, 4);
  if (magic != kShardMagic) {
    return InvalidData("bad magic 0x{:08x} (expected 0x{:08x})", magic, kShardMagic);
  }
  if (version != kShardProtocolVersion) {
    return InvalidArgument("protocol version {}, daemon speaks {}", version, kShardProtocolVersion);
  }
  return Status::Ok();
}

Status CheckShape(const ShardHello& hello, const ModelConfig& config) {
  if (hello.n_layers != config.n_layers || hello.n_embd != config.n_embd ||
      hello.n_vocab != config.n_vocab) {
    return InvalidArgument(
        "model shape mismatch: {} has {} layers, n_embd {}, "
        "n_vocab {}; the server expects "
        "{} layers, n_embd {}, n_vocab {}",
        hello.model_path, config.n_layers, config.n_embd, config.n_vocab, hello.n_layers,
        hello.n_embd, hello.n_vocab);
  }
  return Status::Ok();
}

}  // namespace

struct ShardService::CachedModel {
  std::string path;
  FileIdentity identity;
  std::shared_ptr<const GgufFile> file;
  Fingerprint128 fingerprint;
  ModelConfig config;
};

// What an accepted Hello produced, before the session serves it.
struct AcceptedHello {
  std::unique_ptr<ShmRegion> region;
  ShardRegionLayout layout;
  std::unique_ptr<Stage> stage;
  // Hello.share_kv: the region the stage's pages live in, sent back after the reply (null
  // when its pages have no bytes).
  const ShmRegion* shared_kv = nullptr;
  ShardHelloReply reply;
  double load_seconds = 0.0;
};

ShardService::ShardService(ShardServiceOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<ShardService>> ShardService::Create(ShardServiceOptions options) {
  if (options.device.kind != DeviceSpec::Kind::kCpu) {
    return InvalidArgument("a shard daemon computes on cpu cores, not on {}",
                           options.device.ToString());
  }
  if (options.threads < 0 || options.threads > kShardMaxThreads) {
    return InvalidArgument("--threads {} is out of range (0..{})", options.threads,
                           kShardMaxThreads);
  }
  std::unique_ptr<ShardService> service(new ShardService(std::move(options)));
  const ShardServiceOptions& o = service->options_;
  if (!o.device.cores.empty()) {
    service->threads_ = static_cast<int>(o.device.cores.size());
  } else {
    service->threads_ =
        o.threads > 0 ? o.threads : std::max(1, int(std::thread::hardware_concurrency()));
  }
  SHARDLM_ASSIGN_OR_RETURN(service->options_.socket_path, ResolveSocketPath(o.socket_path));
  ShardService* logger = service.get();  // owns the listener, so outlives its callback
  SHARDLM_ASSIGN_OR_RETURN(
      service->listener_,
      UnixListener::Listen(o.socket_path, PeerUidPolicy(o.allowed_uids),
                           [logger](const std::string& reason) {
                             logger->Log("refused a connection: " + reason +
                                         " (--allow-uid UID lets servers of another uid in)");
                           }));
  return service;
}

ShardService::~ShardService() {
  Stop();
  std::thread session;
  {
    std::lock_guard<std::mutex> lock(mu_);
    session = std::move(session_thread_);
  }
  if (session.joinable()) session.join();
}

std::string ShardService::DeviceDescription() const {
  return fmt::format("{} ({} thread{})", options_.device.ToString(), threads_,
                     threads_ == 1 ? "" : "s");
}

void ShardService::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "shard: %s\n", line.c_str());
  }
}

void ShardService::Stop() {
  stopping_.store(true);
  if (listener_) listener_->Shutdown();
  std::lock_guard<std::mutex> lock(mu_);
  if (active_channel_) active_channel_->Shutdown();
}

Status ShardService::Run() {
  Status result;
  while (!stopping_.load()) {
    Result<std::unique_ptr<MessageChannel>> channel = listener_->Accept();
    if (!channel.ok()) {
      if (!stopping_.load()) result = channel.status();
      break;
    }
    std::thread finished;
    uint64_t session_id = 0;
    {
      // A server that reconnects right after its previous connection closed may arrive before that
      // session's thread has noticed: give it a moment to end.
      std::unique_lock<std::mutex> lock(mu_);
      session_ended_.wait_for(lock, std::chrono::milliseconds(kSessionEndGraceMs),
                              [this] { return !session_active_; });
      if (!session_active_) {
        finished = std::move(session_thread_);
        session_active_ = true;
        session_id = ++sessions_;
      }
    }
    if (session_id == 0) {
      RefuseBusy(*channel.value());
      continue;
    }
    if (finished.joinable()) finished.join();
    std::lock_guard<std::mutex> lock(mu_);
    session_thread_ =
        std::thread(&ShardService::ServeSession, this, std::move(channel).value(), session_id);
  }
  std::thread session;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_channel_) active_channel_->Shutdown();
    session = std::move(session_thread_);
  }
  if (session.joinable()) session.join();
  return result;
}

void ShardService::RefuseBusy(MessageChannel& channel) {
  // Read the Hello first: a reply to a client that has not finished sending could be lost in a
  // connection reset.
  Result<ReceivedMessage> hello = channel.Receive(kMaxHelloBytes, kBusyHelloTimeoutMs);
  ShardHelloReply reply;
  reply.error = "busy: serving another server";
  std::vector<uint8_t> payload;
  EncodeHelloReply(reply, payload);
  (void)channel.Send(ShardMessageType::kHelloReply, payload);
  Log("refused a connection: " + reply.error +
      (hello.ok() ? "" : " (and it sent no Hello: " + hello.status().message() + ")"));
}

// The handshake: everything the daemon verifies itself before it serves a stage.
class ShardService::HelloCheck {
 public:
  HelloCheck(ShardService& service, const ShardHello& hello) : service_(service), hello_(hello) {}

  // kv_fds: the SharedKv messages' regions, one per Hello.shared_kv entry of more than 0 bytes.
  Result<AcceptedHello> Accept(UniqueFd region_fd, std::vector<UniqueFd> kv_fds) {
    const auto start = std::chrono::steady_clock::now();
    SHARDLM_TRY(ValidateShardGeometry(hello_));
    SHARDLM_ASSIGN_OR_RETURN(std::shared_ptr<CachedModel> model, OpenModel());
    const Fingerprint128 expected{hello_.fingerprint_hi, hello_.fingerprint_lo};
    if (!(model->fingerprint == expected)) {
      return InvalidArgument("model fingerprint mismatch: {} has {}, the server expects {}",
                             hello_.model_path, model->fingerprint.ToHex(), expected.ToHex());
    }
    SHARDLM_TRY(CheckShape(hello_, model->config));
    const auto kv_type = static_cast<KvType>(hello_.kv_type);
    SHARDLM_TRY(CheckModelKvRows(model->config, kv_type));
    const size_t page_bytes = ShardPageBytes(model->config, hello_);
    AcceptedHello accepted;
    SHARDLM_ASSIGN_OR_RETURN(
        accepted.layout, ShardLayout(hello_, page_bytes, ShardStateBytes(model->config, hello_)));
    if (hello_.shm_bytes != accepted.layout.total_bytes) {
      return InvalidArgument("shared region of {} bytes, the geometry needs {}", hello_.shm_bytes,
                             accepted.layout.total_bytes);
    }
    if (!region_fd.valid()) return InvalidArgument("Hello without a shared-memory region");
    SHARDLM_ASSIGN_OR_RETURN(accepted.region,
                             ShmRegion::Map(region_fd.release(), accepted.layout.total_bytes));
    SHARDLM_ASSIGN_OR_RETURN(accepted.stage, MakeStage(model, kv_type, std::move(kv_fds)));
    if (accepted.stage->page_bytes() != page_bytes) {
      return Status(StatusCode::kInternal,
                    fmt::format("page bytes {} differ from the protocol's {}",
                                accepted.stage->page_bytes(), page_bytes));
    }
    if (hello_.share_kv) accepted.shared_kv = accepted.stage->shared_kv();
    const StageInfo& info = accepted.stage->info();
    accepted.reply.accepted = true;
    accepted.reply.device = fmt::format("{} ({} thread{})", service_.options_.device.ToString(),
                                        info.threads, info.threads == 1 ? "" : "s");
    accepted.reply.threads = info.threads;
    accepted.reply.weight_bytes = info.weight_bytes;
    accepted.reply.kv_bytes = info.kv_bytes;
    accepted.reply.rss_bytes = ProcessRssBytes();
    accepted.load_seconds = SecondsSince(start);
    return accepted;
  }

 private:
  // The cached model when the Hello names the same unchanged file, else a fresh open.
  Result<std::shared_ptr<CachedModel>> OpenModel() {
    SHARDLM_ASSIGN_OR_RETURN(FileIdentity identity, StatFile(hello_.model_path));
    {
      std::lock_guard<std::mutex> lock(service_.mu_);
      std::shared_ptr<CachedModel>& cache = service_.cache_;
      if (cache && cache->path == hello_.model_path && cache->identity == identity) return cache;
      cache.reset();  // unmap the previous model before mapping another
    }
    auto model = std::make_shared<CachedModel>();
    model->path = hello_.model_path;
    model->identity = identity;
    SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(hello_.model_path));
    model->file = std::move(file);
    model->fingerprint = ModelFingerprint(*model->file);
    SHARDLM_ASSIGN_OR_RETURN(model->config, ReadModelConfig(*model->file));
    std::lock_guard<std::mutex> lock(service_.mu_);
    service_.cache_ = model;
    return model;
  }

  int StageThreads() const {
    if (!service_.options_.device.cores.empty()) return service_.threads_;
    if (hello_.threads > 0) return std::min(hello_.threads, service_.threads_);
    return service_.threads_;
  }

  // One LocalStage, or one per shared_kv region chained (stage_chain.h). Every region is checked
  // and mapped before any stage loads.
  Result<std::unique_ptr<Stage>> MakeStage(const std::shared_ptr<CachedModel>& model,
                                           KvType kv_type, std::vector<UniqueFd> kv_fds) {
    const std::vector<LayerRange> ranges = ShardKvRanges(hello_);
    std::vector<std::shared_ptr<ShmRegion>> regions(ranges.size());
    size_t next_fd = 0;
    for (size_t i = 0; i < hello_.shared_kv.size(); ++i) {
      const uint64_t bytes = hello_.shared_kv[i].bytes;
      if (bytes == 0) continue;
      const size_t needed = ShardSharedKvBytes(model->config, hello_, ranges[i]);
      if (bytes < needed) {
        return InvalidArgument("shared KV region of {} bytes for layers [{}, {}): {} pages need {}",
                               bytes, ranges[i].begin, ranges[i].end,
                               hello_.n_frames > 0 ? hello_.n_frames : hello_.n_pages, needed);
      }
      if (next_fd == kv_fds.size() || !kv_fds[next_fd].valid()) {
        return InvalidArgument("SharedKv without a shared-memory region");
      }
      SHARDLM_ASSIGN_OR_RETURN(regions[i], ShmRegion::Map(kv_fds[next_fd++].release(), bytes));
    }
    std::vector<std::unique_ptr<Stage>> stages;
    for (size_t i = 0; i < ranges.size(); ++i) {
      SHARDLM_ASSIGN_OR_RETURN(
          std::unique_ptr<LocalStage> stage,
          LocalStage::Load(model->file, ranges[i], StageOptions(kv_type, regions[i])));
      stages.push_back(std::move(stage));
    }
    if (stages.size() == 1) return std::move(stages.front());
    SHARDLM_ASSIGN_OR_RETURN(
        std::unique_ptr<StageChain> chain,
        StageChain::Create(std::move(stages), hello_.max_batch_tokens, hello_.n_embd));
    return std::unique_ptr<Stage>(std::move(chain));
  }

  LocalStageOptions StageOptions(KvType kv_type, std::shared_ptr<ShmRegion> kv_region) const {
    LocalStageOptions options;
    options.device = service_.options_.device;
    options.threads = StageThreads();
    options.kv.n_pages = hello_.n_pages;
    options.kv.page_tokens = hello_.page_tokens;
    options.kv.kv_type = kv_type;
    options.kv.window_kv = static_cast<WindowKv>(hello_.window_kv);
    options.kv.max_batch_tokens = hello_.max_batch_tokens;
    options.kv.n_frames = hello_.n_frames;
    options.kv.tier.kind = static_cast<KvTierSpec::Kind>(hello_.tier_kind);
    options.kv.tier.dir = hello_.tier_dir;
    options.kv.key_summaries = hello_.key_summaries;
    options.kv_region = std::move(kv_region);
    options.share_kv = hello_.share_kv;
    return options;
  }

  ShardService& service_;
  const ShardHello& hello_;
};

void ShardService::ServeSession(std::unique_ptr<MessageChannel> channel, uint64_t session_id) {
  SetThreadName("shard-session");
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_channel_ = channel.get();
    if (stopping_.load()) channel->Shutdown();
  }
  const std::string tag = fmt::format("session {}", session_id);
  const Status end = RunSession(*channel, tag);
  if (!end.ok()) {
    const char* kind = end.code() == StatusCode::kInvalidData ? "protocol violation: " : "";
    Log(tag + ": closed: " + kind + end.message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  active_channel_ = nullptr;
  channel.reset();
  session_active_ = false;
  session_ended_.notify_all();
}

Status ShardService::RunSession(MessageChannel& channel, const std::string& tag) {
  SHARDLM_ASSIGN_OR_RETURN(ReceivedMessage message,
                           channel.Receive(kMaxHelloBytes, options_.hello_timeout_ms));
  if (message.type != ShardMessageType::kHello) {
    return InvalidData("expected Hello, got {}", ShardMessageTypeName(message.type));
  }
  // A Hello of another version may not decode: its version is answered first.
  Status version = CheckVersion(message.payload);
  if (version.code() == StatusCode::kInvalidData) return version;
  Result<ShardHello> hello =
      version.ok() ? DecodeHello(message.payload) : Result<ShardHello>(version);
  if (!hello.ok() && hello.status().code() == StatusCode::kInvalidData) return hello.status();
  // The server's page regions follow the Hello, one message each.
  std::vector<UniqueFd> kv_fds;
  for (size_t i = 0; hello.ok() && i < hello->shared_kv.size(); ++i) {
    if (hello->shared_kv[i].bytes == 0) continue;
    SHARDLM_ASSIGN_OR_RETURN(ReceivedMessage shared,
                             channel.Receive(kMaxHelloBytes, options_.hello_timeout_ms));
    if (shared.type != ShardMessageType::kSharedKv) {
      return InvalidData("expected SharedKv after the Hello, got {}",
                         ShardMessageTypeName(shared.type));
    }
    kv_fds.push_back(std::move(shared.fd));
  }
  Result<AcceptedHello> accepted =
      hello.ok() ? HelloCheck(*this, *hello).Accept(std::move(message.fd), std::move(kv_fds))
                 : hello.status();
  std::vector<uint8_t> payload;
  if (!accepted.ok()) {
    ShardHelloReply reply;
    reply.error = accepted.status().message();
    EncodeHelloReply(reply, payload);
    Log(tag + ": refused: " + reply.error);
    (void)channel.Send(ShardMessageType::kHelloReply, payload);
    return Status::Ok();
  }
  EncodeHelloReply(accepted->reply, payload);
  SHARDLM_TRY(channel.Send(ShardMessageType::kHelloReply, payload));
  // A stage of only recurrent or ring layers has no pages to share: nothing follows.
  if (accepted->shared_kv != nullptr) {
    SHARDLM_TRY(channel.Send(ShardMessageType::kSharedKv, {}, accepted->shared_kv->fd()));
  }
  Log(fmt::format(
      "{}: serving layers [{}, {}) of {} on {}: weights {}, KV {}{}, "
      "ready in {:.2f} s",
      tag, hello->layer_begin, hello->layer_end, hello->model_path, accepted->reply.device,
      Mib(accepted->reply.weight_bytes), Mib(accepted->reply.kv_bytes),
      !hello->shared_kv.empty()        ? " (the server's, shared)"
      : accepted->shared_kv != nullptr ? " (shared with the server)"
                                       : "",
      accepted->load_seconds));
  ShardSession session(channel, *hello, std::move(accepted->region), accepted->layout,
                       std::move(accepted->stage), options_.run_delay_for_test);
  const Status served = session.Serve();
  const ShardSessionStats& stats = session.stats();
  const std::string totals = fmt::format("{} batches, {} tokens, {:.2f} s busy", stats.batches,
                                         stats.tokens, stats.busy_seconds);
  if (served.code() == StatusCode::kUnavailable) {
    Log(fmt::format("{}: ended ({}) after {}", tag, served.message(), totals));
    return Status::Ok();
  }
  return Status(served.code(), served.message() + " (after " + totals + ")");
}

}  // namespace shardlm
