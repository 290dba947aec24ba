// ShardSession: request loop of one shard session (see shard_session.h).
#include "shard/shard_session.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

#include "base/elapsed.h"
#include "pipeline/shard_geometry.h"

namespace shardlm {
namespace {

std::chrono::milliseconds HeartbeatInterval(uint32_t heartbeat_ms) {
  if (heartbeat_ms == 0) return std::chrono::milliseconds{0};
  return std::clamp(std::chrono::milliseconds{heartbeat_ms}, kMinHeartbeat, kMaxHeartbeat);
}

ShardRunReply ErrorReply(uint64_t batch_id, const Status& status) {
  ShardRunReply reply;
  reply.batch_id = batch_id;
  reply.status_code = static_cast<uint32_t>(status.code());
  reply.error = status.message();
  return reply;
}

}  // namespace

ShardSession::ShardSession(MessageChannel& channel, const ShardHello& hello,
                           std::unique_ptr<ShmRegion> region, const ShardRegionLayout& layout,
                           std::unique_ptr<Stage> stage, std::chrono::milliseconds run_delay)
    : channel_(channel),
      hello_(hello),
      region_(std::move(region)),
      layout_(layout),
      stage_(std::move(stage)),
      run_delay_(run_delay),
      heartbeat_(channel, HeartbeatInterval(hello.heartbeat_ms)) {}

Status ShardSession::Serve() {
  while (true) {
    Result<ReceivedMessage> message = channel_.Receive();
    if (!message.ok()) return message.status();
    if (message->fd.valid()) {
      return InvalidData("{} carries a file descriptor", ShardMessageTypeName(message->type));
    }
    const std::span<const uint8_t> payload = message->payload;
    heartbeat_.Begin();
    switch (message->type) {
      case ShardMessageType::kRunBatch:
        SHARDLM_TRY(HandleRun(payload));
        break;
      case ShardMessageType::kExportPages:
      case ShardMessageType::kImportPages:
        SHARDLM_TRY(HandlePages(message->type, payload));
        break;
      case ShardMessageType::kExportState:
      case ShardMessageType::kImportState:
        SHARDLM_TRY(HandleState(message->type, payload));
        break;
      case ShardMessageType::kStatsRequest:
        if (!payload.empty()) return InvalidData("StatsRequest with a payload");
        SHARDLM_TRY(HandleStats());
        break;
      default:
        return InvalidData("unexpected {} during a session", ShardMessageTypeName(message->type));
    }
  }
}

Status ShardSession::Reply(ShardMessageType type, const std::vector<uint8_t>& payload) {
  return heartbeat_.Reply(type, payload);
}

Status ShardSession::CheckPage(PageId page) const {
  if (page < 0 || page >= hello_.n_pages) {
    return InvalidArgument("page id {} is outside the pool's {} pages", page, hello_.n_pages);
  }
  return Status::Ok();
}

Status ShardSession::CheckBatch(const ShardRunBatch& batch, BatchOutputRows& rows) const {
  if (batch.entries.empty() || batch.entries.size() > size_t(hello_.max_batch_tokens)) {
    return InvalidArgument("batch of {} tokens (1..{} per batch, the session's max_batch_tokens)",
                           batch.entries.size(), hello_.max_batch_tokens);
  }
  rows = CountOutputRows(batch.entries, batch.apply_only);
  if (stage_->info().last && rows.logits > hello_.max_logit_rows) {
    return InvalidArgument(
        "{} rows want logits (at most {} per batch, the session's "
        "max_logit_rows)",
        rows.logits, hello_.max_logit_rows);
  }
  if (stage_->info().last && rows.embeddings > hello_.max_embedding_rows) {
    return InvalidArgument(
        "{} rows want their embedding (at most {} per batch, the session's "
        "max_embedding_rows)",
        rows.embeddings, hello_.max_embedding_rows);
  }
  for (const std::vector<PageId>& pages : batch.pages_by_slot) {
    for (PageId page : pages) SHARDLM_TRY(CheckPage(page));
  }
  for (const BatchEntry& e : batch.entries) {
    if (e.score_pages && (e.slot < 0 || size_t(e.slot) >= batch.pages_by_slot.size())) {
      return InvalidArgument("a scoring entry names slot {} without pages", e.slot);
    }
  }
  if (hello_.n_frames == 0 && (!batch.paging.empty() || !batch.attended_by_slot.empty() ||
                               batch.apply_only || !batch.frames_by_slot.empty())) {
    return InvalidArgument("paging ops for a session without a bounded KV pool");
  }
  // A prefill worker's frame lists (its stage checks them against its own pages' frames).
  for (const std::vector<PageId>& frames : batch.frames_by_slot) {
    for (PageId frame : frames) {
      if (frame != kNoPage && (frame < 0 || frame >= hello_.n_frames)) {
        return InvalidArgument("frame {} outside the pool's {} frames", frame, hello_.n_frames);
      }
    }
  }
  // Each copy gives a writer a private page: never more copies than pages.
  if (batch.copies.size() > size_t(hello_.n_pages)) {
    return InvalidArgument("{} page copies in one batch (the pool has {} pages)",
                           batch.copies.size(), hello_.n_pages);
  }
  for (const PageCopy& copy : batch.copies) {
    SHARDLM_TRY(CheckPage(copy.src));
    SHARDLM_TRY(CheckPage(copy.dst));
  }
  return Status::Ok();
}

Status ShardSession::HandleRun(std::span<const uint8_t> payload) {
  SHARDLM_ASSIGN_OR_RETURN(ShardRunBatch batch, DecodeRunBatch(payload));
  const auto start = std::chrono::steady_clock::now();
  ShardRunReply reply;
  reply.batch_id = batch.batch_id;
  BatchOutputRows rows;
  Status status = CheckBatch(batch, rows);
  if (status.ok()) {
    std::vector<PageList> pages_by_slot(batch.pages_by_slot.begin(), batch.pages_by_slot.end());
    std::vector<AttendedPages> attended_by_slot(batch.attended_by_slot.begin(),
                                                batch.attended_by_slot.end());
    std::vector<PageList> frames_by_slot(batch.frames_by_slot.begin(), batch.frames_by_slot.end());
    // Scores start at -infinity; the server keeps the maximum over stages.
    size_t n_scores = 0;
    for (const BatchEntry& e : batch.entries) {
      if (e.score_pages) n_scores += batch.pages_by_slot[size_t(e.slot)].size();
    }
    reply.page_scores.assign(n_scores, -std::numeric_limits<float>::infinity());
    StageBatch stage_batch{batch.entries, pages_by_slot, batch.copies};
    stage_batch.paging = &batch.paging;
    stage_batch.attended_by_slot = attended_by_slot;
    stage_batch.page_scores = reply.page_scores;
    stage_batch.apply_only = batch.apply_only;
    stage_batch.frames_by_slot = frames_by_slot;
    PagingLoss loss;
    stage_batch.loss = &loss;
    const StageInfo& info = stage_->info();
    const float* hidden_in =
        info.first ? nullptr
                   : reinterpret_cast<const float*>(region_->data() + layout_.input_offset);
    float* out = reinterpret_cast<float*>(region_->data() + layout_.output_offset);
    if (run_delay_.count() > 0) std::this_thread::sleep_for(run_delay_);
    status = stage_->Run(stage_batch, hidden_in, out);
    reply.n_out_rows =
        info.last || batch.apply_only ? rows.logits : static_cast<int32_t>(batch.entries.size());
    reply.n_embedding_rows = info.last ? rows.embeddings : 0;
    reply.lost_pages = loss.pages;
    reply.loss_code = static_cast<uint32_t>(loss.error.code());
    reply.loss_error = loss.error.message();
  }
  if (!status.ok()) {
    reply = ErrorReply(batch.batch_id, status);
  } else {
    reply.compute_seconds = SecondsSince(start);
    reply.paging = stage_->Stats().paging;
    stats_.batches += 1;
    stats_.tokens += batch.entries.size();
    stats_.busy_seconds += reply.compute_seconds;
  }
  scratch_.clear();
  EncodeRunReply(reply, scratch_);
  return Reply(ShardMessageType::kRunReply, scratch_);
}

Status ShardSession::HandlePages(ShardMessageType type, std::span<const uint8_t> payload) {
  SHARDLM_ASSIGN_OR_RETURN(ShardPages request, DecodePages(payload));
  const size_t page_bytes = stage_->page_bytes();
  Status status;
  if (request.pages.size() > size_t(kShardPagesPerTransfer)) {
    status = InvalidArgument("{} pages in one transfer (at most {})", request.pages.size(),
                             kShardPagesPerTransfer);
  }
  for (PageId page : request.pages) {
    if (status.ok()) status = CheckPage(page);
  }
  if (status.ok()) {
    const bool is_export = type == ShardMessageType::kExportPages;
    const size_t area = is_export ? layout_.output_offset : layout_.input_offset;
    const size_t area_bytes = is_export ? layout_.output_bytes : layout_.input_bytes;
    Result<std::span<uint8_t>> span = region_->Span(area, area_bytes);
    status = span.status();
    if (status.ok() && request.pages.size() * page_bytes > span->size()) {
      status = OutOfRange("{} pages of {} bytes do not fit the region's {} bytes",
                          request.pages.size(), page_bytes, span->size());
    }
    if (status.ok()) {
      status = is_export ? stage_->ExportPages(request.pages, span->data())
                         : stage_->ImportPages(request.pages, span->data());
    }
  }
  ShardPagesReply reply;
  reply.status_code = static_cast<uint32_t>(status.code());
  reply.error = status.message();
  reply.page_bytes = page_bytes;
  scratch_.clear();
  EncodePagesReply(reply, scratch_);
  return Reply(ShardMessageType::kPagesReply, scratch_);
}

Status ShardSession::HandleState(ShardMessageType type, std::span<const uint8_t> payload) {
  SHARDLM_ASSIGN_OR_RETURN(ShardState request, DecodeState(payload));
  const size_t state_bytes = stage_->state_bytes();
  const bool is_export = type == ShardMessageType::kExportState;
  const size_t area = is_export ? layout_.output_offset : layout_.input_offset;
  const size_t area_bytes = is_export ? layout_.output_bytes : layout_.input_bytes;
  Result<std::span<uint8_t>> span = region_->Span(area, area_bytes);
  Status status = span.status();
  if (status.ok() && state_bytes > span->size()) {
    status = OutOfRange("a state of {} bytes does not fit the region's {} bytes", state_bytes,
                        span->size());
  }
  if (status.ok()) {
    status = is_export ? stage_->ExportState(request.slot, request.position, span->data())
                       : stage_->ImportState(request.slot, request.position, span->data());
  }
  ShardStateReply reply;
  reply.status_code = static_cast<uint32_t>(status.code());
  reply.error = status.message();
  reply.state_bytes = state_bytes;
  scratch_.clear();
  EncodeStateReply(reply, scratch_);
  return Reply(ShardMessageType::kStateReply, scratch_);
}

Status ShardSession::HandleStats() {
  ShardStatsReply reply;
  reply.batches = stats_.batches;
  reply.tokens = stats_.tokens;
  reply.busy_seconds = stats_.busy_seconds;
  reply.rss_bytes = ProcessRssBytes();
  scratch_.clear();
  EncodeStatsReply(reply, scratch_);
  return Reply(ShardMessageType::kStatsReply, scratch_);
}

}  // namespace shardlm
