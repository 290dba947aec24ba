// Panel repack of a stage's weights: every Q4_K / Q6_K matrix the stage multiplies by is
// copied into 16-row panels (tensor/panels.h) when this CPU has a panel kernel for its type,
// and its view is pointed at the copy. Batched decode and prefill run several times faster
// on panels; single-token decode streams the same bytes (Q4_K: +2.8%).
//
// Goals: repack only the stage's own matrices (a split stage holds its share, nothing
// more); give the file's pages of a repacked matrix back (madvise) as soon as it is copied,
// so the process holds each weight about once, also while loading (read the file pages
// after the repack, not before); both cores at load (a 0.6B model takes about a second).
// Non-goals: the token embedding (looked up by row; it stays in the file, also when it is
// the tied head: then the head alone is repacked), other types, caching panels on disk.
//
// Thread safety: RepackPanels runs its own threads; the views must not be in use.
// Lifetime: the returned store owns the panels the views point into.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/huge_pages.h"
#include "model/weights.h"

namespace shardlm {

class PanelStore {
 public:
  PanelStore() = default;
  PanelStore(PanelStore&&) = default;
  PanelStore& operator=(PanelStore&&) = default;

  size_t bytes() const { return bytes_; }
  int matrices() const { return matrices_; }

 private:
  friend PanelStore RepackPanels(StageWeights* weights);
  HugePageBuffer arena_;  // every matrix's panels, 64-byte aligned
  size_t bytes_ = 0;
  int matrices_ = 0;
};

// Repacks weights' matrices in place (see the file comment); an empty store when this CPU
// has no panel kernels.
PanelStore RepackPanels(StageWeights* weights);

}  // namespace shardlm
