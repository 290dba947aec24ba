// The tensors of a model, listed once: ForEachStageTensor visits every tensor a stage of
// layers reads (name, role, shape, required or optional) as the config lays them out.
//
// Goals: one list for every place that names tensors: binding (weights.h), the panel repack
// (panel_repack.h) and `gguf synth`, which writes a random model of an architecture, so a
// model that binds is a model synth can write and the other way round. The list is keyed on
// the per-layer flags of LayerConfig (a norm the layer applies is a tensor it lists), never
// on the architecture's name. Visited in the order llama.cpp's converters write a GGUF: the
// embedding, the layers in order (each: attention norm and projections, q/k norms, the
// attention output's norm, FFN norm and projections, the FFN output's norm), the output norm
// and the head.
// Non-goals: checking a file's tensors (BindStageWeights does that with the shapes given
// here), tensors of architectures not supported yet.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace shardlm {

// What a tensor is to the layer (or the model) that holds it.
enum class TensorRole {
  kTokenEmbd = 0,  // [n_vocab][n_embd], the rows tokens embed to (and the head when tied)
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kAttnQNorm,
  kAttnKNorm,
  kAttnPostNorm,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kFfnPostNorm,
  // Gated DeltaNet (qwen35's recurrent layers):
  kAttnQkv,    // [conv_channels][n_embd]: q | k | v before the conv
  kAttnGate,   // [value_dim][n_embd]: z, the output gate
  kSsmConv1d,  // [conv_channels][conv_kernel] float32, bound flat
  kSsmDtBias,  // [n_v_heads]
  kSsmA,       // [n_v_heads]: −exp(A_log), the decay rate
  kSsmBeta,    // [n_v_heads][n_embd]
  kSsmAlpha,   // [n_v_heads][n_embd]
  kSsmNorm,    // [head_dim_v]
  kSsmOut,     // [n_embd][value_dim]
  // gemma4's per-layer inputs (ModelConfig::n_embd_per_layer = P, L layers):
  kPerLayerTokenEmbd,  // [n_vocab][L × P]: each token's inputs of every layer
  kPerLayerModelProj,  // [L × P][n_embd]: from the scaled token embedding
  kPerLayerProjNorm,   // [P]
  kPerLayerInpGate,    // [P][n_embd], per layer
  kPerLayerProj,       // [n_embd][P], per layer
  kPerLayerPostNorm,   // [n_embd], per layer
  kLayerOutputScale,   // [1], per layer
  kOutputNorm,
  kOutput,     // the LM head
  kRopeFreqs,  // rope frequency divisors (llama 3.x), optional
  kSentinel
};

struct TensorSpec {
  std::string name;  // "blk.3.attn_q.weight"
  TensorRole role = TensorRole::kSentinel;
  int layer = -1;  // the model layer it belongs to, -1 for the model-wide tensors
  // GGUF shape: {n} for a float32 vector, {cols, rows} for a matrix (ne0 = input).
  std::vector<int64_t> ne;
  bool required = true;  // an optional tensor is bound when the file has it
  // Float32 values bound as one flat array whatever the dims (a conv kernel): never
  // quantized, never repacked.
  bool flat = false;

  bool matrix() const { return ne.size() == 2 && !flat; }
};

// Calls fn for every tensor a stage of layers `layers` reads: the embedding on the first
// stage (and on the last when the head is tied to it; on every stage where layers take
// per-layer inputs, which are made from it), the tensors of each of its layers,
// and the output norm, the head (unless tied) on the last stage; rope frequencies on every
// stage (optional). layers must be a non-empty part of [0, config.n_layers).
void ForEachStageTensor(const ModelConfig& config, LayerRange layers,
                        const std::function<void(const TensorSpec&)>& fn);

}  // namespace shardlm
