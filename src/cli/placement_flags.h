// Placement flags: `--devices`, `--layer-split` and `--allow-shard-uid`, shared by serve, run
// and bench, so each flag is declared once and every command reports a bad value the same way.
//
// Goals: every malformed value is an error before the model is loaded (placement.h does
// the parsing; this adds the check that the two lists have the same length); one log line
// per stage (layers, device, threads, weight and KV bytes) for whoever starts a split.
// Non-goals: planning layer ranges (placement.h, at pipeline creation, where the model's
// layer costs are known), loading or connecting stages.
//
// Thread safety: plain functions and values.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "pipeline/model_loader.h"
#include "pipeline/placement.h"
#include "pipeline/stage.h"

namespace shardlm::cli {

struct PlacementFlags {
  std::string devices;                  // "" → one "cpu" stage
  std::string layer_split;              // "" → equal work per token per stage
  std::vector<uid_t> allow_shard_uids;  // shard daemon uids trusted besides our own
};

void DeclarePlacementFlags(CLI::App& cmd, PlacementFlags& flags);

// Parses both flags against this machine's core count; progress on stderr, model_path left
// for the caller to set. Errors: those of ParseDevices and ParseLayerSplit, and a weight
// count that differs from the device count.
Result<PlacementOptions> ParsePlacement(const PlacementFlags& flags);

// How to load the model file for this placement, with progress on stderr. Unsplit, the
// whole file is paged in here; split, nothing is: each local stage pages in only its own
// tensors when it is made, and the layers of remote stages are never touched here.
LoadOptions ModelLoadOptions(const PlacementOptions& placement);

// "stage 0: layers [0, 14) on cpu:0 (1 thread), weights 180.3 MiB, KV 56.0 MiB", one line
// per stage ("(remote, 1 thread)" for a stage in a shard daemon).
std::vector<std::string> DescribePlacement(const std::vector<StageInfo>& stages);

}  // namespace shardlm::cli
