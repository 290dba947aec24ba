// BindStageWeights: find, check and view the tensors of one stage (see weights.h).
#include "model/weights.h"

#include <algorithm>
#include <string>

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

// A 1-D float32 weight of n elements.
Result<NormWeight> BindVector(const GgufFile& file, const std::string& name, int64_t n) {
  const GgufTensorInfo* info = file.FindTensor(name);
  if (info == nullptr) return NotFound("tensor '{}' is missing", name);
  if (info->ne.size() != 1 || info->ne[0] != n) {
    return InvalidData("tensor '{}' has shape {}, expected [{}]", name, ShapeString(info->ne), n);
  }
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

Result<LayerWeights> BindLayer(const GgufFile& file, const ModelConfig& c, int layer) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  LayerWeights w;
  SHARDLM_ASSIGN_OR_RETURN(w.attn_norm, BindVector(file, p + "attn_norm.weight", c.n_embd));
  SHARDLM_ASSIGN_OR_RETURN(w.attn_q, BindMatrix(file, p + "attn_q.weight", c.q_dim(), c.n_embd));
  SHARDLM_ASSIGN_OR_RETURN(w.attn_k, BindMatrix(file, p + "attn_k.weight", c.kv_dim(), c.n_embd));
  SHARDLM_ASSIGN_OR_RETURN(w.attn_v, BindMatrix(file, p + "attn_v.weight", c.kv_dim(), c.n_embd));
  SHARDLM_ASSIGN_OR_RETURN(w.attn_output,
                           BindMatrix(file, p + "attn_output.weight", c.n_embd, c.q_dim()));
  if (c.use_qk_norm) {
    SHARDLM_ASSIGN_OR_RETURN(w.attn_q_norm, BindVector(file, p + "attn_q_norm.weight", c.head_dim));
    SHARDLM_ASSIGN_OR_RETURN(w.attn_k_norm, BindVector(file, p + "attn_k_norm.weight", c.head_dim));
  }
  SHARDLM_ASSIGN_OR_RETURN(w.ffn_norm, BindVector(file, p + "ffn_norm.weight", c.n_embd));
  SHARDLM_ASSIGN_OR_RETURN(w.ffn_gate, BindMatrix(file, p + "ffn_gate.weight", c.n_ff, c.n_embd));
  SHARDLM_ASSIGN_OR_RETURN(w.ffn_up, BindMatrix(file, p + "ffn_up.weight", c.n_ff, c.n_embd));
  SHARDLM_ASSIGN_OR_RETURN(w.ffn_down, BindMatrix(file, p + "ffn_down.weight", c.n_embd, c.n_ff));
  return w;
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
  Add(weights.token_embd, &tensors);
  Add(weights.output_norm, &tensors);
  Add(weights.output, &tensors);
  Add(weights.rope_freqs, &tensors);
  for (const LayerWeights& w : weights.blocks) {
    for (const NormWeight* norm : {&w.attn_norm, &w.attn_q_norm, &w.attn_k_norm, &w.ffn_norm}) {
      Add(*norm, &tensors);
    }
    for (const WeightView* view :
         {&w.attn_q, &w.attn_k, &w.attn_v, &w.attn_output, &w.ffn_gate, &w.ffn_up, &w.ffn_down}) {
      Add(*view, &tensors);
    }
  }
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
  if (w.has_embedding || (w.has_head && config.tied_output)) {
    SHARDLM_ASSIGN_OR_RETURN(w.token_embd,
                             BindMatrix(file, "token_embd.weight", config.n_vocab, config.n_embd));
  }
  if (w.has_head) {
    SHARDLM_ASSIGN_OR_RETURN(w.output_norm, BindVector(file, "output_norm.weight", config.n_embd));
    if (config.tied_output) {
      w.output = w.token_embd;
    } else {
      SHARDLM_ASSIGN_OR_RETURN(w.output,
                               BindMatrix(file, "output.weight", config.n_vocab, config.n_embd));
    }
  }
  if (file.FindTensor("rope_freqs.weight") != nullptr) {
    SHARDLM_ASSIGN_OR_RETURN(w.rope_freqs, BindVector(file, "rope_freqs.weight", config.n_rot / 2));
  }
  w.blocks.reserve(range.size());
  for (int layer = range.begin; layer < range.end; ++layer) {
    auto block = BindLayer(file, config, layer);
    if (!block.ok()) return block.status();
    w.blocks.push_back(std::move(block).value());
  }
  return w;
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
