// PerLayerInputs: gemma4's per-layer inputs and their projection (see per_layer_inputs.h).
#include "model/per_layer_inputs.h"

#include <cmath>

#include "model/ops.h"

namespace shardlm {

void PerLayerInputs::Resize(const ModelConfig& config, int max_batch_tokens, int n_threads) {
  const size_t all_layers = size_t(config.n_layers) * config.n_embd_per_layer;
  inputs_.resize(size_t(max_batch_tokens) * all_layers);
  token_rows_.resize(size_t(n_threads) * all_layers);
}

void PerLayerInputs::Compute(const StageWeights& w, const ModelConfig& config,
                             std::span<const BatchEntry> batch, const float* embedded,
                             float* embed_rows, ThreadPool& threads, MatMulScratch& scratch) {
  const size_t n_embd = config.n_embd;
  const size_t width = config.n_embd_per_layer;
  const size_t all_layers = size_t(config.n_layers) * width;
  if (embedded == nullptr) {
    threads.ParallelFor(batch.size(), [&](size_t t, size_t) {
      float* x = &embed_rows[t * n_embd];
      DequantizeRow(w.token_embd, batch[t].token, x);
      for (size_t i = 0; i < n_embd; ++i) x[i] *= config.embedding_scale;
    });
    embedded = embed_rows;
  }
  MatMul(w.per_layer_model_proj, embedded, int64_t(batch.size()), inputs_.data(), threads, scratch);
  const float proj_scale = 1.0f / sqrtf(float(n_embd));
  const float token_scale = sqrtf(float(width));
  const float input_scale = 1.0f / sqrtf(2.0f);
  threads.ParallelFor(batch.size(), [&](size_t t, size_t worker) {
    float* inputs = &inputs_[t * all_layers];
    float* token_row = &token_rows_[worker * all_layers];
    DequantizeRow(w.per_layer_token_embd, batch[t].token, token_row);
    for (size_t i = 0; i < all_layers; ++i) inputs[i] *= proj_scale;
    for (size_t l = 0; l < size_t(config.n_layers); ++l) {
      float* slice = inputs + l * width;
      RmsNorm(slice, w.per_layer_proj_norm.data, int64_t(width), config.rms_eps, slice);
    }
    for (size_t i = 0; i < all_layers; ++i) {
      inputs[i] = (inputs[i] + token_row[i] * token_scale) * input_scale;
    }
  });
}

void PerLayerInputs::Project(const LayerWeights& w, const ModelConfig& config, int model_layer,
                             const float* x, int n_tokens, float* gate, float* proj,
                             ThreadPool& threads, MatMulScratch& scratch) const {
  const size_t width = config.n_embd_per_layer;
  const size_t all_layers = size_t(config.n_layers) * width;
  MatMul(w.per_layer_inp_gate, x, n_tokens, gate, threads, scratch);
  threads.ParallelFor(n_tokens, [&](size_t t, size_t) {
    float* row = &gate[t * width];
    GeGlu(row, &inputs_[t * all_layers + size_t(model_layer) * width], int64_t(width), row);
  });
  MatMul(w.per_layer_proj, gate, n_tokens, proj, threads, scratch);
}

}  // namespace shardlm
