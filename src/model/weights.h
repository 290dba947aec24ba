// StageWeights: the tensors of one stage (a layer range) bound by name to typed views.
//
// Goals: every tensor a stage needs is found, its shape and type checked (the type must be
// computable: GetTypeTraits != nullptr), and viewed in place inside the mmapped GGUF (no
// copy; a stage touches only its own layers' bytes). A missing tensor, a wrong shape or an
// uncomputable type is a Status naming the tensor and what was expected.
// Which tensors a stage binds, with their shapes, is the one list of tensor_specs.h.
// Non-goals: repacking (panel_repack.h), tensors of architectures not supported yet.
//
// Thread safety: immutable after Bind. Lifetime: views point into the GgufFile, which must
// outlive the StageWeights (Model keeps it alive through a shared_ptr).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "model/tensor_specs.h"
#include "tensor/matmul.h"

namespace shardlm {

// A 1-D float32 norm weight: [n] floats inside the file.
struct NormWeight {
  const float* data = nullptr;
  int64_t n = 0;
};

// A layer's tensors; a norm its LayerConfig does not apply stays empty (data == nullptr).
struct LayerWeights {
  NormWeight attn_norm;       // [n_embd]
  WeightView attn_q;          // [q_dim rows][n_embd cols]
  WeightView attn_k;          // [k_dim][n_embd]
  WeightView attn_v;          // [v_dim][n_embd]
  WeightView attn_output;     // [n_embd][attn_out_dim]
  NormWeight attn_q_norm;     // [head_dim_k], qk_norm only
  NormWeight attn_k_norm;     // [head_dim_k], qk_norm only
  NormWeight attn_post_norm;  // [n_embd], attn_post_norm only
  NormWeight ffn_norm;        // [n_embd]
  WeightView ffn_gate;        // [n_ff][n_embd]
  WeightView ffn_up;          // [n_ff][n_embd]
  WeightView ffn_down;        // [n_embd][n_ff]
  NormWeight ffn_post_norm;   // [n_embd], ffn_post_norm only
  // Gated DeltaNet layers only (tensor_specs.h names the shapes):
  WeightView attn_qkv;
  WeightView attn_gate;
  NormWeight ssm_conv1d;  // [conv_channels][conv_kernel], flat
  NormWeight ssm_dt_bias;
  NormWeight ssm_a;
  WeightView ssm_beta;
  WeightView ssm_alpha;
  NormWeight ssm_norm;
  WeightView ssm_out;
  // Per-layer inputs and output scale (gemma4):
  WeightView per_layer_inp_gate;  // [n_embd_per_layer][n_embd]
  WeightView per_layer_proj;      // [n_embd][n_embd_per_layer]
  NormWeight per_layer_post_norm;
  NormWeight layer_output_scale;  // [1]
};

struct StageWeights {
  LayerRange layers;
  bool has_embedding = false;  // stage 0
  bool has_head = false;       // last stage
  // [n_vocab][n_embd], stage 0 (also the head when tied; on every stage of a model with
  // per-layer inputs, which are made from the scaled embedding)
  WeightView token_embd;
  WeightView per_layer_token_embd;   // gemma4: [n_vocab][n_layers × n_embd_per_layer]
  WeightView per_layer_model_proj;   // gemma4: [n_layers × n_embd_per_layer][n_embd]
  NormWeight per_layer_proj_norm;    // gemma4: [n_embd_per_layer]
  NormWeight output_norm;            // [n_embd], last stage
  WeightView output;                 // [n_vocab][n_embd], last stage (token_embd when tied)
  NormWeight rope_freqs;             // [n_rot / 2] rope frequency divisors, optional (llama 3.x)
  std::vector<LayerWeights> blocks;  // [layers.size()], index = layer - layers.begin
};

// Where a stage holds the tensor of `role` (of model layer `layer` for a layer's tensor):
// exactly one of the two is set, or neither when the stage does not hold that layer.
struct TensorSlot {
  WeightView* matrix = nullptr;
  NormWeight* vector = nullptr;
};
TensorSlot SlotOf(StageWeights& weights, TensorRole role, int layer);

// Binds the tensors of `range` (validated against config.n_layers).
Result<StageWeights> BindStageWeights(const GgufFile& file, const ModelConfig& config,
                                      LayerRange range);

// The bytes of every tensor the stage binds, each once (a tied head is the embedding), in
// address order: what the stage maps and touches (model/prefault.h reads them); a matrix
// repacked into panels is its panels.
std::vector<std::span<const uint8_t>> StageTensorBytes(const StageWeights& weights);
// The file's bytes of those tensors: the stage's share of the model (panels hold Q4_K in
// 2.8% more).
size_t StageWeightBytes(const StageWeights& weights);

}  // namespace shardlm
