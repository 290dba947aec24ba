// RemoteStage: the client side of a shard session (see remote_stage.h).
#include "pipeline/remote_stage.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "base/elapsed.h"
#include "ipc/socket_dir.h"
#include "model/model.h"
#include "pipeline/shard_geometry.h"

namespace shardlm {
namespace {

// A HelloReply or a PagesReply is small: a few numbers and an error text.
constexpr uint32_t kMaxSmallReplyBytes = 64 << 10;

Status CheckOptions(const RemoteStageOptions& o) {
  if (o.socket_path.empty()) return InvalidArgument("remote stage {}: empty socket path", o.index);
  if (o.model_path.empty()) return InvalidArgument("remote stage {}: empty model path", o.index);
  if (o.kv.max_batch_tokens <= 0) {
    return InvalidArgument("remote stage {}: max_batch_tokens {} must be positive", o.index,
                           o.kv.max_batch_tokens);
  }
  if (!o.shared_kv_layers.empty() && !o.shared_kv_regions) {
    return InvalidArgument("remote stage {}: shared KV layers without their regions", o.index);
  }
  return Status::Ok();
}

ShardHello MakeHello(const RemoteStageOptions& o) {
  ShardHello hello;
  hello.model_path = o.model_path;
  hello.fingerprint_hi = o.fingerprint.hi;
  hello.fingerprint_lo = o.fingerprint.lo;
  hello.layer_begin = o.layers.begin;
  hello.layer_end = o.layers.end;
  hello.n_layers = o.config.n_layers;
  hello.n_embd = o.config.n_embd;
  hello.n_vocab = o.config.n_vocab;
  hello.n_pages = o.kv.n_pages;
  hello.page_tokens = o.kv.page_tokens;
  hello.kv_type = static_cast<uint32_t>(o.kv.kv_type);
  hello.window_kv = static_cast<uint32_t>(o.kv.window_kv);
  hello.threads = o.threads;
  hello.heartbeat_ms = o.heartbeat_timeout_ms > 0 ? uint32_t(o.heartbeat_timeout_ms / 4) : 0;
  hello.max_batch_tokens = o.kv.max_batch_tokens;
  hello.max_logit_rows = o.max_logit_rows > 0 ? o.max_logit_rows : o.kv.max_batch_tokens;
  hello.max_embedding_rows = o.max_embedding_rows;
  hello.n_frames = o.kv.n_frames;
  hello.tier_kind = static_cast<uint32_t>(o.kv.tier.kind);
  hello.tier_dir = o.kv.tier.dir;
  hello.key_summaries = o.kv.key_summaries;
  // (Each region's bytes are set by Create once the geometry is checked.)
  for (const LayerRange& layers : o.shared_kv_layers) hello.shared_kv.push_back({layers.end, 0});
  hello.share_kv = o.share_kv;
  return hello;
}

// A daemon hangs up without a word on a server of a uid it does not serve: say so, since the
// reason is only in the daemon's log.
Status HangUpBeforeReply(const Status& cause) {
  if (cause.code() != StatusCode::kUnavailable ||
      cause.message().rfind("connection closed", 0) != 0) {
    return cause;
  }
  return Status(cause.code(),
                fmt::format("the daemon hung up before answering the Hello ({}); a daemon hangs "
                            "up on servers whose uid is neither its own nor one of its "
                            "--allow-uid, and this server runs as uid {}: see the daemon's log",
                            cause.message(), ::geteuid()));
}

}  // namespace

RemoteStage::RemoteStage(const RemoteStageOptions& options, const ShardHello& hello,
                         size_t page_bytes, size_t state_bytes, const ShardRegionLayout& layout)
    : options_(options),
      hello_(hello),
      page_bytes_(page_bytes),
      state_bytes_(state_bytes),
      layout_(layout) {
  info_.index = options.index;
  info_.layers = options.layers;
  info_.first = options.layers.begin == 0;
  info_.last = options.layers.end == options.config.n_layers;
  info_.device = "unix:" + options.socket_path;
  info_.remote = true;
  info_.ring_bytes_per_sequence = StageWindowRingBytes(options.config, options.layers, options.kv);
}

RemoteStage::~RemoteStage() = default;

Result<std::unique_ptr<RemoteStage>> RemoteStage::Create(const RemoteStageOptions& given) {
  SHARDLM_TRY(CheckOptions(given));
  RemoteStageOptions options = given;
  Result<std::string> socket_path = ResolveSocketPath(given.socket_path);
  if (!socket_path.ok()) {
    return socket_path.status().WithContext(
        fmt::format("stage {} (unix:{})", given.index, given.socket_path));
  }
  options.socket_path = std::move(socket_path).value();
  ShardHello hello = MakeHello(options);
  // The daemon opens the file itself, from its own working directory.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(options.model_path, ec);
  if (!ec) hello.model_path = absolute.lexically_normal().string();
  const std::string name = fmt::format("stage {} (unix:{})", options.index, options.socket_path);
  SHARDLM_TRY(ValidateShardGeometry(hello).WithContext(name));
  SHARDLM_TRY(CheckModelKvRows(options.config, options.kv.kv_type).WithContext(name));
  const std::vector<LayerRange> kv_ranges = ShardKvRanges(hello);
  for (size_t i = 0; i < hello.shared_kv.size(); ++i) {
    hello.shared_kv[i].bytes = ShardSharedKvBytes(options.config, hello, kv_ranges[i]);
  }
  const size_t page_bytes = ShardPageBytes(options.config, hello);
  const size_t state_bytes = ShardStateBytes(options.config, hello);
  Result<ShardRegionLayout> layout = ShardLayout(hello, page_bytes, state_bytes);
  if (!layout.ok()) return layout.status().WithContext(name);
  hello.shm_bytes = layout->total_bytes;
  std::unique_ptr<RemoteStage> stage(
      new RemoteStage(options, hello, page_bytes, state_bytes, *layout));
  Result<std::unique_ptr<ShmRegion>> region =
      ShmRegion::Create(fmt::format("shardlm-stage{}", options.index), layout->total_bytes);
  if (!region.ok()) return region.status().WithContext(name);
  std::lock_guard<std::mutex> lock(stage->io_mu_);
  stage->region_ = std::move(region).value();
  SHARDLM_TRY(stage->Handshake());
  return stage;
}

std::string RemoteStage::Name() const {
  return fmt::format("stage {} (unix:{})", options_.index, options_.socket_path);
}

Status RemoteStage::Handshake() {
  channel_.reset();
  Result<std::unique_ptr<MessageChannel>> channel =
      MessageChannel::Connect(options_.socket_path, PeerUidPolicy(options_.allowed_peer_uids));
  if (!channel.ok() && channel.status().code() == StatusCode::kInvalidArgument) {
    // A listener of an untrusted uid (Create checked the path's length): the region was not
    // sent; a configuration to fix, not an outage.
    const std::string reason =
        channel.status().message() + " (--allow-shard-uid UID trusts a daemon of another uid)";
    std::lock_guard<std::mutex> lock(state_mu_);
    down_reason_ = reason;
    return InvalidArgument("{}: {}", Name(), reason);
  }
  if (!channel.ok()) return MarkDown(channel.status());
  const Result<PeerCredentials> peer = ReadPeerCredentials((*channel)->fd());
  daemon_pid_.store(peer.ok() ? peer->pid : 0);
  scratch_.clear();
  EncodeHello(hello_, scratch_);
  std::vector<const ShmRegion*> shared;
  if (!hello_.shared_kv.empty()) {
    shared = options_.shared_kv_regions();
    SHARDLM_TRY(CheckSharedKv(shared));
  }
  Status sent = (*channel)->Send(ShardMessageType::kHello, scratch_, region_->fd());
  for (size_t i = 0; sent.ok() && i < shared.size(); ++i) {
    if (hello_.shared_kv[i].bytes == 0) continue;
    sent = (*channel)->Send(ShardMessageType::kSharedKv, {}, shared[i]->fd());
  }
  if (!sent.ok()) return MarkDown(HangUpBeforeReply(sent));
  Result<ReceivedMessage> message =
      (*channel)->Receive(kMaxSmallReplyBytes, options_.hello_timeout_ms);
  if (!message.ok()) return MarkDown(HangUpBeforeReply(message.status()));
  if (message->type != ShardMessageType::kHelloReply) {
    return MarkDown(
        InvalidData("expected HelloReply, got {}", ShardMessageTypeName(message->type)));
  }
  Result<ShardHelloReply> reply = DecodeHelloReply(message->payload);
  if (!reply.ok()) return MarkDown(reply.status());
  if (!reply->accepted) {
    // Busy is temporary (another server holds the daemon); anything else needs a fix.
    const StatusCode code = reply->error.rfind("busy:", 0) == 0 ? StatusCode::kUnavailable
                                                                : StatusCode::kInvalidArgument;
    const Status refused(code, fmt::format("{} refused: {}", Name(), reply->error));
    std::lock_guard<std::mutex> lock(state_mu_);
    down_reason_ = "refused: " + reply->error;
    return refused;
  }
  hello_reply_ = std::move(reply).value();
  if (hello_.share_kv) {
    // The daemon's page region follows an accepted reply (none for pages of no bytes).
    shared_kv_.reset();
    const size_t pool_bytes =
        ShardSharedKvBytes(options_.config, hello_, {hello_.layer_begin, hello_.layer_end});
    if (pool_bytes > 0) {
      Result<ReceivedMessage> shared =
          (*channel)->Receive(kMaxSmallReplyBytes, options_.hello_timeout_ms);
      if (!shared.ok()) return MarkDown(shared.status());
      if (shared->type != ShardMessageType::kSharedKv || !shared->fd.valid()) {
        return MarkDown(InvalidData("expected SharedKv with a region after the HelloReply, got {}",
                                    ShardMessageTypeName(shared->type)));
      }
      Result<std::unique_ptr<ShmRegion>> mapped = ShmRegion::Map(shared->fd.release(), pool_bytes);
      if (!mapped.ok()) return MarkDown(mapped.status().WithContext("the daemon's page region"));
      shared_kv_ = std::move(mapped).value();
    }
  }
  channel_ = std::move(channel).value();
  if (!connected_once_) {  // info() is read without a lock: it is set once, by Create
    info_.threads = hello_reply_.threads;
    info_.weight_bytes = hello_reply_.weight_bytes;
    info_.kv_bytes = hello_reply_.kv_bytes;
    connected_once_ = true;
  }
  std::lock_guard<std::mutex> lock(state_mu_);
  down_reason_.clear();
  return Status::Ok();
}

Status RemoteStage::CheckSharedKv(const std::vector<const ShmRegion*>& regions) const {
  if (regions.size() != hello_.shared_kv.size()) {
    return InvalidArgument("{}: {} shared KV regions for {} layer ranges", Name(), regions.size(),
                           hello_.shared_kv.size());
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    const uint64_t bytes = hello_.shared_kv[i].bytes;
    if (bytes > 0 && (regions[i] == nullptr || regions[i]->size() < bytes)) {
      return InvalidArgument("{}: shared KV region {} holds {} bytes, its pages need {}", Name(), i,
                             regions[i] == nullptr ? 0 : regions[i]->size(), bytes);
    }
  }
  return Status::Ok();
}

void RemoteStage::Disconnect(const Status& why) {
  std::lock_guard<std::mutex> lock(io_mu_);
  if (channel_ != nullptr) (void)MarkDown(why);
}

Status RemoteStage::MarkDown(const Status& cause) {
  channel_.reset();
  std::lock_guard<std::mutex> lock(state_mu_);
  down_reason_ = cause.message();
  return Unavailable("{} is down: {}", Name(), down_reason_);
}

Status RemoteStage::CheckUp() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (down_reason_.empty() && channel_) return Status::Ok();
  return Unavailable("{} is down: {}", Name(),
                     down_reason_.empty() ? std::string("not connected") : down_reason_);
}

Status RemoteStage::Health() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (down_reason_.empty()) return Status::Ok();
  return Unavailable("{} is down: {}", Name(), down_reason_);
}

Status RemoteStage::Probe() {
  std::unique_lock<std::mutex> lock(io_mu_, std::try_to_lock);
  if (!lock.owns_lock() || channel_ == nullptr) return Health();
  // Between requests the daemon sends nothing: a readable hang-up means it is gone.
  pollfd pfd{.fd = channel_->fd(), .events = POLLRDHUP, .revents = 0};
  if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    return MarkDown(Unavailable("the daemon closed the connection"));
  }
  return Health();
}

StageStats RemoteStage::Stats() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  return stats_;
}

Status RemoteStage::Reconnect() {
  std::lock_guard<std::mutex> lock(io_mu_);
  if (CheckUp().ok()) return Status::Ok();
  return Handshake();
}

Result<ReceivedMessage> RemoteStage::RoundTrip(ShardMessageType type,
                                               const std::vector<uint8_t>& payload,
                                               ShardMessageType reply_type, int timeout_ms) {
  SHARDLM_TRY(CheckUp());
  Status sent = channel_->Send(type, payload);
  if (!sent.ok()) return MarkDown(sent);
  // Working messages (the daemon computes on) extend the wait up to timeout_ms; silence for
  // heartbeat_timeout_ms means a hung or stopped daemon.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const int heartbeat_ms = options_.heartbeat_timeout_ms;
  Result<ReceivedMessage> message = Unavailable("no reply");
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const int wait_ms = int(std::max<int64_t>(0, left.count()));
    const bool by_heartbeat = heartbeat_ms > 0 && heartbeat_ms < wait_ms;
    message = channel_->Receive(kMaxShardMessageBytes, by_heartbeat ? heartbeat_ms : wait_ms);
    if (!message.ok() && by_heartbeat && Clock::now() < deadline) {
      return MarkDown(Status(
          message.status().code(),
          fmt::format("no reply and no heartbeat for {} ms while waiting for {} "
                      "(daemon hung or stopped?): {}",
                      heartbeat_ms, ShardMessageTypeName(reply_type), message.status().message())));
    }
    if (!message.ok()) return MarkDown(message.status());
    if (message->type != ShardMessageType::kWorking) break;
    if (!message->payload.empty() || message->fd.valid()) {
      return MarkDown(InvalidData("Working with a payload"));
    }
  }
  if (message->type != reply_type || message->fd.valid()) {
    return MarkDown(InvalidData("expected {}, got {}", ShardMessageTypeName(reply_type),
                                ShardMessageTypeName(message->type)));
  }
  return message;
}

Status RemoteStage::Run(const StageBatch& batch, const float* hidden_in, float* out) {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(io_mu_);
  SHARDLM_TRY(CheckUp());
  const size_t n_tokens = batch.entries.size();
  const BatchOutputRows wanted = CountOutputRows(batch.entries, batch.apply_only);
  if (n_tokens == 0 || n_tokens > size_t(hello_.max_batch_tokens) ||
      (info_.last &&
       (wanted.logits > hello_.max_logit_rows || wanted.embeddings > hello_.max_embedding_rows))) {
    return InvalidArgument(
        "{}: batch of {} tokens, {} wanting logits, {} their embedding (limits {}, {} and {})",
        Name(), n_tokens, wanted.logits, wanted.embeddings, hello_.max_batch_tokens,
        hello_.max_logit_rows, hello_.max_embedding_rows);
  }
  if (!info_.first && hidden_in == nullptr) {
    return InvalidArgument("{}: hidden rows missing", Name());
  }
  if (out == nullptr) return InvalidArgument("{}: output buffer missing", Name());
  const size_t in_bytes =
      info_.first || batch.apply_only ? 0 : n_tokens * size_t(hello_.n_embd) * sizeof(float);
  if (in_bytes > 0) std::memcpy(region_->data() + layout_.input_offset, hidden_in, in_bytes);

  ShardRunBatch request;
  request.batch_id = next_batch_id_++;
  request.entries.assign(batch.entries.begin(), batch.entries.end());
  request.pages_by_slot.reserve(batch.pages_by_slot.size());
  for (PageList pages : batch.pages_by_slot)
    request.pages_by_slot.emplace_back(pages.begin(), pages.end());
  request.copies.assign(batch.copies.begin(), batch.copies.end());
  if (batch.paging != nullptr) request.paging = *batch.paging;
  for (AttendedPages attended : batch.attended_by_slot) {
    request.attended_by_slot.emplace_back(attended.begin(), attended.end());
  }
  request.apply_only = batch.apply_only;
  for (PageList frames : batch.frames_by_slot) {
    request.frames_by_slot.emplace_back(frames.begin(), frames.end());
  }
  scratch_.clear();
  EncodeRunBatch(request, scratch_);
  SHARDLM_ASSIGN_OR_RETURN(ReceivedMessage message,
                           RoundTrip(ShardMessageType::kRunBatch, scratch_,
                                     ShardMessageType::kRunReply, options_.run_timeout_ms));
  Result<ShardRunReply> reply = DecodeRunReply(message.payload);
  if (!reply.ok()) return MarkDown(reply.status());
  if (reply->batch_id != request.batch_id) {
    return MarkDown(
        InvalidData("reply to batch {} while waiting for {}", reply->batch_id, request.batch_id));
  }
  if (reply->status_code != static_cast<uint32_t>(StatusCode::kOk)) {
    return Status(static_cast<StatusCode>(reply->status_code), Name() + ": " + reply->error);
  }
  const size_t rows = info_.last || batch.apply_only ? size_t(wanted.logits) : n_tokens;
  const size_t embedding_rows = info_.last ? size_t(wanted.embeddings) : 0;
  if (reply->n_out_rows < 0 || size_t(reply->n_out_rows) != rows || reply->n_embedding_rows < 0 ||
      size_t(reply->n_embedding_rows) != embedding_rows) {
    return MarkDown(InvalidData("{} output rows and {} embedding rows, expected {} and {}",
                                reply->n_out_rows, reply->n_embedding_rows, rows, embedding_rows));
  }
  if (reply->page_scores.size() != batch.page_scores.size()) {
    return MarkDown(InvalidData("{} page scores, expected {}", reply->page_scores.size(),
                                batch.page_scores.size()));
  }
  if (!reply->lost_pages.empty()) {
    if (batch.loss == nullptr || reply->loss_code == static_cast<uint32_t>(StatusCode::kOk)) {
      return MarkDown(InvalidData("{} lost pages reported for a batch without paging",
                                  reply->lost_pages.size()));
    }
    const Status why(static_cast<StatusCode>(reply->loss_code), Name() + ": " + reply->loss_error);
    for (PageId page : reply->lost_pages) batch.loss->Add(page, why);
  }
  // The daemon's scores start at -infinity too: the maximum over stages is kept.
  for (size_t i = 0; i < batch.page_scores.size(); ++i) {
    batch.page_scores[i] = std::max(batch.page_scores[i], reply->page_scores[i]);
  }
  const size_t row_floats = info_.last ? size_t(hello_.n_vocab) : size_t(hello_.n_embd);
  const size_t out_bytes =
      (rows * row_floats + embedding_rows * size_t(hello_.n_embd)) * sizeof(float);
  std::memcpy(out, region_->data() + layout_.output_offset, out_bytes);
  std::lock_guard<std::mutex> state_lock(state_mu_);
  stats_.batches += 1;
  stats_.tokens += n_tokens;
  stats_.busy_seconds += SecondsSince(start);
  stats_.bytes_in += in_bytes;
  stats_.bytes_out += out_bytes;
  stats_.paging = reply->paging;
  return Status::Ok();
}

Status RemoteStage::ExportPages(std::span<const PageId> pages, uint8_t* dst) {
  return TransferPages(ShardMessageType::kExportPages, pages, dst, nullptr);
}

Status RemoteStage::ImportPages(std::span<const PageId> pages, const uint8_t* src) {
  return TransferPages(ShardMessageType::kImportPages, pages, nullptr, src);
}

Status RemoteStage::TransferPages(ShardMessageType type, std::span<const PageId> pages,
                                  uint8_t* dst, const uint8_t* src) {
  std::lock_guard<std::mutex> lock(io_mu_);
  for (size_t done = 0; done < pages.size();) {
    const size_t n = std::min(pages.size() - done, size_t(kShardPagesPerTransfer));
    const size_t bytes = n * page_bytes_;
    if (src) std::memcpy(region_->data() + layout_.input_offset, src + done * page_bytes_, bytes);
    ShardPages request;
    request.pages.assign(pages.begin() + done, pages.begin() + done + n);
    scratch_.clear();
    EncodePages(request, scratch_);
    SHARDLM_ASSIGN_OR_RETURN(
        ReceivedMessage message,
        RoundTrip(type, scratch_, ShardMessageType::kPagesReply, options_.run_timeout_ms));
    Result<ShardPagesReply> reply = DecodePagesReply(message.payload);
    if (!reply.ok()) return MarkDown(reply.status());
    if (reply->status_code != static_cast<uint32_t>(StatusCode::kOk)) {
      return Status(static_cast<StatusCode>(reply->status_code), Name() + ": " + reply->error);
    }
    if (reply->page_bytes != page_bytes_) {
      return MarkDown(
          InvalidData("pages of {} bytes, expected {}", reply->page_bytes, page_bytes_));
    }
    if (dst) std::memcpy(dst + done * page_bytes_, region_->data() + layout_.output_offset, bytes);
    done += n;
  }
  return Status::Ok();
}

Status RemoteStage::ExportState(int32_t slot, int32_t position, uint8_t* dst) {
  return TransferState(ShardMessageType::kExportState, slot, position, dst, nullptr);
}

Status RemoteStage::ImportState(int32_t slot, int32_t position, const uint8_t* src) {
  return TransferState(ShardMessageType::kImportState, slot, position, nullptr, src);
}

Status RemoteStage::TransferState(ShardMessageType type, int32_t slot, int32_t position,
                                  uint8_t* dst, const uint8_t* src) {
  if (state_bytes_ == 0) return InvalidArgument("{} has no recurrent layers", Name());
  std::lock_guard<std::mutex> lock(io_mu_);
  if (src) std::memcpy(region_->data() + layout_.input_offset, src, state_bytes_);
  scratch_.clear();
  EncodeState(ShardState{slot, position}, scratch_);
  SHARDLM_ASSIGN_OR_RETURN(
      ReceivedMessage message,
      RoundTrip(type, scratch_, ShardMessageType::kStateReply, options_.run_timeout_ms));
  Result<ShardStateReply> reply = DecodeStateReply(message.payload);
  if (!reply.ok()) return MarkDown(reply.status());
  if (reply->status_code != static_cast<uint32_t>(StatusCode::kOk)) {
    return Status(static_cast<StatusCode>(reply->status_code), Name() + ": " + reply->error);
  }
  if (reply->state_bytes != state_bytes_) {
    return MarkDown(
        InvalidData("a state of {} bytes, expected {}", reply->state_bytes, state_bytes_));
  }
  if (dst) std::memcpy(dst, region_->data() + layout_.output_offset, state_bytes_);
  return Status::Ok();
}

Result<ShardStatsReply> RemoteStage::DaemonStats() {
  std::lock_guard<std::mutex> lock(io_mu_);
  SHARDLM_ASSIGN_OR_RETURN(ReceivedMessage message,
                           RoundTrip(ShardMessageType::kStatsRequest, {},
                                     ShardMessageType::kStatsReply, options_.run_timeout_ms));
  Result<ShardStatsReply> reply = DecodeStatsReply(message.payload);
  if (!reply.ok()) return MarkDown(reply.status());
  return reply;
}

}  // namespace shardlm
