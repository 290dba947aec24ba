// RecurrentStates: the fixed-size state of each sequence in a stage's recurrent layers (qwen35's
// gated DeltaNet): per slot and layer, the conv history and the delta-rule state, and how many
// positions of the sequence they hold.
//
// A recurrent layer has no KV pages: what it remembers of a sequence is this state, updated in
// place by every token. So unlike pages, the state cannot be shared between sequences nor
// rewound: a sequence resumes only at the position its state holds (or at 0, which resets
// it). The forward pass checks that, so a batch that would continue a sequence from a state it
// does not hold is an error, never a wrong answer.
// Layout per slot: for each recurrent layer of the stage, in layer order,
// conv [conv_kernel − 1][conv_channels] then state [n_v_heads][head_dim_v][head_dim_k], float32;
// slot_bytes() per slot, contiguous (what a snapshot of the slot's state copies).
//
// Checkpoint: besides its live state, each slot keeps a copy of the state as it was at the last
// page boundary its sequence passed (the forward pass copies it when a batch crosses one): the
// state a prefix of whole pages resumes from, which the prefix cache keeps beside those pages.
// A batch that ends mid-page would otherwise leave no state any cached prefix can use.
//
// Goals: memory per slot known up front (2 × n_layers × (conv + state)), allocated when a slot
// is first used, never in a batch's steady state.
// Non-goals: where checkpoints are kept beyond the slot (the caller copies bytes out and back).
//
// Thread safety: not thread-safe; the forward pass's workers write disjoint (slot, layer,
// head) parts during a batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace shardlm {

class RecurrentStates {
 public:
  // n_layers recurrent layers, each with conv_floats + state_floats floats per slot.
  RecurrentStates(int n_layers, int conv_floats, int state_floats);

  int n_layers() const { return n_layers_; }
  int n_slots() const { return int(positions_.size()); }
  size_t slot_floats() const { return slot_floats_; }
  size_t slot_bytes() const { return slot_floats_ * sizeof(float); }

  // Makes room for slots [0, n) (new slots hold no positions).
  void EnsureSlots(int n);

  // The layer's conv history and delta-rule state of `slot` (layer: index among the stage's
  // recurrent layers).
  float* conv(int slot, int layer) { return &data_[Offset(slot, layer)]; }
  float* state(int slot, int layer) { return &data_[Offset(slot, layer) + size_t(conv_floats_)]; }
  // The same parts of the slot's page-boundary checkpoint.
  float* checkpoint_conv(int slot, int layer) { return &checkpoints_[Offset(slot, layer)]; }
  float* checkpoint_state(int slot, int layer) {
    return &checkpoints_[Offset(slot, layer) + size_t(conv_floats_)];
  }

  // Positions [0, position) of the slot's sequence are folded into its state.
  int32_t position(int slot) const { return positions_[size_t(slot)]; }
  void set_position(int slot, int32_t position) { positions_[size_t(slot)] = position; }
  // The checkpoint holds the state at this position (a page boundary), or -1: none.
  int32_t checkpoint_position(int slot) const { return checkpoint_positions_[size_t(slot)]; }
  void set_checkpoint_position(int slot, int32_t position) {
    checkpoint_positions_[size_t(slot)] = position;
  }
  // Zeroes the slot's state: a sequence starting at position 0 (and forgets its checkpoint).
  void Reset(int slot);

  // The slot's state at `position` (slot_bytes()): the live state when it holds that many
  // positions, else the checkpoint when it is at that position; empty when neither is.
  std::span<const uint8_t> BytesAt(int slot, int32_t position) const;
  // Replaces the slot's live state with `bytes`, the state at `position`.
  Status Restore(int slot, std::span<const uint8_t> bytes, int32_t position);

 private:
  size_t Offset(int slot, int layer) const {
    return size_t(slot) * slot_floats_ + size_t(layer) * size_t(conv_floats_ + state_floats_);
  }
  int n_layers_;
  int conv_floats_;
  int state_floats_;
  size_t slot_floats_;
  std::vector<float> data_;                    // [slot][layer][conv | state]
  std::vector<float> checkpoints_;             // the same layout, at each slot's last page boundary
  std::vector<int32_t> positions_;             // [slot]
  std::vector<int32_t> checkpoint_positions_;  // [slot], -1: none
};

}  // namespace shardlm
