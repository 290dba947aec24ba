// ModelConfig: the shape and numerics of a decoder-only model, read from GGUF metadata, with
// one LayerConfig per layer.
//
// Goals: one struct for every supported architecture. Architectures differ by flags
// (`rope_type`, `tied_output`, and per layer which norms it applies, how it attends, which
// KV it reads), never by a subclass per architecture: the layer loop and the tensor list
// (model/tensor_specs.h) are shared, and both read the same flags, so a flag that adds a
// step adds its tensor in the same change. Per layer because architectures mix layers: one
// model may alternate windowed and full attention, or norm the attention and FFN outputs
// too. Errors name the key.
// Non-goals: tokenizer metadata (tokenizer/); the layer kinds of architectures not
// supported yet (shared KV): each comes with the architecture that exercises it.
//
// Keys read (`<arch>` = general.architecture): <arch>.block_count, .embedding_length,
// .feed_forward_length, .attention.head_count, .attention.head_count_kv (default head_count),
// .attention.key_length / .value_length (default n_embd / n_head), .rope.dimension_count
// (default head_dim), .rope.freq_base (default 10000), .attention.layer_norm_rms_epsilon,
// .context_length, .rope.scaling.type (none | linear) and .rope.scaling.factor; gemma3 also
// .attention.sliding_window and .final_logit_softcapping; qwen35 also .full_attention_interval
// (default 4: every fourth layer attends, the others are gated DeltaNet) and .ssm.conv_kernel,
// .ssm.state_size, .ssm.group_count, .ssm.time_step_rank, .ssm.inner_size; n_vocab = rows of
// token_embd.weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"

namespace shardlm {

enum class Arch { kLlama = 0, kQwen3 = 1, kGemma3 = 2, kQwen35 = 3, kSentinel = 4 };
const char* ArchName(Arch arch);

// How rotary embedding pairs dimensions inside a head (llama.cpp's rope modes).
enum class RopeType {
  kNorm = 0,  // adjacent pairs (2i, 2i+1): llama
  kNeox = 1,  // halves (i, i + n_rot/2): qwen3
  kSentinel = 2
};

// How a layer's queries see earlier positions.
enum class AttentionKind {
  kFull = 0,     // every position of the sequence up to the query's own
  kSliding = 1,  // the last `window` positions up to the query's own (itself included)
  kSentinel = 2
};

// What mixes a layer's positions: attention over its KV pages, or a recurrence whose state
// per sequence is fixed-size (qwen35's gated DeltaNet: no KV, a conv and a delta-rule state).
enum class LayerMixer { kAttention = 0, kDeltaNet = 1, kSentinel = 2 };

// The shape of a gated DeltaNet layer (qwen35: ssm.* metadata): q and k heads of head_dim_k,
// v heads of head_dim_v (each v head reads q/k head `v_head % n_k_heads`), a causal depthwise
// conv of conv_kernel taps over the q|k|v channels.
struct DeltaNetShape {
  int conv_kernel = 0;
  int n_k_heads = 0;
  int n_v_heads = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;

  int key_dim() const { return n_k_heads * head_dim_k; }
  int value_dim() const { return n_v_heads * head_dim_v; }
  int conv_channels() const { return 2 * key_dim() + value_dim(); }
  // Per sequence: the last conv_kernel − 1 inputs of every channel, and one
  // [head_dim_v][head_dim_k] state per v head.
  int conv_state_floats() const { return (conv_kernel - 1) * conv_channels(); }
  int ssm_state_floats() const { return n_v_heads * head_dim_v * head_dim_k; }
};

// The gated activation of the FFN: down(act(gate·h) ⊙ up·h).
enum class FfnActivation {
  kSilu = 0,  // SwiGLU: llama, qwen3
  kGelu = 1,  // GeGLU with tanh GELU, as ggml computes it (an fp16 table): gemma
  kSentinel = 2
};

// One decoder layer: its attention shape and the steps it takes. Every field is the layer's
// own; the forward pass, the tensor list and the KV cache read it per layer.
struct LayerConfig {
  LayerMixer mixer = LayerMixer::kAttention;  // kDeltaNet: the attention fields are unused
  AttentionKind attention = AttentionKind::kFull;
  int window = 0;  // positions a kSliding layer sees (its own included); 0 for kFull
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;  // of q and k (key_length)
  int head_dim_v = 0;  // of v and of each head's attention output (value_length)
  // The RMS norms the layer applies, each with its weight tensor ("blk.N.<name>.weight"):
  bool attn_norm = true;  // attn_norm: the input of q, k and v
  bool qk_norm = false;   // attn_q_norm, attn_k_norm: per head, before rope (qwen3)
  bool ffn_norm = true;   // ffn_norm: the input of the FFN
  // The FFN input norm's tensor name: qwen35 names it post_attention_norm.
  const char* ffn_norm_name = "ffn_norm";
  // attn_q gives per head [q | gate] (2 × q_dim rows); the attention output is multiplied by
  // sigmoid(gate) before attn_output (qwen35's full-attention layers).
  bool attn_output_gate = false;
  // Norms of the sublayer outputs before they join the residual (gemma3):
  bool attn_post_norm = false;  // post_attention_norm: of attn_output's result
  bool ffn_post_norm = false;   // post_ffw_norm: of ffn_down's result
  // Rope of this layer: angles position · freq_scale · base^(−2i/n_rot) (gemma3's windowed
  // and global layers use different bases; linear rope scaling reaches only global ones).
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  // Attention scaling: q is multiplied by q_scale after rope (gemma3's query_pre_attn_scalar,
  // as llama.cpp does it), and the scores by kq_scale inside the softmax (1/sqrt(head_dim)
  // for llama and qwen3). Where the scale goes changes the rounding, so it follows llama.cpp.
  float q_scale = 1.0f;
  float kq_scale = 1.0f;
  // The model layer whose K/V this layer writes and attends: its own index in every
  // architecture so far (a model that shares an earlier layer's KV points at that layer).
  int kv_layer = 0;

  bool has_kv() const { return mixer == LayerMixer::kAttention; }
  int q_dim() const { return n_head * head_dim_k; }         // columns of q
  int k_dim() const { return n_head_kv * head_dim_k; }      // columns of k
  int v_dim() const { return n_head_kv * head_dim_v; }      // columns of v
  int attn_out_dim() const { return n_head * head_dim_v; }  // input of attn_output
  int gqa_group() const { return n_head / n_head_kv; }      // q heads per kv head
};

struct ModelConfig {
  Arch arch = Arch::kSentinel;
  int n_layers = 0;
  int n_embd = 0;
  // The attention shape the metadata gives; every layer's is the same today, and n_head_kv
  // and head_dim are the KV cache's row shape (the page pool's, for every layer).
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // key_length (== value_length; other shapes are Unsupported)
  int n_ff = 0;
  int n_vocab = 0;
  int n_rot = 0;  // rotated dims per head (rope.dimension_count), even, <= head_dim
  RopeType rope_type = RopeType::kNorm;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = false;  // no output.weight: the LM head is token_embd
  int context_length = 0;
  // Linear rope scaling (rope.scaling.type linear): 1 / rope.scaling.factor, else 1.
  float rope_freq_scale = 1.0f;
  int sliding_window = 0;  // attention.sliding_window: the window of kSliding layers (0: none)
  // Token embeddings are multiplied by this (gemma: sqrt(n_embd)); 1 for the others.
  float embedding_scale = 1.0f;
  FfnActivation ffn_activation = FfnActivation::kSilu;
  // logits = cap · tanh(logits / cap) when > 0 (final_logit_softcapping).
  float final_logit_softcap = 0.0f;
  // qwen35: layer i attends iff (i + 1) % full_attention_interval == 0, the others are
  // gated DeltaNet of shape delta_net (0 and zero for the other architectures).
  int full_attention_interval = 0;
  DeltaNetShape delta_net;
  std::vector<LayerConfig> layers;  // [n_layers]

  // Layers of [begin, end) with KV pages of their own (attention layers that write KV).
  int KvLayers(int begin, int end) const;
  bool HasDeltaNet(int begin, int end) const;
  // The widest window of the model's windowed layers (0: none).
  int WidestWindow() const;
  // Bytes of one sequence's recurrent state in layers [begin, end) (RecurrentStates' slot).
  size_t RecurrentStateBytes(int begin, int end) const;

  int q_dim() const { return n_head * head_dim; }       // columns of q
  int kv_dim() const { return n_head_kv * head_dim; }   // columns of k and v
  int gqa_group() const { return n_head / n_head_kv; }  // q heads per kv head
};

// Half-open range of model layers a stage computes: [begin, end).
struct LayerRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};

// Reads and validates the config (positive sizes, n_head % n_head_kv == 0, ...). An
// architecture other than llama/qwen3/gemma3/qwen35 is Unsupported, naming it.
Result<ModelConfig> ReadModelConfig(const GgufFile& file);

// Fills config.layers from the model-wide fields (arch, n_layers, n_head, n_head_kv,
// head_dim, rope and window settings) as the architecture lays its layers out; also what
// `gguf synth` writes a model of an architecture from.
void SetLayerConfigs(ModelConfig& config);

}  // namespace shardlm
