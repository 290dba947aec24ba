// Batch types: the tokens one forward pass computes, as the engine builds them, the
// pipeline hands them from stage to stage and the shard protocol puts them on the wire.
//
// Goals: plain values with no dependency on the forward pass, so the layers below the
// model (the wire format, ipc/) can carry batches without knowing how they are computed.
// Non-goals: validation (the forward pass checks every entry against its pools).
//
// Thread safety: values only. Lifetime: values only.
#pragma once

#include <cstdint>
#include <span>

namespace shardlm {

// One token of a batch.
struct BatchEntry {
  int32_t token = 0;     // token id (stage 0 only; ignored when hidden rows are given)
  int32_t position = 0;  // position in its sequence
  int32_t slot = 0;      // index into the batch's page lists (one per sequence)
  bool wants_logits = false;
  // Last stage: also give this entry's final hidden row after output_norm (no LM head).
  bool wants_embedding = false;
  // Bounded KV pool, `qk` selection: every stage scores the slot's pages for this entry's
  // queries (kv/pager.h).
  bool score_pages = false;
};

// Output rows of the last stage for a batch: rows wanting logits, rows wanting embeddings.
struct BatchOutputRows {
  int logits = 0;
  int embeddings = 0;
};

inline BatchOutputRows CountOutputRows(std::span<const BatchEntry> batch) {
  BatchOutputRows rows;
  for (const BatchEntry& e : batch) {
    rows.logits += e.wants_logits ? 1 : 0;
    rows.embeddings += e.wants_embedding ? 1 : 0;
  }
  return rows;
}

// The same for a batch that may only move pages (apply_only: a prefill worker computes it
// elsewhere), which gives no rows.
inline BatchOutputRows CountOutputRows(std::span<const BatchEntry> batch, bool apply_only) {
  return apply_only ? BatchOutputRows() : CountOutputRows(batch);
}

}  // namespace shardlm
