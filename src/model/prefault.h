// Prefault: read weight bytes once, page by page, so that the first forward pass does not
// stall on page faults and benchmarks do not measure disk reads.
//
// Goals: a stage touches only its own tensors (PrefaultStage: its layers, plus the
// embedding on stage 0 and the output norm and head on the last stage), which is what keeps
// each process's resident memory at its share of the model; an optional progress line
// ("loading <label>: NN%") on stderr.
// Non-goals: locking pages in memory (mlock), read-ahead hints, repacking.
//
// Thread safety: free functions over immutable mappings; any thread may call them.
// Lifetime: the bytes must stay mapped during the call only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "model/weights.h"

namespace shardlm {

// Reads one byte of every 4 KiB page the ranges cover, in order. With show_progress, prints
// the percentage every 10% (one line rewritten on a terminal) and a final line with the
// MiB paged in. Returns the bytes covered.
size_t PrefaultBytes(std::span<const std::span<const uint8_t>> ranges, const std::string& label,
                     bool show_progress);

// PrefaultBytes over StageTensorBytes(weights): exactly the tensors the stage computes with.
size_t PrefaultStage(const StageWeights& weights, const std::string& label = "",
                     bool show_progress = false);

}  // namespace shardlm
