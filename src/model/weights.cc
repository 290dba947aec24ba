// BindStageWeights: find, check and view the tensors of one stage (see weights.h).
#include "model/weights.h"

#include <algorithm>
#include <string>

#include "base/check.h"
#include "tensor/panels.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

std::string ShapeString(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// A 2-D weight with ne = [cols, rows] of a computable type.
Result<WeightView> BindMatrix(const GgufFile& file, const std::string& name, int64_t rows,
                              int64_t cols) {
  const GgufTensorInfo* info = file.FindTensor(name);
  if (info == nullptr) return NotFound("tensor '{}' is missing", name);
  if (info->ne.size() != 2 || info->ne[0] != cols || info->ne[1] != rows) {
    return InvalidData("tensor '{}' has shape {}, expected [{}, {}] (ne0 = input, ne1 = output)",
                       name, ShapeString(info->ne), cols, rows);
  }
  const auto type_info = LookupGgmlType(uint32_t(info->type));
  if (!type_info || GetTypeTraits(info->type) == nullptr) {
    return Unsupported("tensor '{}' has type {}, which shardlm cannot compute", name,
                       GgmlTypeName(uint32_t(info->type)));
  }
  if (cols % type_info->block_size != 0) {
    return InvalidData("tensor '{}': row length {} is not a multiple of the {} block size {}", name,
                       cols, type_info->name, type_info->block_size);
  }
  WeightView view;
  view.type = info->type;
  view.cols = cols;
  view.rows = rows;
  view.data = info->data;
  view.row_bytes = RowBytes(*type_info, cols);
  if (uint64_t(view.row_bytes) * uint64_t(rows) > info->n_bytes) {
    return InvalidData("tensor '{}': {} bytes are too few for its shape", name, info->n_bytes);
  }
  return view;
}

// A float32 weight of shape ne (one dim: a vector; more: bound flat).
Result<NormWeight> BindVector(const GgufFile& file, const std::string& name,
                              const std::vector<int64_t>& ne) {
  const GgufTensorInfo* info = file.FindTensor(name);
  if (info == nullptr) return NotFound("tensor '{}' is missing", name);
  if (info->ne != ne) {
    return InvalidData("tensor '{}' has shape {}, expected {}", name, ShapeString(info->ne),
                       ShapeString(ne));
  }
  int64_t n = 1;
  for (int64_t dim : ne) n *= dim;
  if (info->type != GgmlType::kF32) {
    return Unsupported("tensor '{}' has type {}, expected f32", name,
                       GgmlTypeName(uint32_t(info->type)));
  }
  if (info->n_bytes < uint64_t(n) * sizeof(float) ||
      reinterpret_cast<uintptr_t>(info->data) % alignof(float) != 0) {
    return InvalidData("tensor '{}': data is truncated or misaligned", name);
  }
  return NormWeight{reinterpret_cast<const float*>(info->data), n};
}

// Binds one visited tensor into its slot; an optional tensor the file lacks stays empty.
Status BindTensor(const GgufFile& file, const TensorSpec& spec, StageWeights& w) {
  if (!spec.required && file.FindTensor(spec.name) == nullptr) return Status::Ok();
  const TensorSlot slot = SlotOf(w, spec.role, spec.layer);
  SHARDLM_CHECK(spec.matrix() ? slot.matrix != nullptr : slot.vector != nullptr);
  if (spec.matrix()) {
    SHARDLM_ASSIGN_OR_RETURN(*slot.matrix, BindMatrix(file, spec.name, spec.ne[1], spec.ne[0]));
  } else {
    SHARDLM_ASSIGN_OR_RETURN(*slot.vector, BindVector(file, spec.name, spec.ne));
  }
  return Status::Ok();
}

// One tensor of a stage: where its bytes are and how many (panels: the repacked copy), and
// its size in the file.
struct TensorBytes {
  std::span<const uint8_t> held;
  size_t file_bytes = 0;
};

void Add(const WeightView& view, std::vector<TensorBytes>* tensors) {
  if (view.data == nullptr) return;
  const int64_t held = view.panel_bytes != 0 ? PanelMatrixBytes(view.type, view.rows, view.cols)
                                             : view.row_bytes * view.rows;
  tensors->push_back(
      {{static_cast<const uint8_t*>(view.data), size_t(held)}, size_t(view.row_bytes * view.rows)});
}

void Add(const NormWeight& norm, std::vector<TensorBytes>* tensors) {
  if (norm.data == nullptr) return;
  const size_t bytes = size_t(norm.n) * sizeof(float);
  tensors->push_back({{reinterpret_cast<const uint8_t*>(norm.data), bytes}, bytes});
}

// Every tensor the stage binds, each once (a tied head is the embedding), in address order.
std::vector<TensorBytes> StageTensors(const StageWeights& weights) {
  std::vector<TensorBytes> tensors;
  // Every slot of every role, model-wide (layer -1) and per layer; unbound ones are empty.
  // SlotOf only finds the slots: nothing is written through them.
  auto& slots = const_cast<StageWeights&>(weights);
  auto add_slots = [&](int layer) {
    for (int role = 0; role < int(TensorRole::kSentinel); ++role) {
      const TensorSlot slot = SlotOf(slots, TensorRole(role), layer);
      if (slot.matrix != nullptr) Add(*slot.matrix, &tensors);
      if (slot.vector != nullptr) Add(*slot.vector, &tensors);
    }
  };
  add_slots(-1);
  for (int layer = weights.layers.begin; layer < weights.layers.end; ++layer) add_slots(layer);
  const auto by_address = [](const TensorBytes& a, const TensorBytes& b) {
    return a.held.data() < b.held.data();
  };
  const auto same_start = [](const TensorBytes& a, const TensorBytes& b) {
    return a.held.data() == b.held.data();
  };
  std::sort(tensors.begin(), tensors.end(), by_address);
  tensors.erase(std::unique(tensors.begin(), tensors.end(), same_start), tensors.end());
  return tensors;
}

}  // namespace

Result<StageWeights> BindStageWeights(const GgufFile& file, const ModelConfig& config,
                                      LayerRange range) {
  if (range.begin < 0 || range.begin >= range.end || range.end > config.n_layers) {
    return InvalidArgument("layer range [{}, {}) is not a non-empty part of [0, {})", range.begin,
                           range.end, config.n_layers);
  }
  StageWeights w;
  w.layers = range;
  w.has_embedding = range.begin == 0;
  w.has_head = range.end == config.n_layers;
  w.blocks.resize(size_t(range.size()));
  Status status = Status::Ok();
  ForEachStageTensor(config, range, [&](const TensorSpec& spec) {
    if (status.ok()) status = BindTensor(file, spec, w);
  });
  SHARDLM_TRY(status);
  if (w.has_head && config.tied_output) w.output = w.token_embd;
  return w;
}

TensorSlot SlotOf(StageWeights& w, TensorRole role, int layer) {
  const bool model_wide = layer < 0;
  if (!model_wide && (layer < w.layers.begin || layer >= w.layers.end)) return {};
  LayerWeights* b = model_wide ? nullptr : &w.blocks[layer - w.layers.begin];
  auto matrix = [&](WeightView* view) { return TensorSlot{view, nullptr}; };
  auto vector = [&](NormWeight* norm) { return TensorSlot{nullptr, norm}; };
  if (model_wide) {
    switch (role) {
      case TensorRole::kTokenEmbd:
        return matrix(&w.token_embd);
      case TensorRole::kOutputNorm:
        return vector(&w.output_norm);
      case TensorRole::kOutput:
        return matrix(&w.output);
      case TensorRole::kRopeFreqs:
        return vector(&w.rope_freqs);
      case TensorRole::kPerLayerTokenEmbd:
        return matrix(&w.per_layer_token_embd);
      case TensorRole::kPerLayerModelProj:
        return matrix(&w.per_layer_model_proj);
      case TensorRole::kPerLayerProjNorm:
        return vector(&w.per_layer_proj_norm);
      default:
        return {};
    }
  }
  switch (role) {
    case TensorRole::kAttnNorm:
      return vector(&b->attn_norm);
    case TensorRole::kAttnQ:
      return matrix(&b->attn_q);
    case TensorRole::kAttnK:
      return matrix(&b->attn_k);
    case TensorRole::kAttnV:
      return matrix(&b->attn_v);
    case TensorRole::kAttnOutput:
      return matrix(&b->attn_output);
    case TensorRole::kAttnQNorm:
      return vector(&b->attn_q_norm);
    case TensorRole::kAttnKNorm:
      return vector(&b->attn_k_norm);
    case TensorRole::kAttnPostNorm:
      return vector(&b->attn_post_norm);
    case TensorRole::kFfnPostNorm:
      return vector(&b->ffn_post_norm);
    case TensorRole::kFfnNorm:
      return vector(&b->ffn_norm);
    case TensorRole::kFfnGate:
      return matrix(&b->ffn_gate);
    case TensorRole::kFfnUp:
      return matrix(&b->ffn_up);
    case TensorRole::kFfnDown:
      return matrix(&b->ffn_down);
    case TensorRole::kAttnQkv:
      return matrix(&b->attn_qkv);
    case TensorRole::kAttnGate:
      return matrix(&b->attn_gate);
    case TensorRole::kSsmConv1d:
      return vector(&b->ssm_conv1d);
    case TensorRole::kSsmDtBias:
      return vector(&b->ssm_dt_bias);
    case TensorRole::kSsmA:
      return vector(&b->ssm_a);
    case TensorRole::kSsmBeta:
      return matrix(&b->ssm_beta);
    case TensorRole::kSsmAlpha:
      return matrix(&b->ssm_alpha);
    case TensorRole::kSsmNorm:
      return vector(&b->ssm_norm);
    case TensorRole::kSsmOut:
      return matrix(&b->ssm_out);
    case TensorRole::kPerLayerInpGate:
      return matrix(&b->per_layer_inp_gate);
    case TensorRole::kPerLayerProj:
      return matrix(&b->per_layer_proj);
    case TensorRole::kPerLayerPostNorm:
      return vector(&b->per_layer_post_norm);
    case TensorRole::kLayerOutputScale:
      return vector(&b->layer_output_scale);
    default:
      return {};
  }
}

std::vector<std::span<const uint8_t>> StageTensorBytes(const StageWeights& weights) {
  std::vector<std::span<const uint8_t>> ranges;
  for (const TensorBytes& tensor : StageTensors(weights)) ranges.push_back(tensor.held);
  return ranges;
}

size_t StageWeightBytes(const StageWeights& weights) {
  size_t total = 0;
  for (const TensorBytes& tensor : StageTensors(weights)) total += tensor.file_bytes;
  return total;
}

}  // namespace shardlm
