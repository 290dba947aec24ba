// SlotFile: one slot's saved sequence (`POST /slots/{id}?action=save`) — its token ids and
// every stage's KV pages — as a snapshot file of kind kSlot (snapshot_file.h: magic
// "SHLMSLOT", the header, checksummed sections), so a slot file is validated exactly like a
// cache block and neither is ever read as the other.
//
// Contents (header n_tokens = the sequence's length n; block and parent hash zero):
//   section 0:     tokens, dtype i32, dims {n}, stage 0, layers [0, 0): the token ids of
//                  positions [0, n)
//   section 1 + s: kv_page of stage s (every stage, in pipeline order), dims {page_tokens,
//                  n_kv_heads, head_dim, ceil(n / page_tokens)}: the stage's pages of the
//                  sequence back to back; positions at or past n in the last page are
//                  whatever the pool held (never read as KV)
// and nothing else. The header's layout fingerprint covers the model, the split into
// stages, the page geometry and the KV type (snapshot_layout.h): a file saved under any
// other is refused, naming the mismatch.
//
// Goals: one format with the cache blocks (no second container); every truncation, flipped
// byte or foreign file an InvalidData Status, never a crash or different data; decoding
// without copying the KV (views into the file bytes).
// Non-goals: file I/O and folders (atomic_file.h, confined_path.h), what a server does
// with the sequence (runtime/scheduler_slots.cc).
//
// Thread safety: pure functions. Lifetime: a SlotImage's page views point into the bytes it
// was decoded from.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "cache/snapshot_layout.h"

namespace shardlm {

// A decoded slot file: token ids and, per stage, n_pages pages back to back.
struct SlotImage {
  std::vector<int32_t> tokens;
  int n_pages = 0;
  std::vector<std::span<const uint8_t>> stage_pages;  // [stage], views into the file
};

// The pages n tokens need: ceil(n / page_tokens).
int SlotPages(const SnapshotLayout& layout, int n_tokens);

// The file bytes. `stage_pages[s]` holds stage s's SlotPages(n) pages; InvalidArgument when
// tokens is empty or a stage's bytes do not match the layout.
Result<std::vector<uint8_t>> EncodeSlotFile(const SnapshotLayout& layout,
                                            std::span<const int32_t> tokens,
                                            std::span<const std::span<const uint8_t>> stage_pages);

// Validates every byte and checks that the file was saved under `layout`.
Result<SlotImage> DecodeSlotFile(std::span<const uint8_t> file, const SnapshotLayout& layout);

// The exact size of the file of a sequence of n_tokens (>= 1) under `layout` (a bound for
// reads).
uint64_t SlotFileBytes(const SnapshotLayout& layout, int n_tokens);

}  // namespace shardlm
