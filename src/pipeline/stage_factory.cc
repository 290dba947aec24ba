// BuildStages implementation (see stage_factory.h).
#include "pipeline/stage_factory.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "gguf/fingerprint.h"
#include "pipeline/local_stage.h"
#include "pipeline/remote_stage.h"

namespace shardlm {
namespace {

// Everything one stage of the plan needs to be built.
struct StagePlan {
  int index = 0;
  DeviceSpec device;
  LayerRange layers;
  bool whole_model = false;  // one stage computes every layer: borrow the bound Model
};

Result<std::unique_ptr<Stage>> BuildLocal(const Model& model, const StagePlan& plan,
                                          const PipelineOptions& options) {
  LocalStageOptions local;
  local.index = plan.index;
  local.device = plan.device;
  local.threads = options.threads;
  local.kv = options.kv;
  local.share_kv = options.share_kv;
  local.show_progress = options.placement.show_progress;
  Result<std::unique_ptr<LocalStage>> stage =
      plan.whole_model ? LocalStage::Borrow(model, local)
                       : LocalStage::Load(model.shared_file(), plan.layers, local);
  if (!stage.ok()) return stage.status();
  return std::unique_ptr<Stage>(std::move(stage).value());
}

Result<std::unique_ptr<Stage>> BuildRemote(const Model& model, const StagePlan& plan,
                                           const PipelineOptions& options) {
  const std::string& model_path = options.placement.model_path;
  if (model_path.empty()) {
    return InvalidArgument("stage {} ({}) is remote: it needs the model's path to open", plan.index,
                           plan.device.ToString());
  }
  RemoteStageOptions remote;
  remote.index = plan.index;
  remote.socket_path = plan.device.socket_path;
  remote.allowed_peer_uids = options.placement.allowed_shard_uids;
  remote.model_path = model_path;
  remote.fingerprint = ModelFingerprint(model.file());
  remote.config = model.config();
  remote.layers = plan.layers;
  remote.kv = options.kv;
  // A batch has no more logits rows than entries (a daemon refuses a Hello that says so).
  remote.max_logit_rows = std::min(options.max_logit_rows, options.kv.max_batch_tokens);
  remote.max_embedding_rows = options.max_embedding_rows;
  remote.share_kv = options.share_kv;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<RemoteStage> stage, RemoteStage::Create(remote));
  return std::unique_ptr<Stage>(std::move(stage));
}

}  // namespace

Result<std::vector<std::unique_ptr<Stage>>> BuildStages(const Model& model,
                                                        const PipelineOptions& options) {
  if (!model.is_first_stage() || !model.is_last_stage()) {
    return InvalidArgument("a pipeline is built from a binding of every layer, got layers [{}, {})",
                           model.layers().begin, model.layers().end);
  }
  std::vector<DeviceSpec> devices = options.placement.devices;
  if (devices.empty()) devices.push_back(DeviceSpec{});
  SHARDLM_ASSIGN_OR_RETURN(std::vector<LayerRange> ranges,
                           PlanLayerRanges(LayerCosts(model.file(), model.config()), devices.size(),
                                           options.placement.layer_split, HeadCost(model.file())));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<std::string> moved,
                           KeepSharedKvInOneStage(model.config(), ranges));
  for (const std::string& line : moved) std::fprintf(stderr, "shardlm: %s\n", line.c_str());
  std::vector<std::unique_ptr<Stage>> stages;
  for (size_t i = 0; i < devices.size(); ++i) {
    const StagePlan plan{int(i), devices[i], ranges[i], devices.size() == 1};
    Result<std::unique_ptr<Stage>> stage =
        devices[i].remote() ? BuildRemote(model, plan, options) : BuildLocal(model, plan, options);
    if (!stage.ok()) return stage.status();
    stages.push_back(std::move(stage).value());
  }
  return stages;
}

}  // namespace shardlm
