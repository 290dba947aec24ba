// ForEachStageTensor: the tensor list of a stage, from its config (see tensor_specs.h).
#include "model/tensor_specs.h"

#include "base/check.h"

namespace shardlm {
namespace {

// The tensors of layer `layer_idx`, in file order.
void ForEachLayerTensor(const ModelConfig& config, int layer_idx,
                        const std::function<void(const TensorSpec&)>& fn) {
  const LayerConfig& layer = config.layers[layer_idx];
  const std::string prefix = "blk." + std::to_string(layer_idx) + ".";
  const int64_t n_embd = config.n_embd;
  auto matrix = [&](const char* name, TensorRole role, int64_t rows, int64_t cols) {
    fn(TensorSpec{prefix + name, role, layer_idx, {cols, rows}, true});
  };
  auto vector = [&](const char* name, TensorRole role, int64_t n) {
    fn(TensorSpec{prefix + name, role, layer_idx, {n}, true});
  };
  if (layer.attn_norm) vector("attn_norm.weight", TensorRole::kAttnNorm, n_embd);
  if (layer.mixer == LayerMixer::kDeltaNet) {
    const DeltaNetShape& d = config.delta_net;
    matrix("attn_qkv.weight", TensorRole::kAttnQkv, d.conv_channels(), n_embd);
    matrix("attn_gate.weight", TensorRole::kAttnGate, d.value_dim(), n_embd);
    fn(TensorSpec{prefix + "ssm_conv1d.weight",
                  TensorRole::kSsmConv1d,
                  layer_idx,
                  {d.conv_kernel, d.conv_channels()},
                  true,
                  /*flat=*/true});
    vector("ssm_dt.bias", TensorRole::kSsmDtBias, d.n_v_heads);
    vector("ssm_a", TensorRole::kSsmA, d.n_v_heads);
    matrix("ssm_beta.weight", TensorRole::kSsmBeta, d.n_v_heads, n_embd);
    matrix("ssm_alpha.weight", TensorRole::kSsmAlpha, d.n_v_heads, n_embd);
    vector("ssm_norm.weight", TensorRole::kSsmNorm, d.head_dim_v);
    matrix("ssm_out.weight", TensorRole::kSsmOut, n_embd, d.value_dim());
  } else {
    // A layer that reads shared KV projects only its queries.
    const int q_rows = layer.attn_output_gate ? 2 * layer.q_dim() : layer.q_dim();
    matrix("attn_q.weight", TensorRole::kAttnQ, q_rows, n_embd);
    if (layer.has_kv()) matrix("attn_k.weight", TensorRole::kAttnK, layer.k_dim(), n_embd);
    if (layer.has_kv() && !layer.v_from_k) {
      matrix("attn_v.weight", TensorRole::kAttnV, layer.v_dim(), n_embd);
    }
    matrix("attn_output.weight", TensorRole::kAttnOutput, n_embd, layer.attn_out_dim());
    if (layer.qk_norm) {
      vector("attn_q_norm.weight", TensorRole::kAttnQNorm, layer.head_dim_k);
      if (layer.has_kv()) vector("attn_k_norm.weight", TensorRole::kAttnKNorm, layer.head_dim_k);
    }
  }
  if (layer.attn_post_norm) {
    vector("post_attention_norm.weight", TensorRole::kAttnPostNorm, n_embd);
  }
  if (layer.ffn_norm) {
    vector((std::string(layer.ffn_norm_name) + ".weight").c_str(), TensorRole::kFfnNorm, n_embd);
  }
  matrix("ffn_gate.weight", TensorRole::kFfnGate, layer.n_ff, n_embd);
  matrix("ffn_up.weight", TensorRole::kFfnUp, layer.n_ff, n_embd);
  matrix("ffn_down.weight", TensorRole::kFfnDown, n_embd, layer.n_ff);
  if (layer.ffn_post_norm) vector("post_ffw_norm.weight", TensorRole::kFfnPostNorm, n_embd);
  if (layer.per_layer_input) {
    const int64_t width = config.n_embd_per_layer;
    matrix("inp_gate.weight", TensorRole::kPerLayerInpGate, width, n_embd);
    matrix("proj.weight", TensorRole::kPerLayerProj, n_embd, width);
    vector("post_norm.weight", TensorRole::kPerLayerPostNorm, n_embd);
  }
  if (layer.output_scale) vector("layer_output_scale.weight", TensorRole::kLayerOutputScale, 1);
}

}  // namespace

void ForEachStageTensor(const ModelConfig& config, LayerRange layers,
                        const std::function<void(const TensorSpec&)>& fn) {
  SHARDLM_CHECK(layers.begin >= 0 && layers.begin < layers.end && layers.end <= config.n_layers &&
                size_t(config.n_layers) == config.layers.size());
  const bool first = layers.begin == 0;
  const bool last = layers.end == config.n_layers;
  const int64_t n_embd = config.n_embd;
  const int64_t n_vocab = config.n_vocab;
  const bool per_layer_inputs = config.n_embd_per_layer > 0;
  if (first || (last && config.tied_output) || per_layer_inputs) {
    fn(TensorSpec{"token_embd.weight", TensorRole::kTokenEmbd, -1, {n_embd, n_vocab}, true});
  }
  if (per_layer_inputs) {
    const int64_t all_layers = int64_t(config.n_layers) * config.n_embd_per_layer;
    fn(TensorSpec{
        "per_layer_token_embd.weight", TensorRole::kPerLayerTokenEmbd, -1, {all_layers, n_vocab}});
    fn(TensorSpec{
        "per_layer_model_proj.weight", TensorRole::kPerLayerModelProj, -1, {n_embd, all_layers}});
    fn(TensorSpec{"per_layer_proj_norm.weight",
                  TensorRole::kPerLayerProjNorm,
                  -1,
                  {int64_t(config.n_embd_per_layer)}});
  }
  for (int layer_idx = layers.begin; layer_idx < layers.end; ++layer_idx) {
    ForEachLayerTensor(config, layer_idx, fn);
  }
  if (last) {
    fn(TensorSpec{"output_norm.weight", TensorRole::kOutputNorm, -1, {n_embd}, true});
    if (!config.tied_output) {
      fn(TensorSpec{"output.weight", TensorRole::kOutput, -1, {n_embd, n_vocab}, true});
    }
  }
  fn(TensorSpec{"rope_freqs.weight", TensorRole::kRopeFreqs, -1, {config.n_rot / 2}, false});
}

}  // namespace shardlm
