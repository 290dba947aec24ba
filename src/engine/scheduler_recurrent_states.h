// RecurrentCheckpoints: the prefix cache's memory of recurrent state (a model with recurrent
// layers: qwen35's gated DeltaNet). Cached pages alone do not resume such a sequence: its
// recurrent layers need their state as it was after the cached prefix. So when a sequence ends,
// its state at its last published block (the stages' page-boundary checkpoint) is kept under
// that block's chain hash, and a request whose prompt continues a cached chain resumes at the
// deepest block of the chain that has a kept state: the state is imported into its slot in
// every stage, and the cached pages after that block are recomputed.
//
// Goals: a next turn of a conversation skips every whole page its previous turn published, with
// the text of a cold run (the state resumes bitwise); bounded memory (the most recent
// kStatesPerSlot per slot, least recently used out first).
// With a disk tier each kept state is also persisted beside its block, so a restarted server
// resumes a conversation from disk: a block whose state is not in memory is looked up there.
// A restored slot file's state (its sequence's at its last whole page) is kept the same way,
// so the next turn of a restored conversation resumes like that of one that ran here.
// Non-goals: the slot file format (cache/slot_file.h); choosing which blocks to record (the
// caller names them).
//
// Thread safety: the engine thread only. Lifetime: references the Pipeline.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "engine/scheduler_disk_cache.h"
#include "pipeline/pipeline.h"

namespace shardlm {

class RecurrentCheckpoints {
 public:
  // States kept per slot (each a whole sequence's state: megabytes on a real model): a
  // conversation's latest turns.
  static constexpr int kStatesPerSlot = 4;
  // pipeline: null or a model without recurrent layers gives a disabled object; it keeps
  // kStatesPerSlot × n_slots states. disk: the disk tier, or null.
  RecurrentCheckpoints(Pipeline* pipeline, int page_tokens, int n_slots,
                       SchedulerDiskCache* disk = nullptr);

  bool enabled() const { return state_bytes_ > 0; }
  // Keeps the slot's state after n_blocks whole pages under `hash`, the chain hash of block
  // n_blocks − 1, unless one is kept already or the slot no longer holds that position. The
  // state is read from `source` (a prefill worker that computed it), else from the pipeline.
  void Remember(int slot, const BlockHash& hash, int n_blocks, Pipeline* source = nullptr);
  // Keeps `state`, a sequence's state after n_blocks whole pages (a restored slot file's),
  // under `hash` as Remember would: the state of the same tokens is the same, so one kept
  // already stays. A state of another size is ignored.
  void Adopt(const BlockHash& hash, int n_blocks, std::span<const uint8_t> state);
  // How many leading blocks of `hashes` (at most max_blocks) the slot resumes: the deepest with
  // a kept state, which is imported into the slot in every stage; 0 when there is none or the
  // import failed.
  int Resume(int slot, std::span<const BlockHash> hashes, int max_blocks);
  // Forgets the states in memory (the disk keeps its own).
  void Clear();

  int count() const { return int(states_.size()); }
  uint64_t resumed() const { return resumed_; }

 private:
  struct Kept {
    std::vector<uint8_t> bytes;
    std::list<BlockHash>::iterator recency;
  };
  // Keeps `bytes` as the state of `hash` (the least recently used goes past capacity).
  void Keep(const BlockHash& hash, std::vector<uint8_t> bytes);
  // Persists `bytes` (the state after n_blocks) with the disk tier, unless it holds it.
  void Persist(const BlockHash& hash, int n_blocks, std::span<const uint8_t> bytes);

  Pipeline* pipeline_;
  SchedulerDiskCache* disk_;
  int page_tokens_;
  int capacity_;
  size_t state_bytes_ = 0;
  std::unordered_map<BlockHash, Kept> states_;
  std::list<BlockHash> recency_;  // most recent first
  uint64_t resumed_ = 0;
};

}  // namespace shardlm
