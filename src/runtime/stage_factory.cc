// BuildStages implementation (see stage_factory.h).
#include "runtime/stage_factory.h"

#include <chrono>
#include <utility>

#include "gguf/fingerprint.h"
#include "model/forward.h"
#include "runtime/remote_stage.h"
#include "tensor/thread_pool.h"

namespace shardlm {
namespace {

// Everything one stage of the plan needs to be built.
struct StagePlan {
  int index = 0;
  DeviceSpec device;
  LayerRange layers;
  bool whole_model = false;  // one stage computes every layer: borrow the bound Model
};

// Interim local stage until local_stage.h lands: a Model binding (borrowed or owned), a
// PagePool, a ThreadPool and a ForwardPass.
class InterimLocalStage : public Stage {
 public:
  InterimLocalStage(const Model& model, std::unique_ptr<Model> owned,
                    std::unique_ptr<PagePool> pool, std::unique_ptr<ThreadPool> threads,
                    int max_batch_tokens, StageInfo info)
      : owned_(std::move(owned)),
        pool_(std::move(pool)),
        threads_(std::move(threads)),
        forward_(model, *pool_, *threads_, max_batch_tokens),
        info_(std::move(info)) {}
  const StageInfo& info() const override { return info_; }
  Status Run(const StageBatch& batch, const float* hidden_in, float* out) override {
    const auto start = std::chrono::steady_clock::now();
    for (const PageCopy& copy : batch.copies) pool_->CopyPage(copy.src, copy.dst);
    SHARDLM_TRY(forward_.Run(batch.entries, batch.pages_by_slot, hidden_in, out));
    stats_.batches++;
    stats_.tokens += batch.entries.size();
    stats_.busy_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return Status::Ok();
  }
  Status Health() const override { return Status::Ok(); }
  Status Reconnect() override { return Status::Ok(); }
  StageStats Stats() const override { return stats_; }

 private:
  std::unique_ptr<Model> owned_;
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<ThreadPool> threads_;
  ForwardPass forward_;
  StageInfo info_;
  StageStats stats_;
};

Result<std::unique_ptr<Stage>> BuildLocal(const Model& model, const StagePlan& plan,
                                          const PipelineOptions& options) {
  std::unique_ptr<Model> owned;
  if (!plan.whole_model) {
    SHARDLM_ASSIGN_OR_RETURN(owned, Model::Load(model.shared_file(), plan.layers));
  }
  const Model& binding = owned ? *owned : model;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<PagePool> pool,
                           PagePool::Create(binding.KvPoolConfig(
                               options.n_pages, options.page_tokens, options.kv_type)));
  int n_threads = int(plan.device.cores.size());
  if (n_threads == 0) n_threads = options.threads;
  if (n_threads == 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  StageInfo info;
  info.index = plan.index;
  info.layers = binding.layers();
  info.first = binding.is_first_stage();
  info.last = binding.is_last_stage();
  info.device = plan.device.ToString();
  info.threads = n_threads;
  info.kv_bytes = pool->page_bytes() * size_t(pool->n_pages());
  auto threads = std::make_unique<ThreadPool>(n_threads, plan.device.cores);
  return std::unique_ptr<Stage>(new InterimLocalStage(binding, std::move(owned), std::move(pool),
                                                      std::move(threads), options.max_batch_tokens,
                                                      info));
}

Result<std::unique_ptr<Stage>> BuildRemote(const Model& model, const std::string& model_path,
                                           const StagePlan& plan, const PipelineOptions& options) {
  if (model_path.empty()) {
    return InvalidArgument("stage {} ({}) is remote: it needs the model's path to open", plan.index,
                           plan.device.ToString());
  }
  RemoteStageOptions remote;
  remote.index = plan.index;
  remote.socket_path = plan.device.socket_path;
  remote.model_path = model_path;
  remote.fingerprint = ModelFingerprint(model.file());
  remote.config = model.config();
  remote.layers = plan.layers;
  remote.n_pages = options.n_pages;
  remote.page_tokens = options.page_tokens;
  remote.kv_type = options.kv_type;
  remote.max_batch_tokens = options.max_batch_tokens;
  remote.max_logit_rows = options.max_logit_rows;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<RemoteStage> stage, RemoteStage::Create(remote));
  return std::unique_ptr<Stage>(std::move(stage));
}

}  // namespace

Result<std::vector<std::unique_ptr<Stage>>> BuildStages(const Model& model,
                                                        const std::string& model_path,
                                                        const PipelineOptions& options) {
  if (!model.is_first_stage() || !model.is_last_stage()) {
    return InvalidArgument("a pipeline is built from a binding of every layer, got layers [{}, {})",
                           model.layers().begin, model.layers().end);
  }
  std::vector<DeviceSpec> devices = options.devices;
  if (devices.empty()) devices.push_back(DeviceSpec{});
  SHARDLM_ASSIGN_OR_RETURN(std::vector<LayerRange> ranges,
                           PlanLayerRanges(LayerBytes(model.file(), model.config()), devices.size(),
                                           options.layer_split));
  std::vector<std::unique_ptr<Stage>> stages;
  for (size_t i = 0; i < devices.size(); ++i) {
    const StagePlan plan{int(i), devices[i], ranges[i], devices.size() == 1};
    Result<std::unique_ptr<Stage>> stage = devices[i].remote()
                                               ? BuildRemote(model, model_path, plan, options)
                                               : BuildLocal(model, plan, options);
    if (!stage.ok()) return stage.status();
    stages.push_back(std::move(stage).value());
  }
  return stages;
}

}  // namespace shardlm
