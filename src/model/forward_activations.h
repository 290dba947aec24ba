// Internal to the forward pass's files (forward.cc, forward_validate.cc,
// forward_page_scores.cc): the activations a ForwardPass owns and what they are made of.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/recurrent_state.h"
#include "kv/window_ring.h"
#include "model/delta_net.h"
#include "model/forward.h"
#include "model/per_layer_inputs.h"
#include "tensor/matmul.h"

namespace shardlm {

// What the rope angles of a layer depend on.
struct RopeVariant {
  float base = 0.0f;
  float freq_scale = 1.0f;
  int n_rot = 0;
  bool freq_factors = false;
  friend bool operator==(const RopeVariant&, const RopeVariant&) = default;
};

// Where a layer's KV is: the page pool or the window rings, and its layer index there (-1: the
// layer has none).
struct KvPlace {
  bool ring = false;
  int index = -1;
};

// Every buffer is sized once for max_batch_tokens (B) rows; a batch uses its first rows.
struct ForwardPass::Activations {
  std::vector<float> x;   // [B][n_embd] residual stream
  std::vector<float> xn;  // [B][n_embd] normed input of the current sublayer
  // The attention rows have the current layer's shape (LayerConfig), sized for the widest.
  std::vector<float> q;  // [B][n_head][head_dim_k]
  // Layers with an output gate: attn_q's rows [B][n_head][q | gate], and the gates.
  std::vector<float> q_gated;    // [B][2 × q_dim]
  std::vector<float> attn_gate;  // [B][n_head][head_dim_v]
  std::vector<float> k;          // [B][n_head_kv][head_dim_k]
  std::vector<float> v;          // [B][n_head_kv][head_dim_v]
  std::vector<float> attn;       // [B][n_head][head_dim_v] attention output
  std::vector<float> proj;       // [B][n_embd] attn_output / ffn_down result
  std::vector<float> gate;       // [B][n_ff] gate projection, then SiLU(gate)·up
  std::vector<float> up;         // [B][n_ff]
  // [rope variant][B][n_rot] (cos, sin) per rotated pair: one variant per distinct rope
  // (RopeVariant) among the stage's layers.
  std::vector<float> rope;
  std::vector<RopeVariant> rope_variants;
  std::vector<int> rope_variant_of;  // [stage-local layer]
  // Per-layer inputs (gemma4) of every model layer; the stage reads its own.
  PerLayerInputs per_layer;
  std::vector<float> scores;       // [n_threads][scores_per_worker] AttendTile scratch
  std::vector<int32_t> head_rows;  // [B] batch index of each logits row
  std::vector<int32_t> embd_rows;  // [B] batch index of each embedding row
  std::vector<int32_t> slot_next;  // [n_slots] last position + 1 (−1: slot unused)
  std::vector<Tile> tiles;         // [<= B] attention tiles of the batch
  // Bounded pool with scores: per scoring entry, its slot's pages × kv heads of partial
  // scores ([entry][kv head][page]), where each entry's block starts, and its page count.
  std::vector<float> score_partial;
  std::vector<size_t> score_block;
  std::vector<int32_t> score_entries;  // batch index of each scoring entry
  std::vector<float> score_bounds;     // [n_threads][most pages of a scoring entry]
  size_t score_bounds_stride = 0;
  MatMulScratch scratch;
  // Recurrent layers: their state per slot and their buffers (stages without one: null).
  std::unique_ptr<RecurrentStates> states;
  // Windowed layers under WindowKv::kRing: their KV per slot (stages without one: null).
  std::unique_ptr<WindowRings> rings;
  std::vector<KvPlace> kv_place;  // [stage-local layer]
  DeltaNetScratch delta_net;
  size_t max_ctx = 0;            // positions a sequence can hold: the pool's capacity
  int tile_tokens = 1;           // TileTokensFor(gqa_group), for the largest group
  size_t scores_per_worker = 0;  // AttendTileScratch(tile_tokens × gqa_group, max_ctx), largest
};

}  // namespace shardlm
