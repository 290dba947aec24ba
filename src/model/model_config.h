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
// supported yet (mixture of experts): each comes with the architecture that exercises it.
//
// Keys read (`<arch>` = general.architecture): <arch>.block_count, .embedding_length,
// .feed_forward_length, .attention.head_count, .attention.head_count_kv (default head_count),
// .attention.key_length / .value_length (default n_embd / n_head), .rope.dimension_count
// (default head_dim), .rope.freq_base (default 10000), .attention.layer_norm_rms_epsilon,
// .context_length, .rope.scaling.type (none | linear) and .rope.scaling.factor; gemma3 also
// .attention.sliding_window and .final_logit_softcapping; qwen35 also .full_attention_interval
// (default 4: every fourth layer attends, the others are gated DeltaNet) and .ssm.conv_kernel,
// .ssm.state_size, .ssm.group_count, .ssm.time_step_rank, .ssm.inner_size; gemma4 also
// .attention.sliding_window_pattern (one bool per layer), .attention.key_length_swa,
// .rope.freq_base_swa, .rope.dimension_count_swa, .attention.shared_kv_layers and
// .embedding_length_per_layer_input. feed_forward_length, head_count and head_count_kv may be
// one value per layer (arrays). n_vocab = rows of token_embd.weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"

namespace shardlm {

enum class Arch { kLlama = 0, kQwen3 = 1, kGemma3 = 2, kQwen35 = 3, kGemma4 = 4, kSentinel = 5 };
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
  int n_ff = 0;        // the FFN's hidden width
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
  // gemma4: v is RMS-normed per head without a weight; a layer without attn_v takes its v
  // from attn_k's rows (before k's norm and rope).
  bool v_norm = false;
  bool v_from_k = false;
  // gemma4's per-layer input (ModelConfig::n_embd_per_layer): after the FFN,
  // x += post_norm(proj · (GELU(inp_gate · x) ⊙ the layer's input slice)).
  bool per_layer_input = false;
  // gemma4: the layer's output is multiplied by one scalar (layer_output_scale).
  bool output_scale = false;
  // Rope of this layer: the first n_rot dims of each head rotate, by angles
  // position · freq_scale · base^(−2i/n_rot), divided by rope_freqs where the layer uses them
  // (gemma3's windowed and global layers use different bases; linear rope scaling reaches only
  // global ones; gemma4's windowed layers rotate fewer dims and skip rope_freqs).
  int n_rot = 0;
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  bool rope_freqs = true;
  // Attention scaling: q is multiplied by q_scale after rope (gemma3's query_pre_attn_scalar,
  // as llama.cpp does it), and the scores by kq_scale inside the softmax (1/sqrt(head_dim)
  // for llama and qwen3). Where the scale goes changes the rounding, so it follows llama.cpp.
  float q_scale = 1.0f;
  float kq_scale = 1.0f;
  // The model layer whose K/V this layer attends: its own index, where it also writes them,
  // or (shared_kv) an earlier layer's, whose KV it reads and never writes (gemma4's last
  // layers: no attn_k / attn_v of their own).
  int kv_layer = 0;
  bool shared_kv = false;

  bool attends() const { return mixer == LayerMixer::kAttention; }
  // Keeps KV of its own in the page pool.
  bool has_kv() const { return attends() && !shared_kv; }
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
  // The widest attention shape of the layers (most heads, most kv heads, the largest
  // head_dim: key_length == value_length, other shapes are Unsupported); each layer has its
  // own (LayerConfig), and the page pool stores each KV layer's rows in its own shape.
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;  // the widest FFN
  int n_vocab = 0;
  int n_rot = 0;  // the most rotated dims per head (rope.dimension_count), even, <= head_dim
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
  // gemma4's per-layer inputs: n_embd_per_layer values per token and layer, made from the
  // token (per_layer_token_embd) and its scaled embedding (per_layer_model_proj); 0: none.
  int n_embd_per_layer = 0;
  std::vector<LayerConfig> layers;  // [n_layers]

  // Whether [begin, end) holds a gated DeltaNet layer.
  bool HasDeltaNet(int begin, int end) const;
  // The widest window of the model's windowed layers (0: none).
  int WidestWindow() const;
  // Bytes of one sequence's recurrent state in layers [begin, end) (RecurrentStates' slot).
  size_t RecurrentStateBytes(int begin, int end) const;

  // Where layer `layer` reads its KV from: itself, or the source of a shared-KV layer. A
  // stage that holds a shared-KV layer must hold its source too.
  int KvSource(int layer) const { return layers[size_t(layer)].kv_layer; }
  // Whether a stage boundary before `layer` separates a shared-KV layer from its source.
  bool SplitsSharedKv(int layer) const;
};

// Half-open range of model layers a stage computes: [begin, end).
struct LayerRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};

// Reads and validates the config (positive sizes, n_head % n_head_kv == 0, ...). An
// architecture other than llama/qwen3/gemma3/qwen35/gemma4 is Unsupported, naming it.
Result<ModelConfig> ReadModelConfig(const GgufFile& file);

// The per-layer values of an architecture whose layers differ (gemma4): which layers are
// windowed, and the shape of the windowed ones. Empty vectors: every layer the model-wide one.
struct LayerPattern {
  std::vector<int> n_ff;       // [n_layers]
  std::vector<int> n_head;     // [n_layers]
  std::vector<int> n_head_kv;  // [n_layers]
  std::vector<bool> sliding;   // [n_layers]
  std::vector<bool> v_from_k;  // [n_layers]
  int head_dim_swa = 0;        // 0: head_dim
  int n_rot_swa = 0;           // 0: n_rot
  float rope_base_swa = 10000.0f;
  int shared_kv_layers = 0;  // the last layers that read an earlier layer's KV
};

// Fills config.layers from the model-wide fields (arch, n_layers, n_head, n_head_kv,
// head_dim, rope and window settings) and the pattern, as the architecture lays its layers
// out; also what `gguf synth` writes a model of an architecture from.
void SetLayerConfigs(ModelConfig& config, const LayerPattern& pattern = {});

}  // namespace shardlm
