// Panel repack of a stage's weights: every Q4_K / Q6_K matrix the stage multiplies by is
// copied into 16-row panels (tensor/panels.h) when this CPU has a panel kernel for its type,
// and its view is pointed at the copy. Batched decode and prefill run several times faster
// on panels; single-token decode streams the same bytes (Q4_K: +2.8%).
//
// Goals: repack only the stage's own matrices (which ones: the tensor list of
// tensor_specs.h; a split stage holds its share, nothing more); give the file's pages of a
// repacked matrix back (madvise) as soon as it is copied, so the process holds each weight
// about once, also while loading (read the file pages after the repack, not before); the
// copies written by the threads that will compute with them (the stage's ThreadPool, pinned
// to the stage's cores when its device is), so that each page is first touched, and placed,
// near the cores that read it every step; every thread at load (a 0.6B model takes about a
// second on two cores); running out of memory is an error the caller reports, naming the
// size, not an abort.
// Non-goals: the token embedding (looked up by row; it stays in the file, also when it is
// the tied head: then the head alone is repacked), other types, caching panels on disk.
//
// Thread safety: RepackPanels runs on `threads` (the caller must be free to run a loop on
// it); the views must not be in use.
// Lifetime: the returned store owns the panels the views point into.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/huge_pages.h"
#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"

namespace shardlm {

class PanelStore {
 public:
  PanelStore() = default;
  PanelStore(PanelStore&&) = default;
  PanelStore& operator=(PanelStore&&) = default;

  size_t bytes() const { return bytes_; }
  int matrices() const { return matrices_; }

 private:
  friend Result<PanelStore> RepackPanels(const ModelConfig& config, StageWeights* weights,
                                         ThreadPool& threads);
  HugePageBuffer arena_;  // every matrix's panels, 64-byte aligned
  size_t bytes_ = 0;
  int matrices_ = 0;
};

// Repacks the matrices of `weights` (bound for `config`) in place, on `threads` (see the
// file comment); an empty store when this CPU has no panel kernels. Errors:
// ResourceExhausted, naming the bytes, when the panels cannot be allocated (nothing is
// repacked then).
Result<PanelStore> RepackPanels(const ModelConfig& config, StageWeights* weights,
                                ThreadPool& threads);

}  // namespace shardlm
