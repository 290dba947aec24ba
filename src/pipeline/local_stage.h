// LocalStage: a stage computed in this process, on a set of CPU cores (its
// device; the Stage interface is stage.h).
//
// Two ways to make one:
//  - Load: from a GgufFile and a layer range. The stage binds its own tensors and pages in
//    only their bytes (its layers; stage 0 also the embedding, the last stage the output
//    norm and head), so a split holds each stage's share of the model in memory.
//    Its own threads (pinned when its device is) repack its panels, so the panel memory
//    is first touched, and placed, near the cores that compute with it.
//  - Borrow: over a Model loaded elsewhere (the unsplit case: no second binding, no
//    prefault; the caller's LoadModelFile did that).
// Either way the stage owns its PagePool (geometry from the options, pages of its layers
// only), its ThreadPool and its ForwardPass. Page ids come from the pipeline's
// PageAllocator; the stage stores them and applies the batch's copy-on-write copies. With a
// bounded pool (options.kv.bounded()) the pool holds n_frames frames and a PageResidency
// keeps the other pages in the tier, applying the batch's paging ops first. A bounded stage
// over a region it was given (kv_region: a prefill worker's) follows instead: it computes over
// the frames each batch names (StageBatch::frames_by_slot) and moves nothing, the decode
// stage that owns the region and its tier having applied the moves.
//
// Device: `cpu` runs `threads` unpinned threads (0 = every core of the machine); `cpu:A-B`
// runs one thread per core, each pinned, the calling thread (the pipeline's worker for this
// stage) on the first core: ThreadPool pins its owner on its first ParallelFor from a new
// thread.
//
// Goals: bitwise the same hidden rows and logits as the unsplit model (the forward pass
// reduces in shape-only order, so a layer computes the same in any stage); statistics a
// `/props` or `/metrics` reader can poll while batches run.
// Non-goals: page allocation (kv/page_allocator.h), ordering batches between stages
// (pipeline.h), remote devices (remote_stage.h): a `unix:` device is InvalidArgument here.
//
// Thread safety: one thread calls Run (and uses pool()) at a time; info, Health and Stats
// may be called from any thread.
// Lifetime: Load keeps the GgufFile alive through the Model; Borrow needs the Model to
// outlive the stage.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "ipc/shm_region.h"
#include "kv/page_pool.h"
#include "kv/page_residency.h"
#include "model/forward.h"
#include "model/model.h"
#include "pipeline/placement.h"
#include "pipeline/stage.h"
#include "tensor/thread_pool.h"

namespace shardlm {

struct LocalStageOptions {
  int index = 0;      // position in the pipeline
  DeviceSpec device;  // kCpu only
  int threads = 0;    // unpinned `cpu`: thread count, 0 = every core; ignored when pinned
  // The pipeline's KV geometry (every stage has the same page ids and page_tokens); its
  // max_batch_tokens bounds every batch, and activations are sized once for it.
  KvGeometry kv;
  bool prefault = true;        // Load only: page in the stage's tensors before returning
  bool show_progress = false;  // Load only: "loading <file> [a, b): NN%" on stderr
  // Where the pages live: by default in this process's memory; with share_kv in a new sealed
  // memfd region (shared_kv()) that a prefill worker maps to write the pages this stage reads;
  // with kv_region inside that region, received from the server (the prefill worker's side).
  // The region is laid out as kv/shared_kv_layout.h says.
  bool share_kv = false;
  std::shared_ptr<ShmRegion> kv_region;
};

class LocalStage final : public Stage {
 public:
  // Binds layers `layers` of `file` (a range outside [0, n_layers) or empty is
  // InvalidArgument) and, with options.prefault, pages in only their tensors.
  // Errors: those of Model::Load, a remote device, a bad page geometry (PagePool::Create).
  static Result<std::unique_ptr<LocalStage>> Load(std::shared_ptr<const GgufFile> file,
                                                  LayerRange layers,
                                                  const LocalStageOptions& options);
  // A stage over `model` (all its layers), which must outlive the stage.
  static Result<std::unique_ptr<LocalStage>> Borrow(const Model& model,
                                                    const LocalStageOptions& options);
  ~LocalStage() override;

  const StageInfo& info() const override { return info_; }
  // Errors: a copy naming a page outside the pool (InvalidArgument, nothing applied), then
  // those of ForwardPass::Run.
  Status Run(const StageBatch& batch, const float* hidden_in, float* out) override;
  Status Health() const override { return Status::Ok(); }
  Status Reconnect() override { return Status::Ok(); }
  StageStats Stats() const override;
  size_t page_bytes() const override;
  Status ExportPages(std::span<const PageId> pages, uint8_t* dst) override;
  Status ImportPages(std::span<const PageId> pages, const uint8_t* src) override;
  size_t state_bytes() const override { return forward_->state_bytes(); }
  Status ExportState(int32_t slot, int32_t position, uint8_t* dst) override;
  Status ImportState(int32_t slot, int32_t position, const uint8_t* src) override;

  const Model& model() const { return *model_; }
  // The region the pages live in (share_kv or kv_region), or null.
  const ShmRegion* shared_kv() const override { return kv_region_.get(); }
  // The stage's page storage (prefix cache export/import, the shard daemon).
  PagePool& pool() { return *pool_; }

 private:
  LocalStage() = default;
  // threads: the pool Load repacked the panels on, or nullptr for a new one.
  static Result<std::unique_ptr<LocalStage>> Create(std::unique_ptr<Model> owned,
                                                    const Model& model,
                                                    const LocalStageOptions& options,
                                                    std::unique_ptr<ThreadPool> threads);
  Status ApplyCopies(std::span<const PageCopy> copies);
  // Bounded pool: moves, copies, frame lists, the forward pass, dirty pages.
  Status RunPooled(const StageBatch& batch, const float* hidden_in, float* out);
  // Bounded pool: the pages the batch's entries write are dirty (their eviction writes them to
  // the tier). InvalidArgument for an entry without a page.
  Status MarkWritten(const StageBatch& batch);
  // Bounded pool over a region it was given: the forward pass over the batch's frames.
  Status RunFollower(const StageBatch& batch, const float* hidden_in, float* out);
  // InvalidArgument: a page outside [0, n_pages).
  Status CheckPages(std::span<const PageId> pages, int n_pages) const;
  // InvalidArgument for a follower, whose pages are logical only on the decode side.
  Status CheckFollowerMovesNothing() const;
  void Count(const StageBatch& batch, bool has_hidden_in, double seconds);

  std::unique_ptr<Model> owned_model_;  // Load only
  const Model* model_ = nullptr;
  std::shared_ptr<ShmRegion> kv_region_;  // share_kv or kv_region; the pool holds it too
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<ThreadPool> threads_;
  std::unique_ptr<ForwardPass> forward_;
  std::unique_ptr<PageResidency> residency_;          // bounded pool only
  std::unique_ptr<KeySummaries> follower_summaries_;  // a follower's, over the region
  bool follower_ = false;                             // bounded, over a region it was given
  std::vector<std::vector<PageId>> frames_by_slot_;   // RunPooled's frame lists
  std::vector<PageList> frame_lists_;
  StageInfo info_;

  // Held by Run and by the recurrent state's export and import: the engine thread moves a
  // slot's state while the pipeline's worker may run another slot's batch.
  std::mutex run_mu_;
  mutable std::mutex stats_mu_;
  StageStats stats_;  // guarded by stats_mu_
};

}  // namespace shardlm
