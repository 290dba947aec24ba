// RecurrentStates: per-slot recurrent layer state (see recurrent_state.h).
#include "kv/recurrent_state.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace shardlm {

RecurrentStates::RecurrentStates(int n_layers, int conv_floats, int state_floats)
    : n_layers_(n_layers),
      conv_floats_(conv_floats),
      state_floats_(state_floats),
      slot_floats_(size_t(n_layers) * size_t(conv_floats + state_floats)) {
  SHARDLM_CHECK(n_layers >= 0 && conv_floats >= 0 && state_floats >= 0);
}

void RecurrentStates::EnsureSlots(int n) {
  if (n <= n_slots()) return;
  data_.resize(size_t(n) * slot_floats_, 0.0f);
  checkpoints_.resize(size_t(n) * slot_floats_, 0.0f);
  positions_.resize(size_t(n), 0);
  checkpoint_positions_.resize(size_t(n), -1);
}

void RecurrentStates::Reset(int slot) {
  std::fill_n(&data_[size_t(slot) * slot_floats_], slot_floats_, 0.0f);
  positions_[size_t(slot)] = 0;
  checkpoint_positions_[size_t(slot)] = -1;
}

std::span<const uint8_t> RecurrentStates::BytesAt(int slot, int32_t position) const {
  if (slot < 0 || slot >= n_slots() || position <= 0) return {};
  const std::vector<float>* source = nullptr;
  if (positions_[size_t(slot)] == position) {
    source = &data_;
  } else if (checkpoint_positions_[size_t(slot)] == position) {
    source = &checkpoints_;
  } else {
    return {};
  }
  return {reinterpret_cast<const uint8_t*>(&(*source)[size_t(slot) * slot_floats_]), slot_bytes()};
}

Status RecurrentStates::Restore(int slot, std::span<const uint8_t> bytes, int32_t position) {
  if (slot < 0 || slot >= n_slots()) {
    return InvalidArgument("recurrent state: slot {} is outside [0, {})", slot, n_slots());
  }
  if (bytes.size() != slot_bytes() || position < 0) {
    return InvalidArgument("recurrent state: {} bytes at position {} (a slot holds {} bytes)",
                           bytes.size(), position, slot_bytes());
  }
  std::memcpy(&data_[size_t(slot) * slot_floats_], bytes.data(), bytes.size());
  positions_[size_t(slot)] = position;
  checkpoint_positions_[size_t(slot)] = -1;
  return Status::Ok();
}

}  // namespace shardlm
