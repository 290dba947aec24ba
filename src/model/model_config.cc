// ReadModelConfig: GGUF metadata → ModelConfig, with defaults as llama.cpp applies them.
#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace shardlm {
namespace {

// Reads `<arch>.<suffix>` as a positive int, or `fallback` when absent (fallback < 0:
// required).
Result<int> ReadDim(const GgufFile& file, const std::string& arch, const char* suffix,
                    int64_t fallback) {
  const std::string key = arch + "." + suffix;
  uint64_t value = 0;
  if (fallback < 0) {
    SHARDLM_ASSIGN_OR_RETURN(value, file.GetUint(key));
  } else {
    SHARDLM_ASSIGN_OR_RETURN(value, file.GetUintOr(key, uint64_t(fallback)));
  }
  // Model dimensions beyond this are hostile metadata, not a model (2^24 = 16M).
  constexpr uint64_t kMaxDim = uint64_t{1} << 24;
  if (value == 0 || value > kMaxDim) {
    return InvalidData("metadata '{}' = {} is out of range (1..{})", key, value, kMaxDim);
  }
  return int(value);
}

Result<Arch> ParseArch(std::string_view name) {
  if (name == "llama") return Arch::kLlama;
  if (name == "qwen3") return Arch::kQwen3;
  if (name == "gemma3") return Arch::kGemma3;
  if (name == "qwen35") return Arch::kQwen35;
  if (name == "gemma4") return Arch::kGemma4;
  return Unsupported(
      "architecture '{}' is not supported (supported: llama, qwen3, gemma3, qwen35, gemma4)", name);
}

// The model-wide flags that distinguish the architectures (after n_embd is read);
// SetLayerConfigs sets the per-layer ones.
void ApplyArchFlags(ModelConfig& config) {
  config.rope_type = config.arch == Arch::kLlama ? RopeType::kNorm : RopeType::kNeox;
  if (config.arch == Arch::kGemma3 || config.arch == Arch::kGemma4) {
    config.embedding_scale = sqrtf(float(config.n_embd));
    config.ffn_activation = FfnActivation::kGelu;
  }
}

// `<arch>.<suffix>` as one positive int per layer: an array of n_layers, or one value for
// every layer; `fallback` when absent (< 0: required). The most of them is the model-wide one.
Result<std::vector<int>> ReadPerLayerDims(const GgufFile& file, const std::string& arch,
                                          const char* suffix, int n_layers, int64_t fallback) {
  const std::string key = arch + "." + suffix;
  const GgufValue* value = file.Find(key);
  if (value == nullptr || value->type != GgufValueType::kArray) {
    SHARDLM_ASSIGN_OR_RETURN(int dim, ReadDim(file, arch, suffix, fallback));
    return std::vector<int>(size_t(n_layers), dim);
  }
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* array, file.GetArray(key, GgufValueType::kSentinel));
  if (array->ints.size() != size_t(n_layers)) {
    return InvalidData("metadata '{}' has {} values for {} layers", key, array->ints.size(),
                       n_layers);
  }
  std::vector<int> dims;
  for (int64_t dim : array->ints) {
    if (dim <= 0 || dim > (int64_t{1} << 24)) {
      return InvalidData("metadata '{}' holds {} (out of range 1..{})", key, dim, int64_t{1} << 24);
    }
    dims.push_back(int(dim));
  }
  return dims;
}

int Widest(const std::vector<int>& dims) { return *std::max_element(dims.begin(), dims.end()); }

// A head shape of keys and values: value_length must equal key_length, within the attention
// kernel's bound, with rope over an even number of its dims.
Status CheckHeadShape(const std::string& arch, const char* suffix, int key_length, int value_length,
                      int n_rot) {
  if (value_length != key_length) {
    return Unsupported("{}.attention.value_length{} {} != key_length{} {}", arch, suffix,
                       value_length, suffix, key_length);
  }
  // The attention kernel converts one F16 key row on the stack (attention.cc).
  constexpr int kMaxHeadDim = 512;
  if (key_length > kMaxHeadDim) {
    return Unsupported("{}.attention.key_length{} {} exceeds {}", arch, suffix, key_length,
                       kMaxHeadDim);
  }
  if (n_rot % 2 != 0 || n_rot > key_length) {
    return InvalidData("{}.rope.dimension_count{} {} must be even and <= head_dim {}", arch, suffix,
                       n_rot, key_length);
  }
  return Status::Ok();
}

Status ReadAttentionShape(const GgufFile& file, const std::string& arch, ModelConfig& config,
                          LayerPattern& pattern) {
  SHARDLM_ASSIGN_OR_RETURN(
      pattern.n_head, ReadPerLayerDims(file, arch, "attention.head_count", config.n_layers, -1));
  config.n_head = Widest(pattern.n_head);
  SHARDLM_ASSIGN_OR_RETURN(
      pattern.n_head_kv,
      ReadPerLayerDims(file, arch, "attention.head_count_kv", config.n_layers, config.n_head));
  config.n_head_kv = Widest(pattern.n_head_kv);
  for (int i = 0; i < config.n_layers; ++i) {
    if (pattern.n_head[size_t(i)] % pattern.n_head_kv[size_t(i)] != 0) {
      return InvalidData("{}.attention.head_count {} is not a multiple of head_count_kv {}", arch,
                         pattern.n_head[size_t(i)], pattern.n_head_kv[size_t(i)]);
    }
  }
  SHARDLM_ASSIGN_OR_RETURN(
      config.head_dim, ReadDim(file, arch, "attention.key_length", config.n_embd / config.n_head));
  SHARDLM_ASSIGN_OR_RETURN(int value_length,
                           ReadDim(file, arch, "attention.value_length", config.head_dim));
  SHARDLM_ASSIGN_OR_RETURN(config.n_rot,
                           ReadDim(file, arch, "rope.dimension_count", config.head_dim));
  SHARDLM_TRY(CheckHeadShape(arch, "", config.head_dim, value_length, config.n_rot));
  if (config.arch != Arch::kGemma4) return Status::Ok();
  // gemma4's windowed layers have a head shape and rope of their own.
  SHARDLM_ASSIGN_OR_RETURN(pattern.head_dim_swa,
                           ReadDim(file, arch, "attention.key_length_swa", config.head_dim));
  SHARDLM_ASSIGN_OR_RETURN(int value_length_swa,
                           ReadDim(file, arch, "attention.value_length_swa", pattern.head_dim_swa));
  SHARDLM_ASSIGN_OR_RETURN(pattern.n_rot_swa,
                           ReadDim(file, arch, "rope.dimension_count_swa", pattern.head_dim_swa));
  SHARDLM_TRY(
      CheckHeadShape(arch, "_swa", pattern.head_dim_swa, value_length_swa, pattern.n_rot_swa));
  config.head_dim = std::max(config.head_dim, pattern.head_dim_swa);
  config.n_rot = std::max(config.n_rot, pattern.n_rot_swa);
  return Status::Ok();
}

Status ReadNumerics(const GgufFile& file, const std::string& arch, ModelConfig& config) {
  SHARDLM_ASSIGN_OR_RETURN(double freq_base, file.GetFloatOr(arch + ".rope.freq_base", 10000.0));
  SHARDLM_ASSIGN_OR_RETURN(double eps,
                           file.GetFloatOr(arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  if (!(freq_base > 0) || !(eps > 0 && eps < 1)) {
    return InvalidData("{}.rope.freq_base {} / layer_norm_rms_epsilon {} out of range", arch,
                       freq_base, eps);
  }
  config.rope_freq_base = float(freq_base);
  config.rms_eps = float(eps);
  const auto* scaling = file.Find(arch + ".rope.scaling.type");
  if (scaling != nullptr) {
    SHARDLM_ASSIGN_OR_RETURN(std::string_view type, file.GetString(arch + ".rope.scaling.type"));
    if (type == "linear") {
      SHARDLM_ASSIGN_OR_RETURN(double factor, file.GetFloatOr(arch + ".rope.scaling.factor", 1.0));
      if (!(factor >= 1.0 && factor <= 1024.0)) {
        return InvalidData("{}.rope.scaling.factor {} is out of range (1..1024)", arch, factor);
      }
      config.rope_freq_scale = float(1.0 / factor);
    } else if (type != "none") {
      return Unsupported("{}.rope.scaling.type '{}' is not supported yet", arch, type);
    }
  }
  if (config.arch == Arch::kGemma3 || config.arch == Arch::kGemma4) {
    SHARDLM_ASSIGN_OR_RETURN(uint64_t window,
                             file.GetUintOr(arch + ".attention.sliding_window", 0));
    if (window > (uint64_t{1} << 24)) {
      return InvalidData("{}.attention.sliding_window {} is out of range", arch, window);
    }
    config.sliding_window = int(window);
    SHARDLM_ASSIGN_OR_RETURN(double cap, file.GetFloatOr(arch + ".final_logit_softcapping", 0.0));
    if (!(cap >= 0.0 && cap < 1e6)) {
      return InvalidData("{}.final_logit_softcapping {} is out of range", arch, cap);
    }
    config.final_logit_softcap = float(cap);
  }
  SHARDLM_ASSIGN_OR_RETURN(uint64_t context, file.GetUintOr(arch + ".context_length", 0));
  config.context_length = int(std::min<uint64_t>(context, uint64_t{1} << 30));
  return Status::Ok();
}

// qwen35's gated DeltaNet shape (ssm.*) and which layers attend.
Status ReadDeltaNetShape(const GgufFile& file, const std::string& arch, ModelConfig& config) {
  DeltaNetShape& d = config.delta_net;
  SHARDLM_ASSIGN_OR_RETURN(config.full_attention_interval,
                           ReadDim(file, arch, "full_attention_interval", 4));
  SHARDLM_ASSIGN_OR_RETURN(d.conv_kernel, ReadDim(file, arch, "ssm.conv_kernel", -1));
  SHARDLM_ASSIGN_OR_RETURN(d.head_dim_k, ReadDim(file, arch, "ssm.state_size", -1));
  SHARDLM_ASSIGN_OR_RETURN(d.n_k_heads, ReadDim(file, arch, "ssm.group_count", -1));
  SHARDLM_ASSIGN_OR_RETURN(d.n_v_heads, ReadDim(file, arch, "ssm.time_step_rank", -1));
  SHARDLM_ASSIGN_OR_RETURN(int inner, ReadDim(file, arch, "ssm.inner_size", -1));
  if (inner % d.n_v_heads != 0 || d.n_v_heads % d.n_k_heads != 0) {
    return InvalidData("{}.ssm.inner_size {} / time_step_rank {} / group_count {} do not divide",
                       arch, inner, d.n_v_heads, d.n_k_heads);
  }
  d.head_dim_v = inner / d.n_v_heads;
  // The recurrence keeps a state row of head_dim_k per value on the stack-free path; heads
  // beyond this are hostile metadata.
  constexpr int kMaxStateDim = 1024;
  if (d.head_dim_k > kMaxStateDim || d.head_dim_v > kMaxStateDim || d.conv_kernel > 64) {
    return Unsupported("{}.ssm shape (state {}, value head {}, conv {}) is too large", arch,
                       d.head_dim_k, d.head_dim_v, d.conv_kernel);
  }
  return Status::Ok();
}

// gemma4's layer pattern: which layers are windowed (one bool per layer), their rope base,
// how many last layers share KV, the per-layer inputs' width, and which layers take v from k
// (a layer without attn_v, as the file lays it out).
Status ReadGemma4Pattern(const GgufFile& file, const std::string& arch, ModelConfig& config,
                         LayerPattern& pattern) {
  const std::string key = arch + ".attention.sliding_window_pattern";
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* sliding, file.GetArray(key, GgufValueType::kBool));
  if (sliding->ints.size() != size_t(config.n_layers)) {
    return InvalidData("metadata '{}' has {} values for {} layers", key, sliding->ints.size(),
                       config.n_layers);
  }
  for (int64_t flag : sliding->ints) pattern.sliding.push_back(flag != 0);
  SHARDLM_ASSIGN_OR_RETURN(double base_swa, file.GetFloatOr(arch + ".rope.freq_base_swa", 1e4));
  if (!(base_swa > 0)) return InvalidData("{}.rope.freq_base_swa {} out of range", arch, base_swa);
  pattern.rope_base_swa = float(base_swa);
  SHARDLM_ASSIGN_OR_RETURN(uint64_t shared,
                           file.GetUintOr(arch + ".attention.shared_kv_layers", 0));
  if (shared >= uint64_t(config.n_layers)) {
    return InvalidData("{}.attention.shared_kv_layers {} leaves no layer of {} with KV", arch,
                       shared, config.n_layers);
  }
  pattern.shared_kv_layers = int(shared);
  SHARDLM_ASSIGN_OR_RETURN(uint64_t per_layer,
                           file.GetUintOr(arch + ".embedding_length_per_layer_input", 0));
  if (per_layer > (uint64_t{1} << 16)) {
    return InvalidData("{}.embedding_length_per_layer_input {} is out of range", arch, per_layer);
  }
  config.n_embd_per_layer = int(per_layer);
  for (int i = 0; i < config.n_layers; ++i) {
    const std::string prefix = "blk." + std::to_string(i) + ".";
    pattern.v_from_k.push_back(file.FindTensor(prefix + "attn_v.weight") == nullptr);
  }
  return Status::Ok();
}

Status ReadVocab(const GgufFile& file, ModelConfig& config) {
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFound("tensor 'token_embd.weight' is missing");
  if (embd->ne.size() != 2 || embd->ne[0] != config.n_embd || embd->ne[1] <= 0 ||
      embd->ne[1] > (int64_t{1} << 24)) {
    return InvalidData("tensor 'token_embd.weight' must be [n_vocab][{}]", config.n_embd);
  }
  config.n_vocab = int(embd->ne[1]);
  config.tied_output = file.FindTensor("output.weight") == nullptr;
  return Status::Ok();
}

// gemma3 as llama.cpp lays it out: five windowed layers, then a global one (the period is
// not in the file); windowed layers rope with base 10000 and no scaling; norms of q and k
// and of both sublayer outputs; q scaled by 1/sqrt(head_dim) after rope (the 27B model,
// 62 layers, by 1/sqrt(n_embd / n_head)) and no further scale in the softmax.
void SetGemma3Layer(const ModelConfig& config, int layer_idx, LayerConfig& layer) {
  constexpr int kWindowPeriod = 6;
  if (config.sliding_window > 0 && layer_idx % kWindowPeriod < kWindowPeriod - 1) {
    layer.attention = AttentionKind::kSliding;
    layer.window = config.sliding_window;
    layer.rope_base = 10000.0f;
    layer.rope_freq_scale = 1.0f;
  }
  layer.attn_post_norm = true;
  layer.ffn_post_norm = true;
  constexpr int k27bLayers = 62;
  layer.q_scale = config.n_layers == k27bLayers ? 1.0f / sqrtf(float(config.n_embd / config.n_head))
                                                : 1.0f / sqrtf(float(config.head_dim));
  layer.kq_scale = 1.0f;
}

// gemma4 as llama.cpp lays it out: the file names the windowed layers; they have their own
// head shape, rope dims and base and no rope_freqs; the global ones rotate with rope_freqs
// (proportional rope: most of their pairs are divided into standing still). q, k and v are
// RMS-normed per head (v without a weight), attention is unscaled, both sublayer outputs are
// normed, each layer adds its per-layer input and scales its output. The last
// shared_kv_layers layers read the KV of the last earlier layer of their kind.
void SetGemma4Layer(const ModelConfig& config, const LayerPattern& pattern, int layer_idx,
                    LayerConfig& layer) {
  const size_t i = size_t(layer_idx);
  if (pattern.sliding[i]) {
    layer.attention = AttentionKind::kSliding;
    layer.window = config.sliding_window;
    layer.head_dim_k = layer.head_dim_v = pattern.head_dim_swa;
    layer.n_rot = pattern.n_rot_swa;
    layer.rope_base = pattern.rope_base_swa;
    layer.rope_freqs = false;
  }
  layer.attn_post_norm = true;
  layer.ffn_post_norm = true;
  layer.v_norm = true;
  layer.v_from_k = !pattern.v_from_k.empty() && pattern.v_from_k[i];
  layer.per_layer_input = config.n_embd_per_layer > 0;
  layer.output_scale = true;
  layer.q_scale = 1.0f;
  layer.kq_scale = 1.0f;
  const int first_shared = config.n_layers - pattern.shared_kv_layers;
  if (layer_idx < first_shared) return;
  for (int source = first_shared - 1; source >= 0; --source) {
    if (pattern.sliding[size_t(source)] == pattern.sliding[i]) {
      layer.kv_layer = source;
      layer.shared_kv = true;
      layer.v_from_k = false;  // it has no k or v of its own
      return;
    }
  }
}

// qwen35 as llama.cpp lays it out: every full_attention_interval-th layer is gated full
// attention (q projection carries a per-head output gate, q/k norms, partial rope), the others
// gated DeltaNet; every layer's FFN input norm is named post_attention_norm.
void SetQwen35Layer(const ModelConfig& config, int layer_idx, LayerConfig& layer) {
  layer.ffn_norm_name = "post_attention_norm";
  if (config.full_attention_interval > 0 && (layer_idx + 1) % config.full_attention_interval != 0) {
    layer.mixer = LayerMixer::kDeltaNet;
    layer.qk_norm = false;
    return;
  }
  layer.attn_output_gate = true;
}

}  // namespace

bool ModelConfig::HasDeltaNet(int begin, int end) const {
  for (int i = begin; i < end; ++i) {
    if (layers[size_t(i)].mixer == LayerMixer::kDeltaNet) return true;
  }
  return false;
}

int ModelConfig::WidestWindow() const {
  int widest = 0;
  for (const LayerConfig& layer : layers) {
    if (layer.attention == AttentionKind::kSliding) widest = std::max(widest, layer.window);
  }
  return widest;
}

size_t ModelConfig::RecurrentStateBytes(int begin, int end) const {
  size_t layers_with_state = 0;
  for (int i = begin; i < end; ++i) {
    layers_with_state += layers[size_t(i)].mixer == LayerMixer::kDeltaNet ? 1 : 0;
  }
  const size_t floats =
      size_t(delta_net.conv_state_floats()) + size_t(delta_net.ssm_state_floats());
  return layers_with_state * floats * sizeof(float);
}

const char* ArchName(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return "llama";
    case Arch::kQwen3:
      return "qwen3";
    case Arch::kGemma3:
      return "gemma3";
    case Arch::kQwen35:
      return "qwen35";
    case Arch::kGemma4:
      return "gemma4";
    case Arch::kSentinel:
      break;
  }
  return "invalid";
}

bool ModelConfig::SplitsSharedKv(int layer) const {
  for (int i = layer; i < n_layers; ++i) {
    if (layers[size_t(i)].shared_kv && layers[size_t(i)].kv_layer < layer) return true;
  }
  return false;
}

void SetLayerConfigs(ModelConfig& config, const LayerPattern& pattern) {
  config.layers.assign(size_t(std::max(config.n_layers, 0)), LayerConfig{});
  auto per_layer = [](const std::vector<int>& values, size_t i, int fallback) {
    return values.empty() ? fallback : values[i];
  };
  for (int layer_idx = 0; layer_idx < config.n_layers; ++layer_idx) {
    LayerConfig& layer = config.layers[layer_idx];
    const size_t i = size_t(layer_idx);
    layer.n_head = per_layer(pattern.n_head, i, config.n_head);
    layer.n_head_kv = per_layer(pattern.n_head_kv, i, config.n_head_kv);
    layer.n_ff = per_layer(pattern.n_ff, i, config.n_ff);
    layer.head_dim_k = config.head_dim;
    layer.head_dim_v = config.head_dim;
    layer.qk_norm = config.arch != Arch::kLlama;
    layer.kv_layer = layer_idx;
    layer.n_rot = config.n_rot;
    layer.rope_base = config.rope_freq_base;
    layer.rope_freq_scale = config.rope_freq_scale;
    layer.kq_scale = 1.0f / sqrtf(float(config.head_dim));
    if (config.arch == Arch::kGemma3) SetGemma3Layer(config, layer_idx, layer);
    if (config.arch == Arch::kQwen35) SetQwen35Layer(config, layer_idx, layer);
    if (config.arch == Arch::kGemma4) SetGemma4Layer(config, pattern, layer_idx, layer);
  }
}

Result<ModelConfig> ReadModelConfig(const GgufFile& file) {
  ModelConfig config;
  SHARDLM_ASSIGN_OR_RETURN(std::string_view arch_name, file.GetString("general.architecture"));
  SHARDLM_ASSIGN_OR_RETURN(config.arch, ParseArch(arch_name));
  const std::string arch(arch_name);
  SHARDLM_ASSIGN_OR_RETURN(config.n_layers, ReadDim(file, arch, "block_count", -1));
  SHARDLM_ASSIGN_OR_RETURN(config.n_embd, ReadDim(file, arch, "embedding_length", -1));
  ApplyArchFlags(config);
  LayerPattern pattern;
  SHARDLM_ASSIGN_OR_RETURN(
      pattern.n_ff, ReadPerLayerDims(file, arch, "feed_forward_length", config.n_layers, -1));
  config.n_ff = Widest(pattern.n_ff);
  SHARDLM_TRY(ReadAttentionShape(file, arch, config, pattern));
  SHARDLM_TRY(ReadNumerics(file, arch, config));
  if (config.arch == Arch::kQwen35) SHARDLM_TRY(ReadDeltaNetShape(file, arch, config));
  if (config.arch == Arch::kGemma4) SHARDLM_TRY(ReadGemma4Pattern(file, arch, config, pattern));
  SHARDLM_TRY(ReadVocab(file, config));
  SetLayerConfigs(config, pattern);
  return config;
}

}  // namespace shardlm
