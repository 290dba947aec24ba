// ModelConfig: the shape and numerics of a decoder-only model, read from GGUF metadata.
//
// Goals: one struct for every supported architecture; architectures differ by flags
// (`rope_type`, `use_qk_norm`, `tied_output`), never by subclasses (STYLE 26), so the layer
// loop and the tensor list are shared and keyed on the same flags. Errors name the key.
// Non-goals: tokenizer metadata (tokenizer/), hybrid/sliding-window flags (added with
// qwen35/gemma3).
//
// Keys read (`<arch>` = general.architecture): <arch>.block_count, .embedding_length,
// .feed_forward_length, .attention.head_count, .attention.head_count_kv (default head_count),
// .attention.key_length / .value_length (default n_embd / n_head), .rope.dimension_count
// (default head_dim), .rope.freq_base (default 10000), .attention.layer_norm_rms_epsilon,
// .context_length; n_vocab = rows of token_embd.weight.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/gguf_file.h"

namespace shardlm {

enum class Arch { kLlama = 0, kQwen3 = 1, kSentinel = 2 };
const char* ArchName(Arch arch);

// How rotary embedding pairs dimensions inside a head (llama.cpp's rope modes).
enum class RopeType {
  kNorm = 0,  // adjacent pairs (2i, 2i+1): llama
  kNeox = 1,  // halves (i, i + n_rot/2): qwen3
  kSentinel = 2
};

struct ModelConfig {
  Arch arch = Arch::kSentinel;
  int n_layers = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // key_length (== value_length; other shapes are Unsupported)
  int n_ff = 0;
  int n_vocab = 0;
  int n_rot = 0;  // rotated dims per head (rope.dimension_count), even, <= head_dim
  RopeType rope_type = RopeType::kNorm;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool use_qk_norm = false;  // per-head RMS norm of q and k before rope (qwen3)
  bool tied_output = false;  // no output.weight: the LM head is token_embd
  int context_length = 0;

  int q_dim() const { return n_head * head_dim; }       // columns of q
  int kv_dim() const { return n_head_kv * head_dim; }   // columns of k and v
  int gqa_group() const { return n_head / n_head_kv; }  // q heads per kv head
};

// Reads and validates the config (positive sizes, n_head % n_head_kv == 0, ...). An
// architecture other than llama/qwen3 is Unsupported, naming it.
Result<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace shardlm
