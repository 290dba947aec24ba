// WindowRings: the KV of a stage's windowed layers (gemma3, gemma4) kept as a ring of pages per
// sequence (WindowKv::kRing), so a sequence holds only what its next tokens can still read.
//
// A windowed layer's token at position p reads positions [p − W + 1, p]. Each slot owns R pages
// of page_tokens positions; position p lives in ring page (p / page_tokens) % R, so the list that
// maps the sequence's logical pages to ring pages (j → j % R) is the same for every slot and
// attention and the KV write use it like any page list. R is large enough that a batch of up to
// max_batch_tokens positions never overwrites a page a query of the same batch still reads:
//   R = ceil((W − 1 + max(max_batch_tokens, page_tokens)) / page_tokens) + 1.
// Pages that leave the window are overwritten in place: nothing is allocated or freed per token.
//
// State: what a sequence at a page boundary b needs from before b is the W − 1 positions
// [b − W + 1, b) of each layer. Export copies them out and Import writes them back, so the
// window travels like a recurrent layer's state (prefix cache checkpoints, the disk tier, slot
// files, remote stages). The ring still holds those positions after its sequence moved up to
// (R − 1) × page_tokens − W + 1 positions past b, which covers the page the sequence is in.
// State layout per layer, in layer order: K then V, each [n_kv_heads][W − 1] rows of head_dim
// elements of the KV type (KvRowBytes); rows of positions before 0 are zeros.
//
// Goals: memory per slot known up front (R pages), allocated when a slot is first used.
// Non-goals: which positions a token attends (attention.h applies the window).
//
// Thread safety: not thread-safe; during a batch the forward pass's workers write disjoint
// (slot, layer, position) rows and read the rows of positions already written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "kv/page_pool.h"

namespace shardlm {

// One windowed layer with KV of its own: its row shape and its window (positions a token sees,
// its own included).
struct WindowRingLayer {
  KvLayerShape shape;
  int window = 0;
  friend bool operator==(const WindowRingLayer&, const WindowRingLayer&) = default;
};

class WindowRings {
 public:
  // Bytes of one sequence's state in these layers (the layout above).
  static size_t StateBytes(std::span<const WindowRingLayer> layers, KvType kv_type);
  // Pages in one slot's ring (R above), and the bytes of that ring.
  // With max_sequence_pages (0: no bound), a sequence can have no more pages: a ring that
  // large never wraps, so it needs no more.
  static int RingPages(std::span<const WindowRingLayer> layers, int page_tokens,
                       int max_batch_tokens, int max_sequence_pages = 0);
  static size_t SlotBytes(std::span<const WindowRingLayer> layers, int page_tokens, KvType kv_type,
                          int max_batch_tokens, int max_sequence_pages = 0);

  // layers: the stage's windowed layers with KV of their own, in layer order (each window ≥ 1).
  WindowRings(std::vector<WindowRingLayer> layers, int page_tokens, KvType kv_type,
              int max_batch_tokens, int max_sequence_pages = 0);

  int n_layers() const { return int(layers_.size()); }
  int ring_pages() const { return ring_pages_; }
  size_t state_bytes() const { return state_bytes_; }

  // Allocates the slot's ring on its first use (ResourceExhausted when memory is short).
  Status EnsureSlot(int slot);
  // The logical → ring page list, at least n_logical pages long: what attention and the KV
  // write take as a sequence's pages. Grows between batches only.
  void EnsurePages(size_t n_logical);
  PageList pages() const { return page_of_logical_; }
  // The slot's ring, in the pool layout of its layers (layer index: among the ring's layers).
  PagePool& pool(int slot) { return *rings_[size_t(slot)]; }
  const PagePool& pool(int slot) const { return *rings_[size_t(slot)]; }

  // Positions [0, position) of the slot's sequence went through the ring (0: none).
  int32_t position(int slot) const;
  void set_position(int slot, int32_t position) { positions_[size_t(slot)] = position; }

  // The slot's state at page boundary `position` into dst (state_bytes()): NotFound when the
  // ring no longer (or not yet) holds the positions it needs.
  Status Export(int slot, int32_t position, std::span<uint8_t> dst) const;
  // Writes a state at `position` into the slot's ring: its next batch continues there.
  Status Import(int slot, int32_t position, std::span<const uint8_t> src);

 private:
  // The ring page that holds `position`.
  PageId RingPage(int32_t position) const {
    return PageId((position / page_tokens_) % ring_pages_);
  }
  // The oldest position the slot's ring still holds.
  int32_t OldestHeld(int slot) const;
  // Calls fn(layer, kv, head, position, state offset) for every row of a state at `position`.
  template <typename Fn>
  void ForEachStateRow(int32_t position, Fn&& fn) const;

  std::vector<WindowRingLayer> layers_;
  int page_tokens_;
  KvType kv_type_;
  int widest_;  // the widest window
  int ring_pages_;
  size_t state_bytes_;
  std::vector<std::unique_ptr<PagePool>> rings_;  // [slot], null until first used
  std::vector<int32_t> positions_;                // [slot]
  std::vector<PageId> page_of_logical_;           // [logical page] → ring page
};

}  // namespace shardlm
