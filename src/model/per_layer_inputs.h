// Per-layer inputs: gemma4's second input of every layer, made from the token itself.
//
// For each token, every model layer l gets n_embd_per_layer values:
//   inputs[l] = (RMSNorm(per_layer_model_proj · e / sqrt(n_embd))[l] · per_layer_proj_norm
//                + per_layer_token_embd[token][l] · sqrt(n_embd_per_layer)) / sqrt(2)
// with e the token's scaled embedding, and after its FFN a layer adds
//   post_norm(proj · (GELU(inp_gate · x) ⊙ inputs[l]))
// to the residual, in llama.cpp's order of operations (GELU is ggml's fp16 table, GeGlu).
//
// Goals: every stage computes the inputs of its layers from the token ids alone (a later
// stage embeds the tokens again: its hidden rows from stage 0 are already mixed), so a split
// gives the bits of the whole model. Non-goals: the residual add and its norm (the forward
// pass's, shared with the other sublayers).
//
// Thread safety: one call at a time; uses the ThreadPool internally.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/batch.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tensor/matmul.h"
#include "tensor/thread_pool.h"

namespace shardlm {

class PerLayerInputs {
 public:
  // Buffers for batches of up to max_batch_tokens rows on n_threads workers.
  void Resize(const ModelConfig& config, int max_batch_tokens, int n_threads);

  // The inputs of every model layer for each token of the batch. embedded: the batch's scaled
  // token embeddings [batch][n_embd] (stage 0's), or null: the tokens are embedded again into
  // embed_rows ([batch][n_embd] scratch).
  void Compute(const StageWeights& w, const ModelConfig& config, std::span<const BatchEntry> batch,
               const float* embedded, float* embed_rows, ThreadPool& threads,
               MatMulScratch& scratch);

  // proj rows [n_tokens][n_embd] = per_layer_proj · (GELU(inp_gate · x) ⊙ inputs[model_layer]),
  // before the layer's post norm; gate ([n_tokens][n_embd_per_layer]) is scratch.
  void Project(const LayerWeights& w, const ModelConfig& config, int model_layer, const float* x,
               int n_tokens, float* gate, float* proj, ThreadPool& threads,
               MatMulScratch& scratch) const;

 private:
  std::vector<float> inputs_;      // [B][n_layers × n_embd_per_layer]
  std::vector<float> token_rows_;  // [n_threads][n_layers × n_embd_per_layer]
};

}  // namespace shardlm
