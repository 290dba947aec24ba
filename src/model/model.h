// Model: one stage of a GGUF model — its config, its layer range and its bound weights.
//
// Goals: the small object the runtime holds per stage; load = read config + bind weights
// for [begin, end); a stage of the whole model is LayerRange{0, n_layers} (AllLayers).
// Non-goals: computing (forward.h), KV memory (kv/), tokenization.
//
// Thread safety: immutable after Load; shared by any number of ForwardPass objects.
// Lifetime: keeps the GgufFile alive (weights point into its mapping).
#pragma once

#include <memory>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "kv/page_pool.h"
#include "kv/window_ring.h"
#include "model/model_config.h"
#include "model/panel_repack.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"

namespace shardlm {

// A range meaning "every layer of the model", resolved by Model::Load.
inline constexpr LayerRange kAllLayers{0, -1};

// Whether `layer` keeps its KV in a window ring (kv/window_ring.h): a windowed layer with KV of
// its own, under WindowKv::kRing.
bool KvInWindowRing(const LayerConfig& layer, WindowKv window_kv);
// The page pool shape of a stage of `layers`: its layers with KV of their own in the pool (all
// but the ringed windowed ones), each with its kv heads and head_dim (one shape for all when
// they agree).
PagePoolConfig StageKvPoolConfig(const ModelConfig& config, LayerRange layers, int n_pages,
                                 int page_tokens, KvType kv_type, WindowKv window_kv);
// The stage's layers whose KV is in window rings, in layer order (none under kFull).
std::vector<WindowRingLayer> StageWindowRingLayers(const ModelConfig& config, LayerRange layers,
                                                   WindowKv window_kv);
// Bytes of one sequence's window rings in a stage of `layers` (0: none).
size_t StageWindowRingBytes(const ModelConfig& config, LayerRange layers, const KvGeometry& kv);
// Bytes of one sequence's state in a stage of `layers`: its recurrent layers' state, then its
// window rings' (what ForwardPass::ExportState copies; 0: the stage keeps none).
size_t StageStateBytes(const ModelConfig& config, LayerRange layers, KvType kv_type,
                       WindowKv window_kv);
// Whether every KV layer's rows can be stored as `kv_type` (CheckKvRows of its head_dim).
Status CheckModelKvRows(const ModelConfig& config, KvType kv_type);

class Model {
 public:
  // Errors: unknown architecture, bad metadata, missing/mis-shaped tensors, a range outside
  // [0, n_layers] or empty, no memory for the panels (ResourceExhausted).
  // repack: repack the matrices into panels where this CPU has panel kernels
  // (model/panel_repack.h), as every binding that computes must, so that all of them
  // compute alike; false only for a binding that never computes (the config and tokenizer
  // of a split whose stages load their own layers): every view stays in the file.
  // repack_threads: the threads that will compute with the stage, which then write (and
  // first touch) its panels; nullptr: a pool of every core for the duration of the load.
  static Result<std::unique_ptr<Model>> Load(std::shared_ptr<const GgufFile> file,
                                             LayerRange range = kAllLayers, bool repack = true,
                                             ThreadPool* repack_threads = nullptr);

  const ModelConfig& config() const { return config_; }
  const StageWeights& weights() const { return weights_; }
  LayerRange layers() const { return weights_.layers; }
  bool is_first_stage() const { return weights_.has_embedding; }
  bool is_last_stage() const { return weights_.has_head; }
  const GgufFile& file() const { return *file_; }
  const PanelStore& panels() const { return panels_; }
  // The file, shared: what a stage that binds another layer range of it keeps alive.
  const std::shared_ptr<const GgufFile>& shared_file() const { return file_; }

  // Which of the stage's layers with KV of their own holds stage-local layer `layer_idx`'s KV
  // (its own, or the one it shares), or -1 for a layer without KV (a recurrent layer). The
  // forward pass places each of them in the page pool or a window ring.
  int kv_index(int layer_idx) const { return kv_index_[size_t(layer_idx)]; }
  // Index of stage-local layer `layer_idx` among the stage's recurrent layers, or -1.
  int recurrent_index(int layer_idx) const { return recurrent_index_[size_t(layer_idx)]; }
  int n_recurrent_layers() const { return n_recurrent_layers_; }

  // The page pool shape this stage needs (its layers with KV in the pool, kv heads, head_dim).
  PagePoolConfig KvPoolConfig(int n_pages, int page_tokens = kDefaultPageTokens,
                              KvType kv_type = KvType::kF32,
                              WindowKv window_kv = WindowKv::kRing) const;
  PagePoolConfig KvPoolConfig(const KvGeometry& kv) const {
    return KvPoolConfig(kv.frames(), kv.page_tokens, kv.kv_type, kv.window_kv);
  }

 private:
  Model() = default;
  std::shared_ptr<const GgufFile> file_;
  ModelConfig config_;
  StageWeights weights_;
  PanelStore panels_;                 // what repacked views point into
  std::vector<int> kv_index_;         // [stage-local layer]
  std::vector<int> recurrent_index_;  // [stage-local layer]
  int n_recurrent_layers_ = 0;
};

}  // namespace shardlm
