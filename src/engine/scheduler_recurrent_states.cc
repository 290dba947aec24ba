// RecurrentCheckpoints: recurrent state kept beside the prefix cache (see
// scheduler_recurrent_states.h).
#include "engine/scheduler_recurrent_states.h"

#include <algorithm>

namespace shardlm {

RecurrentCheckpoints::RecurrentCheckpoints(Pipeline* pipeline, int page_tokens, int n_slots,
                                           SchedulerDiskCache* disk)
    : pipeline_(pipeline),
      disk_(disk),
      page_tokens_(page_tokens),
      capacity_(kStatesPerSlot * std::max(n_slots, 1)),
      state_bytes_(pipeline != nullptr ? pipeline->state_bytes() : 0) {}

void RecurrentCheckpoints::Remember(int slot, const BlockHash& hash, int n_blocks,
                                    Pipeline* source) {
  if (!enabled() || n_blocks <= 0 || states_.contains(hash)) return;
  std::vector<uint8_t> bytes(state_bytes_);
  // NotFound: the slot's state moved past that block (its last batch crossed another page
  // boundary) or never reached it; the block simply keeps no state.
  Pipeline& from = source != nullptr ? *source : *pipeline_;
  if (!from.ExportState(slot, n_blocks * page_tokens_, bytes).ok()) return;
  Persist(hash, n_blocks, bytes);
  Keep(hash, std::move(bytes));
}

void RecurrentCheckpoints::Adopt(const BlockHash& hash, int n_blocks,
                                 std::span<const uint8_t> state) {
  if (!enabled() || n_blocks <= 0 || state.size() != state_bytes_) return;
  Persist(hash, n_blocks, state);
  auto kept = states_.find(hash);
  if (kept != states_.end()) {
    recency_.splice(recency_.begin(), recency_, kept->second.recency);
    return;
  }
  Keep(hash, std::vector<uint8_t>(state.begin(), state.end()));
}

void RecurrentCheckpoints::Persist(const BlockHash& hash, int n_blocks,
                                   std::span<const uint8_t> bytes) {
  if (disk_ != nullptr && !disk_->ContainsState(hash)) {
    disk_->PersistState(hash, n_blocks * page_tokens_, bytes);
  }
}

void RecurrentCheckpoints::Keep(const BlockHash& hash, std::vector<uint8_t> bytes) {
  if (int(states_.size()) >= capacity_) {
    states_.erase(recency_.back());
    recency_.pop_back();
  }
  recency_.push_front(hash);
  states_.emplace(hash, Kept{std::move(bytes), recency_.begin()});
}

int RecurrentCheckpoints::Resume(int slot, std::span<const BlockHash> hashes, int max_blocks) {
  if (!enabled()) return 0;
  for (int n = std::min(max_blocks, int(hashes.size())); n > 0; --n) {
    const BlockHash& hash = hashes[size_t(n - 1)];
    auto kept = states_.find(hash);
    if (kept == states_.end() && disk_ != nullptr && disk_->ContainsState(hash)) {
      Result<std::vector<uint8_t>> loaded = disk_->LoadState(hash);
      if (!loaded.ok() || loaded->size() != state_bytes_) continue;
      Keep(hash, std::move(loaded).value());
      kept = states_.find(hash);
    }
    if (kept == states_.end()) continue;
    if (!pipeline_->ImportState(slot, n * page_tokens_, kept->second.bytes).ok()) return 0;
    recency_.splice(recency_.begin(), recency_, kept->second.recency);
    ++resumed_;
    return n;
  }
  return 0;
}

void RecurrentCheckpoints::Clear() {
  states_.clear();
  recency_.clear();
}

}  // namespace shardlm
