// ForwardPass: the layer loop of one stage over a mixed batch (see forward.h).
#include "model/forward.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "model/attention.h"
#include "model/delta_net.h"
#include "model/forward_activations.h"
#include "model/ops.h"
#include "model/per_layer_inputs.h"
#include "tensor/matmul.h"

namespace shardlm {

namespace {
// Each stage-local layer's KV place: a layer with KV of its own takes the next index of its
// store, a layer sharing another's KV reads that layer's place.
std::vector<KvPlace> PlaceStageKv(const Model& model, WindowKv window_kv) {
  std::vector<KvPlace> by_kv;  // [Model::kv_index]
  std::vector<KvPlace> places;
  int n_pool = 0;
  int n_ring = 0;
  for (int layer_idx = 0; layer_idx < model.layers().size(); ++layer_idx) {
    const LayerConfig& layer = model.config().layers[size_t(model.layers().begin + layer_idx)];
    const int kv = model.kv_index(layer_idx);
    if (kv < 0) {
      places.push_back({});
      continue;
    }
    if (layer.has_kv()) {
      SHARDLM_CHECK(size_t(kv) == by_kv.size());
      const bool ring = KvInWindowRing(layer, window_kv);
      by_kv.push_back({ring, ring ? n_ring++ : n_pool++});
    }
    places.push_back(by_kv[size_t(kv)]);
  }
  return places;
}

}  // namespace

namespace {

// The attention buffers of a stage: the widest rows of its layers, and tiles no larger than
// every layer's GQA group allows.
struct AttentionRows {
  int q_dim = 0, k_dim = 0, v_dim = 0, attn_dim = 0;
  bool output_gate = false;
  int tile_tokens = kMaxTileTokens;
  size_t scores_per_worker = 0;
};

AttentionRows StageAttentionRows(const Model& model, const PagePoolConfig& kv,
                                 std::span<const KvPlace> places,
                                 std::span<const WindowRingLayer> ring_layers, size_t max_ctx) {
  const ModelConfig& config = model.config();
  const LayerRange layers = model.layers();
  AttentionRows rows;
  for (int layer_idx = layers.begin; layer_idx < layers.end; ++layer_idx) {
    const LayerConfig& layer = config.layers[layer_idx];
    if (layer.mixer == LayerMixer::kDeltaNet) {
      SHARDLM_CHECK(layer.attn_norm && layer.ffn_norm);
      continue;
    }
    // The layer steps this forward pass computes: pre-norm attention (full or windowed) and
    // FFN over KV of the pool's or ring's shape for the layer (its own or the layer it shares).
    const KvPlace place = places[size_t(layer_idx - layers.begin)];
    const KvLayerShape shape =
        place.ring ? ring_layers[size_t(place.index)].shape : kv.layer_shape(place.index);
    SHARDLM_CHECK_MSG(
        (layer.attention == AttentionKind::kFull ||
         (layer.attention == AttentionKind::kSliding && layer.window > 0)) &&
            layer.attn_norm && layer.ffn_norm && layer.n_head_kv == shape.n_kv_heads &&
            layer.head_dim_k == shape.head_dim && layer.head_dim_v == shape.head_dim,
        "layer %d has a kind or KV shape the forward pass does not compute", layer_idx);
    rows.q_dim = std::max(rows.q_dim, layer.q_dim());
    rows.k_dim = std::max(rows.k_dim, layer.k_dim());
    rows.v_dim = std::max(rows.v_dim, layer.v_dim());
    rows.attn_dim = std::max(rows.attn_dim, layer.attn_out_dim());
    rows.output_gate = rows.output_gate || layer.attn_output_gate;
    rows.tile_tokens = std::min(rows.tile_tokens, TileTokensFor(layer.gqa_group()));
  }
  for (int layer_idx = layers.begin; layer_idx < layers.end; ++layer_idx) {
    const LayerConfig& layer = config.layers[layer_idx];
    if (!layer.attends()) continue;
    rows.scores_per_worker = std::max(
        rows.scores_per_worker,
        AttendTileScratch(rows.tile_tokens * layer.gqa_group(), max_ctx, layer.head_dim_k));
  }
  return rows;
}

}  // namespace

ForwardPass::ForwardPass(const Model& model, PagePool& pool, ThreadPool& threads,
                         int max_batch_tokens, int max_sequence_pages)
    : model_(model),
      config_(model.config()),
      pool_(pool),
      threads_(threads),
      max_batch_tokens_(max_batch_tokens),
      act_(std::make_unique<Activations>()) {
  SHARDLM_CHECK(max_batch_tokens > 0);
  const PagePoolConfig& kv = pool.config();
  SHARDLM_CHECK_MSG(kv.n_layers == model.KvPoolConfig(1, 1, kv.kv_type, kv.window_kv).n_layers &&
                        kv.n_kv_heads == config_.n_head_kv && kv.head_dim == config_.head_dim,
                    "page pool shape does not match the stage (use Model::KvPoolConfig)");
  const size_t b = size_t(max_batch_tokens);
  act_->max_ctx = size_t(kv.n_pages) * kv.page_tokens;
  act_->kv_place = PlaceStageKv(model, kv.window_kv);
  std::vector<WindowRingLayer> ring_layers =
      StageWindowRingLayers(config_, model.layers(), kv.window_kv);
  const AttentionRows rows =
      StageAttentionRows(model, kv, act_->kv_place, ring_layers, act_->max_ctx);
  if (!ring_layers.empty()) {
    act_->rings = std::make_unique<WindowRings>(std::move(ring_layers), kv.page_tokens, kv.kv_type,
                                                max_batch_tokens, max_sequence_pages);
  }
  act_->tile_tokens = rows.tile_tokens;
  act_->scores_per_worker = rows.scores_per_worker;
  act_->x.resize(b * config_.n_embd);
  act_->xn.resize(b * config_.n_embd);
  act_->q.resize(b * rows.q_dim);
  act_->k.resize(b * rows.k_dim);
  act_->v.resize(b * rows.v_dim);
  act_->attn.resize(b * rows.attn_dim);
  if (rows.output_gate) {
    act_->q_gated.resize(b * 2 * rows.q_dim);
    act_->attn_gate.resize(b * rows.attn_dim);
  }
  if (model.n_recurrent_layers() > 0) {
    const DeltaNetShape& d = config_.delta_net;
    act_->states = std::make_unique<RecurrentStates>(model.n_recurrent_layers(),
                                                     d.conv_state_floats(), d.ssm_state_floats());
    act_->delta_net.Resize(d, max_batch_tokens);
    for (int layer_idx = 0; layer_idx < model.layers().size(); ++layer_idx) {
      if (model.recurrent_index(layer_idx) >= 0) {
        act_->delta_net.AddLayer(d, model.weights().blocks[size_t(layer_idx)].ssm_conv1d);
      }
    }
  }
  act_->proj.resize(b * config_.n_embd);
  // The gate rows also hold the per-layer inputs' gate (n_embd_per_layer wide).
  act_->gate.resize(b * size_t(std::max(config_.n_ff, config_.n_embd_per_layer)));
  act_->up.resize(b * config_.n_ff);
  for (int layer_idx = model.layers().begin; layer_idx < model.layers().end; ++layer_idx) {
    const LayerConfig& layer = config_.layers[layer_idx];
    const RopeVariant variant{layer.rope_base, layer.rope_freq_scale, layer.n_rot,
                              layer.rope_freqs && model.weights().rope_freqs.data != nullptr};
    auto& variants = act_->rope_variants;
    auto found = std::find(variants.begin(), variants.end(), variant);
    if (found == variants.end()) found = variants.insert(variants.end(), variant);
    act_->rope_variant_of.push_back(int(found - variants.begin()));
  }
  act_->rope.resize(act_->rope_variants.size() * b * config_.n_rot);
  if (config_.n_embd_per_layer > 0)
    act_->per_layer.Resize(config_, max_batch_tokens, threads.size());
  act_->tiles.reserve(b);
  act_->scores.resize(size_t(threads.size()) * act_->scores_per_worker);
  act_->head_rows.resize(b);
  act_->embd_rows.resize(b);
  SHARDLM_CHECK(state_bytes() ==
                StageStateBytes(config_, model.layers(), kv.kv_type, kv.window_kv));
}

ForwardPass::~ForwardPass() = default;

size_t ForwardPass::state_bytes() const {
  return (act_->states ? act_->states->slot_bytes() : 0) +
         (act_->rings ? act_->rings->state_bytes() : 0);
}

// A slot's state: its recurrent layers' bytes, then its window rings'.
Status ForwardPass::ExportState(int slot, int32_t position, std::span<uint8_t> dst) const {
  if (state_bytes() == 0) return InvalidArgument("the stage keeps no state per sequence");
  if (dst.size() != state_bytes()) {
    return InvalidArgument("a state of {} bytes does not fit {}", state_bytes(), dst.size());
  }
  size_t recurrent = 0;
  if (act_->states) {
    const std::span<const uint8_t> bytes = act_->states->BytesAt(slot, position);
    if (bytes.empty()) {
      return NotFound("slot {} holds no recurrent state at position {}", slot, position);
    }
    std::memcpy(dst.data(), bytes.data(), bytes.size());
    recurrent = bytes.size();
  }
  if (act_->rings) return act_->rings->Export(slot, position, dst.subspan(recurrent));
  return Status::Ok();
}

Status ForwardPass::ImportState(int slot, int32_t position, std::span<const uint8_t> src) {
  if (state_bytes() == 0) return InvalidArgument("the stage keeps no state per sequence");
  constexpr int kMaxSlots = 1 << 16;
  if (slot < 0 || slot >= kMaxSlots) return InvalidArgument("slot {} is out of range", slot);
  if (src.size() != state_bytes()) {
    return InvalidArgument("a state of {} bytes does not fit {}", src.size(), state_bytes());
  }
  size_t recurrent = 0;
  if (act_->states) {
    recurrent = act_->states->slot_bytes();
    act_->states->EnsureSlots(slot + 1);
    SHARDLM_TRY(act_->states->Restore(slot, src.first(recurrent), position));
  }
  if (act_->rings) return act_->rings->Import(slot, position, src.subspan(recurrent));
  return Status::Ok();
}

Status ForwardPass::Run(std::span<const BatchEntry> batch, std::span<const PageList> pages_by_slot,
                        const float* hidden_in, float* out) {
  pooled_ = nullptr;
  return RunLayers(batch, pages_by_slot, hidden_in, out);
}

Status ForwardPass::RunPooled(std::span<const BatchEntry> batch,
                              std::span<const PageList> pages_by_slot, const PooledKv& pooled,
                              const float* hidden_in, float* out) {
  pooled_ = &pooled;
  Status status = PrepareScores(batch, pages_by_slot);
  if (status.ok()) status = RunLayers(batch, pages_by_slot, hidden_in, out);
  if (status.ok()) FinishScores(batch);
  pooled_ = nullptr;
  return status;
}

Status ForwardPass::RunLayers(std::span<const BatchEntry> batch,
                              std::span<const PageList> pages_by_slot, const float* hidden_in,
                              float* out) {
  SHARDLM_TRY(Validate(batch, pages_by_slot, hidden_in, out));
  const int n_tokens = int(batch.size());
  if (act_->states) {
    for (const BatchEntry& e : batch) {
      if (e.position == 0) act_->states->Reset(e.slot);
    }
    act_->delta_net.GroupSequences(batch, pool_.page_tokens());
  }
  Embed(batch, hidden_in);
  BuildTiles(batch);
  if (config_.n_embd_per_layer > 0) {
    act_->per_layer.Compute(model_.weights(), config_, batch,
                            model_.is_first_stage() ? act_->x.data() : nullptr, act_->xn.data(),
                            threads_, act_->scratch);
  }
  const size_t variant_floats = size_t(max_batch_tokens_) * config_.n_rot;
  for (size_t v = 0; v < act_->rope_variants.size(); ++v) {
    const RopeVariant& rope = act_->rope_variants[v];
    const float* freq_factors = rope.freq_factors ? model_.weights().rope_freqs.data : nullptr;
    for (int t = 0; t < n_tokens; ++t) {
      RopeAngles(batch[t].position, rope.n_rot, rope.base, rope.freq_scale, freq_factors,
                 &act_->rope[v * variant_floats + size_t(t) * config_.n_rot]);
    }
  }
  for (int layer_idx = 0; layer_idx < model_.layers().size(); ++layer_idx) {
    Layer(layer_idx, batch, pages_by_slot);
  }
  if (act_->rings) {
    for (size_t slot = 0; slot < act_->slot_next.size(); ++slot) {
      if (act_->slot_next[slot] >= 0) act_->rings->set_position(int(slot), act_->slot_next[slot]);
    }
  }
  if (act_->states) {
    for (size_t slot = 0; slot < act_->slot_next.size(); ++slot) {
      if (act_->slot_next[slot] >= 0) act_->states->set_position(int(slot), act_->slot_next[slot]);
    }
    const DeltaNetScratch& grouped = act_->delta_net;
    for (size_t seq = 0; seq < grouped.seq_slot.size(); ++seq) {
      const int32_t t = grouped.seq_checkpoint[seq];
      if (t >= 0)
        act_->states->set_checkpoint_position(grouped.seq_slot[seq], batch[t].position + 1);
    }
  }
  if (model_.is_last_stage()) {
    Head(batch, out);
  } else {
    std::memcpy(out, act_->x.data(), sizeof(float) * size_t(n_tokens) * config_.n_embd);
  }
  return Status::Ok();
}

void ForwardPass::Embed(std::span<const BatchEntry> batch, const float* hidden_in) {
  const size_t n_embd = config_.n_embd;
  if (hidden_in != nullptr) {
    std::memcpy(act_->x.data(), hidden_in, sizeof(float) * batch.size() * n_embd);
    return;
  }
  const float scale = config_.embedding_scale;
  threads_.ParallelFor(batch.size(), [&](size_t t, size_t) {
    float* x = &act_->x[t * n_embd];
    DequantizeRow(model_.weights().token_embd, batch[t].token, x);
    if (scale != 1.0f) {
      for (size_t i = 0; i < n_embd; ++i) x[i] *= scale;
    }
  });
}

// x += Wo·Attention(...); x += FFN(...): the two residual sublayers of one block, each
// reading its input through the layer's own norm. layer_idx is stage-local.
void ForwardPass::Layer(int layer_idx, std::span<const BatchEntry> batch,
                        std::span<const PageList> pages_by_slot) {
  const LayerWeights& w = model_.weights().blocks[layer_idx];
  const int n = int(batch.size());
  const size_t n_embd = config_.n_embd;
  threads_.ParallelFor(n, [&](size_t t, size_t) {
    RmsNorm(&act_->x[t * n_embd], w.attn_norm.data, n_embd, config_.rms_eps, &act_->xn[t * n_embd]);
  });
  if (LayerConfigOf(layer_idx).mixer == LayerMixer::kDeltaNet) {
    RunDeltaNet(w, config_.delta_net, config_.rms_eps, batch, act_->xn.data(), *act_->states,
                model_.recurrent_index(layer_idx), act_->delta_net, threads_, act_->scratch,
                act_->proj.data());
  } else {
    AttentionSublayer(layer_idx, batch, pages_by_slot);
  }
  threads_.ParallelFor(n, [&](size_t t, size_t) {
    AddToResidual(t, w.attn_post_norm);
    RmsNorm(&act_->x[t * n_embd], w.ffn_norm.data, n_embd, config_.rms_eps, &act_->xn[t * n_embd]);
  });
  Ffn(w, n);
  const LayerConfig& layer = LayerConfigOf(layer_idx);
  if (layer.per_layer_input) {
    act_->per_layer.Project(w, config_, model_.layers().begin + layer_idx, act_->x.data(), n,
                            act_->gate.data(), act_->proj.data(), threads_, act_->scratch);
    threads_.ParallelFor(n, [&](size_t t, size_t) { AddToResidual(t, w.per_layer_post_norm); });
  }
  if (layer.output_scale) {
    const float scale = w.layer_output_scale.data[0];
    threads_.ParallelFor(n, [&](size_t t, size_t) {
      float* x = &act_->x[t * n_embd];
      for (size_t i = 0; i < n_embd; ++i) x[i] *= scale;
    });
  }
}

// The attention sublayer up to attn_output's rows in proj: q, k, v projections (q with its
// output gate where the layer has one), rope and KV store, attention, the gate.
void ForwardPass::AttentionSublayer(int layer_idx, std::span<const BatchEntry> batch,
                                    std::span<const PageList> pages_by_slot) {
  const LayerWeights& w = model_.weights().blocks[layer_idx];
  const LayerConfig& layer = LayerConfigOf(layer_idx);
  const int n = int(batch.size());
  float* q_out = layer.attn_output_gate ? act_->q_gated.data() : act_->q.data();
  // A layer reading shared KV projects only q; one taking v from k copies k's rows.
  MatMulOutput qkv[3] = {{w.attn_q, q_out}};
  size_t n_outputs = 1;
  if (layer.has_kv()) qkv[n_outputs++] = {w.attn_k, act_->k.data()};
  if (layer.has_kv() && !layer.v_from_k) qkv[n_outputs++] = {w.attn_v, act_->v.data()};
  MatMulMany(std::span(qkv, n_outputs), act_->xn.data(), n, threads_, act_->scratch);
  if (layer.v_from_k) {
    std::memcpy(act_->v.data(), act_->k.data(), sizeof(float) * size_t(n) * layer.k_dim());
  }
  if (layer.attn_output_gate) SplitQueryGate(layer, n);
  RopeAndStoreKv(layer_idx, batch, pages_by_slot);
  if (pooled_ != nullptr && pooled_->summaries != nullptr && layer.has_kv() &&
      !act_->kv_place[size_t(layer_idx)].ring) {
    SummarizeAndScore(layer_idx, batch, pages_by_slot);
  }
  Attention(layer_idx, batch, pages_by_slot);
  if (layer.attn_output_gate) {
    threads_.ParallelFor(n, [&](size_t t, size_t) {
      float* o = &act_->attn[t * layer.attn_out_dim()];
      const float* gate = &act_->attn_gate[t * layer.attn_out_dim()];
      for (int i = 0; i < layer.attn_out_dim(); ++i) o[i] *= 1.0f / (1.0f + expf(-gate[i]));
    });
  }
  MatMul(w.attn_output, act_->attn.data(), n, act_->proj.data(), threads_, act_->scratch);
}

// attn_q's rows hold per head [q | gate]: q into the query rows, gate into attn_gate.
void ForwardPass::SplitQueryGate(const LayerConfig& layer, int n_tokens) {
  const int head_dim = layer.head_dim_k;
  threads_.ParallelFor(n_tokens, [&](size_t t, size_t) {
    const float* row = &act_->q_gated[t * 2 * layer.q_dim()];
    for (int h = 0; h < layer.n_head; ++h) {
      std::memcpy(&act_->q[t * layer.q_dim() + h * head_dim], row + 2 * h * head_dim,
                  sizeof(float) * head_dim);
      std::memcpy(&act_->attn_gate[t * layer.attn_out_dim() + h * head_dim],
                  row + (2 * h + 1) * head_dim, sizeof(float) * head_dim);
    }
  });
}

// q/k per-head norm (qwen3, gemma3), v's (gemma4), rope, q's scale (gemma3), then K and V
// rows into the sequence's pages (a layer reading shared KV has only its queries).
void ForwardPass::RopeAndStoreKv(int layer_idx, std::span<const BatchEntry> batch,
                                 std::span<const PageList> pages_by_slot) {
  const LayerWeights& w = model_.weights().blocks[layer_idx];
  const LayerConfig& layer = LayerConfigOf(layer_idx);
  const int head_dim = layer.head_dim_k;
  const KvPlace place = act_->kv_place[size_t(layer_idx)];
  const int variant = act_->rope_variant_of[layer_idx];
  const float eps = config_.rms_eps;
  threads_.ParallelFor(batch.size(), [&](size_t t, size_t) {
    float* q = &act_->q[t * layer.q_dim()];
    float* k = &act_->k[t * layer.k_dim()];
    float* v = &act_->v[t * layer.v_dim()];
    const bool writes = layer.has_kv();
    if (layer.qk_norm) {
      for (int h = 0; h < layer.n_head; ++h) {
        RmsNorm(q + h * head_dim, w.attn_q_norm.data, head_dim, eps, q + h * head_dim);
      }
      for (int h = 0; writes && h < layer.n_head_kv; ++h) {
        RmsNorm(k + h * head_dim, w.attn_k_norm.data, head_dim, eps, k + h * head_dim);
      }
    }
    for (int h = 0; writes && layer.v_norm && h < layer.n_head_kv; ++h) {
      RmsNorm(v + h * layer.head_dim_v, nullptr, layer.head_dim_v, eps, v + h * layer.head_dim_v);
    }
    const float* rope = &act_->rope[(size_t(variant) * max_batch_tokens_ + t) * config_.n_rot];
    ApplyRope(config_.rope_type, rope, layer.n_rot, head_dim, layer.n_head, q);
    if (layer.q_scale != 1.0f) {
      for (int i = 0; i < layer.q_dim(); ++i) q[i] *= layer.q_scale;
    }
    if (!writes) return;
    ApplyRope(config_.rope_type, rope, layer.n_rot, head_dim, layer.n_head_kv, k);
    const BatchEntry& e = batch[t];
    if (place.ring) {
      shardlm::WriteKv(act_->rings->pool(e.slot), act_->rings->pages(), place.index, e.position, k,
                       v);
    } else {
      shardlm::WriteKv(pool_, pages_by_slot[e.slot], place.index, e.position, k, v);
    }
  });
}

// Groups adjacent batch entries of one sequence at consecutive positions into tiles of at
// most tile_tokens (prefill shares K/V reads; decode entries stay alone).
void ForwardPass::BuildTiles(std::span<const BatchEntry> batch) {
  act_->tiles.clear();
  for (size_t t = 0; t < batch.size(); ++t) {
    if (!act_->tiles.empty()) {
      Tile& last = act_->tiles.back();
      const BatchEntry& prev = batch[t - 1];
      if (last.n_tokens < act_->tile_tokens && batch[t].slot == prev.slot &&
          batch[t].position == prev.position + 1) {
        ++last.n_tokens;
        continue;
      }
    }
    act_->tiles.push_back({int32_t(t), 1});
  }
}

// One task per (tile, kv head): the tile's tokens and the GQA group's query heads share
// each K/V read. Each task reads only KV already written for its positions.
void ForwardPass::Attention(int layer_idx, std::span<const BatchEntry> batch,
                            std::span<const PageList> pages_by_slot) {
  const LayerConfig& layer = LayerConfigOf(layer_idx);
  const int n_head_kv = layer.n_head_kv;
  const int head_dim = layer.head_dim_k;
  const KvPlace place = act_->kv_place[size_t(layer_idx)];
  const size_t group_dim = size_t(layer.gqa_group()) * head_dim;
  threads_.ParallelFor(act_->tiles.size() * n_head_kv, [&](size_t task, size_t worker) {
    const Tile& tile = act_->tiles[task / n_head_kv];
    const int g = int(task % n_head_kv);
    const BatchEntry& e = batch[tile.first_entry];
    AttentionTile query;
    query.q = &act_->q[size_t(tile.first_entry) * layer.q_dim() + g * group_dim];
    query.q_stride = layer.q_dim();
    query.out = &act_->attn[size_t(tile.first_entry) * layer.attn_out_dim() + g * group_dim];
    query.out_stride = layer.attn_out_dim();
    query.n_tokens = tile.n_tokens;
    query.first_position = e.position;
    query.n_heads = layer.gqa_group();
    query.kv_head = g;
    query.scale = layer.kq_scale;
    query.window = layer.attention == AttentionKind::kSliding ? layer.window : 0;
    float* scratch = &act_->scores[worker * act_->scores_per_worker];
    if (place.ring) {
      AttendTile(act_->rings->pool(e.slot), act_->rings->pages(), place.index, head_dim, query,
                 scratch);
      return;
    }
    if (pooled_ != nullptr && size_t(e.slot) < pooled_->attended_by_slot.size()) {
      query.read_pages = pooled_->attended_by_slot[e.slot];
    }
    AttendTile(pool_, pages_by_slot[e.slot], place.index, head_dim, query, scratch);
  });
}

// x += W_down · (act(W_gate · xn) ⊙ W_up · xn), xn the FFN's normed input, act SiLU or GELU;
// the result normed first when the layer has an FFN output norm (gemma3).
void ForwardPass::Ffn(const LayerWeights& w, int n_tokens) {
  const RowCombine act = config_.ffn_activation == FfnActivation::kGelu ? &GeGlu : &SwiGlu;
  MatMulGated(w.ffn_gate, w.ffn_up, act_->xn.data(), n_tokens, act_->gate.data(), act_->up.data(),
              act, threads_, act_->scratch);
  MatMul(w.ffn_down, act_->gate.data(), n_tokens, act_->proj.data(), threads_, act_->scratch);
  threads_.ParallelFor(n_tokens, [&](size_t t, size_t) { AddToResidual(t, w.ffn_post_norm); });
}

// x[t] += proj[t], the sublayer's result, normed first where the layer norms its outputs
// (gemma3's post norms; post_norm.data null: no norm).
void ForwardPass::AddToResidual(size_t t, const NormWeight& post_norm) {
  const size_t n_embd = config_.n_embd;
  float* x = &act_->x[t * n_embd];
  float* proj = &act_->proj[t * n_embd];
  if (post_norm.data != nullptr) RmsNorm(proj, post_norm.data, n_embd, config_.rms_eps, proj);
  for (size_t i = 0; i < n_embd; ++i) x[i] = proj[i] + x[i];
}

// logits rows = output · RMSNorm(x)·output_norm, for the entries that want logits; then
// embedding rows = RMSNorm(x)·output_norm, for the entries that want their embedding. Both
// norms are the same per-row computation, so an entry's embedding row is exactly the vector
// its logits are computed from.
void ForwardPass::Head(std::span<const BatchEntry> batch, float* out) {
  int n_rows = 0;
  int n_embd_rows = 0;
  for (size_t t = 0; t < batch.size(); ++t) {
    if (batch[t].wants_logits) act_->head_rows[n_rows++] = int32_t(t);
    if (batch[t].wants_embedding) act_->embd_rows[n_embd_rows++] = int32_t(t);
  }
  const size_t n_embd = config_.n_embd;
  const float* output_norm = model_.weights().output_norm.data;
  float* embeddings = out + size_t(n_rows) * size_t(config_.n_vocab);
  threads_.ParallelFor(n_embd_rows, [&](size_t r, size_t) {
    const size_t t = size_t(act_->embd_rows[r]);
    RmsNorm(&act_->x[t * n_embd], output_norm, n_embd, config_.rms_eps, &embeddings[r * n_embd]);
  });
  if (n_rows == 0) return;
  threads_.ParallelFor(n_rows, [&](size_t r, size_t) {
    const size_t t = size_t(act_->head_rows[r]);
    RmsNorm(&act_->x[t * n_embd], output_norm, n_embd, config_.rms_eps, &act_->xn[r * n_embd]);
  });
  MatMul(model_.weights().output, act_->xn.data(), n_rows, out, threads_, act_->scratch);
  const float cap = config_.final_logit_softcap;
  if (cap > 0.0f) {
    // As llama.cpp: scale by 1/cap, tanh, scale by cap.
    const size_t n_vocab = config_.n_vocab;
    threads_.ParallelFor(n_rows, [&](size_t r, size_t) {
      float* row = out + r * n_vocab;
      for (size_t i = 0; i < n_vocab; ++i) row[i] = tanhf(row[i] * (1.0f / cap)) * cap;
    });
  }
}

}  // namespace shardlm
