// LocalStage (local_stage.h): binding, page storage and threads of an in-process stage;
// Run = copy-on-write copies, then the forward pass over the stage's layers.
#include "pipeline/local_stage.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "base/elapsed.h"
#include "kv/shared_kv_layout.h"
#include "model/prefault.h"
#include "pipeline/model_loader.h"

namespace shardlm {
namespace {

int ThreadCount(const LocalStageOptions& options) {
  if (!options.device.cores.empty()) return int(options.device.cores.size());
  if (options.threads > 0) return options.threads;
  return std::max(1, int(std::thread::hardware_concurrency()));
}

Status CheckOptions(const LocalStageOptions& options) {
  if (options.device.remote()) {
    return InvalidArgument("stage {}: device '{}' is remote; a local stage runs on cpu cores",
                           options.index, options.device.ToString());
  }
  if (options.kv.max_batch_tokens < 1) {
    return InvalidArgument("stage {}: max_batch_tokens is {}, must be >= 1", options.index,
                           options.kv.max_batch_tokens);
  }
  return Status::Ok();
}

// The stage's pages: its own memory, a new shared region (share_kv) or the server's region
// (kv_region), which `region` then holds.
Result<std::unique_ptr<PagePool>> MakePool(const Model& model, const PagePoolConfig& config,
                                           const LocalStageOptions& options,
                                           std::shared_ptr<ShmRegion>& region) {
  if (!options.share_kv && options.kv_region == nullptr) return PagePool::Create(config);
  // (Create checks the rows itself; the region's size needs them first.)
  SHARDLM_TRY(CheckModelKvRows(model.config(), options.kv.kv_type));
  const size_t bytes = SharedKvRegionBytes(config, options.kv);
  if (KvPageBytes(config) == 0) return PagePool::Create(config);
  region = options.kv_region;
  if (region == nullptr) {
    SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<ShmRegion> made,
                             ShmRegion::Create(fmt::format("shardlm-kv{}", options.index), bytes));
    region = std::move(made);
  }
  if (region->size() < bytes) {
    return InvalidArgument("shared KV region of {} bytes, the stage's pages need {}",
                           region->size(), bytes);
  }
  return PagePool::CreateOn(config, std::span<uint8_t>(region->data(), region->size()), region);
}

// The summaries of every logical page: in the stage's shared region when it has one.
Result<std::unique_ptr<KeySummaries>> MakeSummaries(const PagePoolConfig& pool,
                                                    const KvGeometry& kv, ShmRegion* region) {
  if (!kv.key_summaries) return std::unique_ptr<KeySummaries>();
  if (region == nullptr) return KeySummaries::Create(pool, kv.n_pages);
  const size_t offset = SharedKvSummariesOffset(pool);
  return KeySummaries::CreateOn(
      pool, kv.n_pages,
      std::span<uint8_t>(region->data() + offset, KeySummaries::Bytes(pool, kv.n_pages)));
}

}  // namespace

Result<std::unique_ptr<LocalStage>> LocalStage::Load(std::shared_ptr<const GgufFile> file,
                                                     LayerRange layers,
                                                     const LocalStageOptions& options) {
  if (file == nullptr) return InvalidArgument("stage {}: no model file", options.index);
  SHARDLM_TRY(CheckOptions(options));
  const std::string label =
      file->name() + " [" + std::to_string(layers.begin) + ", " + std::to_string(layers.end) + ")";
  const auto start = std::chrono::steady_clock::now();
  // The stage's own threads repack its panels, so that the memory is first touched by the
  // cores that compute with it.
  auto threads = std::make_unique<ThreadPool>(ThreadCount(options), options.device.cores);
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                           Model::Load(std::move(file), layers, /*repack=*/true, threads.get()));
  ReportPanels(*model, label, start, options.show_progress);
  if (options.prefault) PrefaultStage(model->weights(), label, options.show_progress);
  const Model& ref = *model;
  return Create(std::move(model), ref, options, std::move(threads));
}

Result<std::unique_ptr<LocalStage>> LocalStage::Borrow(const Model& model,
                                                       const LocalStageOptions& options) {
  return Create(nullptr, model, options, nullptr);
}

Result<std::unique_ptr<LocalStage>> LocalStage::Create(std::unique_ptr<Model> owned,
                                                       const Model& model,
                                                       const LocalStageOptions& options,
                                                       std::unique_ptr<ThreadPool> threads) {
  SHARDLM_TRY(CheckOptions(options));
  std::unique_ptr<LocalStage> stage(new LocalStage());
  stage->owned_model_ = std::move(owned);
  stage->model_ = &model;
  // A stage without KV layers in its pool (recurrent layers, or windowed layers kept in rings,
  // only) has pages of no bytes: nothing to bound or move, so every logical page is
  // "resident" in its pool and paging ops pass it by.
  const bool holds_kv = model.KvPoolConfig(options.kv).n_layers > 0;
  KvGeometry kv = options.kv;
  if (!holds_kv) kv.n_frames = 0;
  auto pool = MakePool(model, model.KvPoolConfig(kv), options, stage->kv_region_);
  if (!pool.ok()) return pool.status().WithContext("stage " + std::to_string(options.index));
  stage->pool_ = std::move(pool).value();
  stage->threads_ = threads != nullptr
                        ? std::move(threads)
                        : std::make_unique<ThreadPool>(ThreadCount(options), options.device.cores);
  stage->forward_ = std::make_unique<ForwardPass>(model, *stage->pool_, *stage->threads_,
                                                  options.kv.max_batch_tokens, options.kv.n_pages);
  if (options.kv.bounded() && holds_kv) {
    const std::string where = "stage " + std::to_string(options.index);
    auto summaries = MakeSummaries(stage->pool_->config(), kv, stage->kv_region_.get());
    if (!summaries.ok()) return summaries.status().WithContext(where);
    if (options.kv_region != nullptr) {
      // A prefill worker's stage: the decode stage that shared the region moves its pages.
      stage->follower_ = true;
      stage->follower_summaries_ = std::move(summaries).value();
    } else {
      auto tier = CreateKvTier(options.kv.tier, options.kv.n_pages, stage->pool_->page_bytes(),
                               "stage" + std::to_string(options.index));
      if (!tier.ok()) return tier.status().WithContext(where);
      auto residency = PageResidency::Create(stage->pool_.get(), options.kv.n_pages,
                                             std::move(tier).value(), std::move(summaries).value());
      if (!residency.ok()) return residency.status().WithContext(where);
      stage->residency_ = std::move(residency).value();
    }
  }
  StageInfo& info = stage->info_;
  info.index = options.index;
  info.layers = model.layers();
  info.first = model.is_first_stage();
  info.last = model.is_last_stage();
  info.device = options.device.ToString();
  info.remote = false;
  info.threads = stage->threads_->size();
  info.weight_bytes = StageWeightBytes(model.weights());
  info.kv_bytes = size_t(stage->pool_->n_pages()) * stage->pool_->page_bytes();
  info.ring_bytes_per_sequence = StageWindowRingBytes(model.config(), model.layers(), options.kv);
  return stage;
}

LocalStage::~LocalStage() = default;

Status LocalStage::ApplyCopies(std::span<const PageCopy> copies) {
  const int n_pages = pool_->n_pages();
  for (const PageCopy& copy : copies) {
    if (copy.src < 0 || copy.src >= n_pages || copy.dst < 0 || copy.dst >= n_pages) {
      return InvalidArgument("stage {}: page copy {} -> {} names a page outside [0, {})",
                             info_.index, copy.src, copy.dst, n_pages);
    }
  }
  for (const PageCopy& copy : copies) pool_->CopyPage(copy.src, copy.dst);
  return Status::Ok();
}

Status LocalStage::Run(const StageBatch& batch, const float* hidden_in, float* out) {
  std::lock_guard<std::mutex> lock(run_mu_);
  const auto start = std::chrono::steady_clock::now();
  if (batch.apply_only) {
    // Moves only: nothing is computed or counted. A stage without pages has none to move.
    if (residency_ != nullptr) return RunPooled(batch, hidden_in, out);
    if (follower_ || pool_->page_bytes() > 0) {
      return InvalidArgument("stage {}: a batch to apply without a bounded KV pool of its own",
                             info_.index);
    }
    return Status::Ok();
  }
  if (!batch.frames_by_slot.empty() && !follower_ && pool_->page_bytes() > 0) {
    return InvalidArgument("stage {}: frames named for a stage that places its own pages",
                           info_.index);
  }
  if (residency_ != nullptr) {
    SHARDLM_TRY(RunPooled(batch, hidden_in, out));
  } else if (follower_) {
    SHARDLM_TRY(RunFollower(batch, hidden_in, out));
  } else {
    if (batch.paging != nullptr && !batch.paging->empty() && pool_->page_bytes() > 0) {
      return InvalidArgument("stage {}: paging ops for a stage without a bounded KV pool",
                             info_.index);
    }
    SHARDLM_TRY(ApplyCopies(batch.copies));
    SHARDLM_TRY(forward_->Run(batch.entries, batch.pages_by_slot, hidden_in, out));
  }
  Count(batch, hidden_in != nullptr, SecondsSince(start));
  return Status::Ok();
}

Status LocalStage::RunPooled(const StageBatch& batch, const float* hidden_in, float* out) {
  PagingLoss unreported;  // a caller that does not ask still gets a consistent stage
  PagingLoss* loss = batch.loss != nullptr ? batch.loss : &unreported;
  if (batch.paging != nullptr) SHARDLM_TRY(residency_->Apply(*batch.paging, loss));
  for (const PageCopy& copy : batch.copies) {
    SHARDLM_TRY(residency_->Copy(copy.src, copy.dst, loss));
  }
  // A batch applied only: the worker writes the pages next, so their next eviction must take
  // them to the tier all the same.
  if (batch.apply_only) return MarkWritten(batch);
  const size_t n_slots = batch.pages_by_slot.size();
  if (frames_by_slot_.size() < n_slots) frames_by_slot_.resize(n_slots);
  frame_lists_.assign(n_slots, PageList());
  for (const BatchEntry& e : batch.entries) {
    const size_t slot = size_t(e.slot);
    if (slot >= n_slots || !frame_lists_[slot].empty() || batch.pages_by_slot[slot].empty()) {
      continue;  // out of range or empty: the forward pass says so
    }
    const AttendedPages attended =
        slot < batch.attended_by_slot.size() ? batch.attended_by_slot[slot] : AttendedPages();
    Status status = residency_->Frames(batch.pages_by_slot[slot], attended, &frames_by_slot_[slot]);
    if (!status.ok()) return status.WithContext("stage " + std::to_string(info_.index));
    frame_lists_[slot] = frames_by_slot_[slot];
  }
  PooledKv pooled;
  pooled.summaries = residency_->summaries();
  pooled.ids_by_slot = batch.pages_by_slot;
  pooled.page_scores = batch.page_scores;
  pooled.attended_by_slot = batch.attended_by_slot;
  SHARDLM_TRY(forward_->RunPooled(batch.entries, frame_lists_, pooled, hidden_in, out));
  return MarkWritten(batch);
}

Status LocalStage::MarkWritten(const StageBatch& batch) {
  const int page_tokens = pool_->page_tokens();
  for (const BatchEntry& e : batch.entries) {
    const size_t slot = size_t(e.slot);
    const size_t page = size_t(e.position / page_tokens);
    if (slot >= batch.pages_by_slot.size() || page >= batch.pages_by_slot[slot].size()) {
      return InvalidArgument("stage {}: entry at position {} of slot {} has no page", info_.index,
                             e.position, e.slot);
    }
    SHARDLM_TRY(CheckPages(batch.pages_by_slot[slot].subspan(page, 1), residency_->n_pages()));
    residency_->MarkWritten(batch.pages_by_slot[slot][page]);
  }
  return Status::Ok();
}

Status LocalStage::RunFollower(const StageBatch& batch, const float* hidden_in, float* out) {
  const std::string where = "stage " + std::to_string(info_.index);
  if (batch.apply_only || !batch.copies.empty() ||
      (batch.paging != nullptr && !batch.paging->empty())) {
    return InvalidArgument("{}: a prefill worker's stage moves no pages (the decode side does)",
                           where);
  }
  const int n_pages = follower_summaries_ != nullptr ? follower_summaries_->n_pages() : 0;
  for (const BatchEntry& e : batch.entries) {
    const size_t slot = size_t(e.slot);
    if (slot >= batch.frames_by_slot.size() || slot >= batch.pages_by_slot.size() ||
        batch.frames_by_slot[slot].size() != batch.pages_by_slot[slot].size()) {
      return InvalidArgument("{}: slot {} has no frame for each of its pages", where, e.slot);
    }
    if (n_pages > 0) SHARDLM_TRY(CheckPages(batch.pages_by_slot[slot], n_pages));
  }
  PooledKv pooled;
  pooled.summaries = follower_summaries_.get();
  pooled.ids_by_slot = batch.pages_by_slot;
  pooled.page_scores = batch.page_scores;
  pooled.attended_by_slot = batch.attended_by_slot;
  return forward_->RunPooled(batch.entries, batch.frames_by_slot, pooled, hidden_in, out);
}

void LocalStage::Count(const StageBatch& batch, bool has_hidden_in, double seconds) {
  const ModelConfig& config = model_->config();
  const uint64_t n_tokens = batch.entries.size();
  const uint64_t hidden_bytes = n_tokens * uint64_t(config.n_embd) * sizeof(float);
  uint64_t bytes_out = hidden_bytes;
  if (info_.last) {
    const BatchOutputRows rows = CountOutputRows(batch.entries);
    bytes_out = (uint64_t(rows.logits) * uint64_t(config.n_vocab) +
                 uint64_t(rows.embeddings) * uint64_t(config.n_embd)) *
                sizeof(float);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.batches += 1;
  stats_.tokens += n_tokens;
  stats_.busy_seconds += seconds;
  stats_.bytes_in += has_hidden_in ? hidden_bytes : 0;
  stats_.bytes_out += bytes_out;
}

StageStats LocalStage::Stats() const {
  StageStats stats;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats = stats_;
  }
  if (residency_ != nullptr) stats.paging = residency_->Stats();
  return stats;
}

size_t LocalStage::page_bytes() const { return pool_->page_bytes(); }

Status LocalStage::CheckPages(std::span<const PageId> pages, int n_pages) const {
  for (PageId page : pages) {
    if (page < 0 || page >= n_pages) {
      return InvalidArgument("stage {}: page {} is outside the pool ({} pages)", info_.index, page,
                             n_pages);
    }
  }
  return Status::Ok();
}

Status LocalStage::ExportPages(std::span<const PageId> pages, uint8_t* dst) {
  if (residency_ != nullptr) return residency_->Export(pages, dst);
  SHARDLM_TRY(CheckFollowerMovesNothing());
  SHARDLM_TRY(CheckPages(pages, pool_->n_pages()));
  const size_t bytes = pool_->page_bytes();
  if (bytes == 0) return Status::Ok();  // no KV layers: the pages hold nothing
  for (size_t i = 0; i < pages.size(); ++i) {
    std::memcpy(dst + i * bytes, pool_->page_data(pages[i]), bytes);
  }
  return Status::Ok();
}

Status LocalStage::ImportPages(std::span<const PageId> pages, const uint8_t* src) {
  if (residency_ != nullptr) return residency_->Import(pages, src);
  SHARDLM_TRY(CheckFollowerMovesNothing());
  SHARDLM_TRY(CheckPages(pages, pool_->n_pages()));
  const size_t bytes = pool_->page_bytes();
  if (bytes == 0) return Status::Ok();
  for (size_t i = 0; i < pages.size(); ++i) {
    std::memcpy(pool_->page_data(pages[i]), src + i * bytes, bytes);
  }
  return Status::Ok();
}

Status LocalStage::CheckFollowerMovesNothing() const {
  if (!follower_) return Status::Ok();
  return InvalidArgument(
      "stage {}: a prefill worker's pages are the decode side's frames: export and import them "
      "there",
      info_.index);
}

Status LocalStage::ExportState(int32_t slot, int32_t position, uint8_t* dst) {
  std::lock_guard<std::mutex> lock(run_mu_);
  Status status = forward_->ExportState(slot, position, {dst, state_bytes()});
  return status.ok() ? status : status.WithContext("stage " + std::to_string(info_.index));
}

Status LocalStage::ImportState(int32_t slot, int32_t position, const uint8_t* src) {
  std::lock_guard<std::mutex> lock(run_mu_);
  Status status = forward_->ImportState(slot, position, {src, state_bytes()});
  return status.ok() ? status : status.WithContext("stage " + std::to_string(info_.index));
}

}  // namespace shardlm
