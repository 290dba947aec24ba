// `--devices` / `--layer-split` / `--allow-shard-uid` for serve, run and bench. See
// placement_flags.h.
#include "cli/placement_flags.h"

#include <fmt/format.h>

#include <thread>

namespace shardlm::cli {
namespace {

std::string MiB(size_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

}  // namespace

void DeclarePlacementFlags(CLI::App& cmd, PlacementFlags& flags) {
  cmd.add_option("--devices", flags.devices,
                 "Stages in pipeline order, comma-separated: cpu (every core), cpu:A or "
                 "cpu:A-B (pinned cores), unix:NAME (a `shardlm shard` daemon's socket: a NAME "
                 "without '/' is in $XDG_RUNTIME_DIR/shardlm/, else /tmp/shardlm-$UID/). "
                 "Default: cpu");
  cmd.add_option("--allow-shard-uid", flags.allow_shard_uids,
                 "Also trust shard daemons that run as this uid (repeatable; default: only "
                 "daemons of this process's own uid)");
  cmd.add_option("--layer-split", flags.layer_split,
                 "One weight per device, e.g. 1,1 or 0.4,0.6: each stage's share of the "
                 "multiply-adds per token (weight elements; default: equal shares)");
}

Result<PlacementOptions> ParsePlacement(const PlacementFlags& flags) {
  const unsigned hardware = std::thread::hardware_concurrency();
  PlacementOptions placement;
  placement.show_progress = true;
  SHARDLM_ASSIGN_OR_RETURN(placement.devices,
                           ParseDevices(flags.devices, hardware > 0 ? int(hardware) : 1));
  SHARDLM_ASSIGN_OR_RETURN(placement.layer_split, ParseLayerSplit(flags.layer_split));
  placement.allowed_shard_uids = flags.allow_shard_uids;
  const size_t n_weights = placement.layer_split.size();
  if (n_weights > 0 && n_weights != placement.devices.size()) {
    return InvalidArgument(
        "--layer-split '{}' has {} weights but --devices '{}' names {} stages; give one weight "
        "per device",
        flags.layer_split, n_weights, flags.devices.empty() ? "cpu" : flags.devices,
        placement.devices.size());
  }
  return placement;
}

std::vector<std::string> DescribePlacement(const std::vector<StageInfo>& stages) {
  std::vector<std::string> lines;
  for (const StageInfo& s : stages) {
    std::string line =
        fmt::format("stage {}: layers [{}, {}) on {} ({}{} thread{}), weights {}, KV {}", s.index,
                    s.layers.begin, s.layers.end, s.device, s.remote ? "remote, " : "", s.threads,
                    s.threads == 1 ? "" : "s", MiB(s.weight_bytes), MiB(s.kv_bytes));
    if (s.ring_bytes_per_sequence > 0) {
      line += fmt::format(" + window rings {} per sequence", MiB(s.ring_bytes_per_sequence));
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

LoadOptions ModelLoadOptions(const PlacementOptions& placement) {
  LoadOptions load;
  load.show_progress = true;
  // One local stage over every layer borrows this binding and pages nothing in itself.
  load.prefault = placement.devices.empty() ||
                  (placement.devices.size() == 1 && !placement.devices[0].remote());
  load.repack = load.prefault;  // the same: only a borrowed binding computes
  if (load.repack && !placement.devices.empty()) load.repack_cores = placement.devices[0].cores;
  return load;
}

}  // namespace shardlm::cli
