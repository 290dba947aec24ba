// Model::Load: config + weights of one stage (see model.h).
#include "model/model.h"

#include <algorithm>
#include <thread>

namespace shardlm {

Result<std::unique_ptr<Model>> Model::Load(std::shared_ptr<const GgufFile> file, LayerRange range,
                                           bool repack, ThreadPool* repack_threads) {
  if (file == nullptr) return InvalidArgument("Model::Load: no GGUF file");
  std::unique_ptr<Model> model(new Model());
  auto config = ReadModelConfig(*file);
  if (!config.ok()) return config.status().WithContext(file->name());
  model->config_ = config.value();
  if (range.end == kAllLayers.end) range.end = model->config_.n_layers;
  auto weights = BindStageWeights(*file, model->config_, range);
  if (!weights.ok()) return weights.status().WithContext(file->name());
  model->weights_ = std::move(weights).value();
  // A layer that reads another's KV (kv_layer) uses that layer's index.
  int n_kv_layers = 0;
  for (int layer = range.begin; layer < range.end; ++layer) {
    const LayerConfig& lc = model->config_.layers[size_t(layer)];
    int kv = -1;
    int recurrent = -1;
    if (!lc.attends()) {
      recurrent = model->n_recurrent_layers_++;
    } else if (lc.has_kv()) {
      kv = n_kv_layers++;
    } else if (lc.kv_layer >= range.begin && lc.kv_layer < layer) {
      kv = model->kv_index_[size_t(lc.kv_layer - range.begin)];
    } else {
      return InvalidArgument("{}: layer {} reads the KV of layer {}, outside its stage [{}, {})",
                             file->name(), layer, lc.kv_layer, range.begin, range.end);
    }
    model->kv_index_.push_back(kv);
    model->recurrent_index_.push_back(recurrent);
  }
  if (repack) {
    std::unique_ptr<ThreadPool> load_threads;
    if (repack_threads == nullptr) {
      load_threads =
          std::make_unique<ThreadPool>(int(std::max(1u, std::thread::hardware_concurrency())));
      repack_threads = load_threads.get();
    }
    auto panels = RepackPanels(model->config_, &model->weights_, *repack_threads);
    if (!panels.ok()) return panels.status().WithContext(file->name());
    model->panels_ = std::move(panels).value();
  }
  model->file_ = std::move(file);
  return model;
}

bool KvInWindowRing(const LayerConfig& layer, WindowKv window_kv) {
  return window_kv == WindowKv::kRing && layer.attention == AttentionKind::kSliding &&
         layer.has_kv();
}

PagePoolConfig StageKvPoolConfig(const ModelConfig& config, LayerRange layers, int n_pages,
                                 int page_tokens, KvType kv_type, WindowKv window_kv) {
  PagePoolConfig pool;
  pool.n_pages = n_pages;
  pool.page_tokens = page_tokens;
  pool.n_kv_heads = config.n_head_kv;
  pool.head_dim = config.head_dim;
  pool.kv_type = kv_type;
  pool.window_kv = window_kv;
  for (int layer = layers.begin; layer < layers.end; ++layer) {
    const LayerConfig& lc = config.layers[size_t(layer)];
    if (!lc.has_kv() || KvInWindowRing(lc, window_kv)) continue;
    pool.layer_shapes.push_back({lc.n_head_kv, lc.head_dim_k});
    ++pool.n_layers;
  }
  // Models whose layers share one shape keep the short form (and their snapshot layout).
  if (pool.uniform()) pool.layer_shapes.clear();
  return pool;
}

std::vector<WindowRingLayer> StageWindowRingLayers(const ModelConfig& config, LayerRange layers,
                                                   WindowKv window_kv) {
  std::vector<WindowRingLayer> ring;
  for (int layer = layers.begin; layer < layers.end; ++layer) {
    const LayerConfig& lc = config.layers[size_t(layer)];
    if (KvInWindowRing(lc, window_kv)) ring.push_back({{lc.n_head_kv, lc.head_dim_k}, lc.window});
  }
  return ring;
}

size_t StageWindowRingBytes(const ModelConfig& config, LayerRange layers, const KvGeometry& kv) {
  return WindowRings::SlotBytes(StageWindowRingLayers(config, layers, kv.window_kv), kv.page_tokens,
                                kv.kv_type, kv.max_batch_tokens, kv.n_pages);
}

size_t StageStateBytes(const ModelConfig& config, LayerRange layers, KvType kv_type,
                       WindowKv window_kv) {
  return config.RecurrentStateBytes(layers.begin, layers.end) +
         WindowRings::StateBytes(StageWindowRingLayers(config, layers, window_kv), kv_type);
}

Status CheckModelKvRows(const ModelConfig& config, KvType kv_type) {
  for (const LayerConfig& layer : config.layers) {
    if (layer.has_kv()) SHARDLM_TRY(CheckKvRows(kv_type, layer.head_dim_k));
  }
  return Status::Ok();
}

PagePoolConfig Model::KvPoolConfig(int n_pages, int page_tokens, KvType kv_type,
                                   WindowKv window_kv) const {
  return StageKvPoolConfig(config_, layers(), n_pages, page_tokens, kv_type, window_kv);
}

}  // namespace shardlm
