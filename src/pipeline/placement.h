// Placement: which layers run where — parsing `--devices` and `--layer-split` and cutting
// a model's layers into one contiguous range per device.
//
// Devices (comma-separated, one per stage, in pipeline order):
//   cpu          every core, threads unpinned (or --threads of them)
//   cpu:A        core A, one pinned thread
//   cpu:A-B      cores A..B inclusive, one pinned thread per core
//   unix:NAME    a remote stage served by `shardlm shard --listen unix:NAME`: a NAME without
//                '/' is a socket in the private socket folder (ipc/socket_dir.h), a path
//                with '/' is used as given; resolved when the stage connects
// Layer split: one positive weight per device ("1,1", "0.4,0.6"); stage i gets the share
// w_i / Σw of the work per token, rounded to whole layers, at least one layer each. No split
// given: equal weights, i.e. equal work. The work of a stage is the multiply-adds one token
// costs it: the weight elements of its layers (blk.N.* tensors), plus the LM head's for the
// last stage (every token that wants logits multiplies by the whole head: in a 0.6B model
// as many elements as 10 of its 28 layers), while the embedding on stage 0 is a row lookup
// and counts nothing. Elements, not bytes: when stages overlap on several streams, a stage
// step is compute-bound, and its time follows multiply-adds whatever the quant type (the
// Q6_K head of a Q4_K_M model measured ~11 layers' time; its bytes count it as 14.5, its
// elements as 10). Each stage's bytes are in the startup log and GET /props.
//
// Goals: every impossible request is a clear InvalidArgument before anything is loaded
// (more stages than layers, a weight count that differs from the device count, a
// non-positive weight, cores this machine does not have, an empty path).
// Non-goals: loading stages (local_stage.h, remote_stage.h), measuring device speed.
//
// Thread safety: pure functions.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace shardlm {

struct DeviceSpec {
  enum class Kind { kCpu, kUnix };
  Kind kind = Kind::kCpu;
  std::vector<int> cores;        // kCpu: pinned cores; empty = every core, unpinned
  std::string socket_path;       // kUnix: as written after "unix:"
  std::string ToString() const;  // as it would be written on the command line
  bool remote() const { return kind != Kind::kCpu; }
};

// Where a pipeline's stages run: what serve, run and bench take from --devices and
// --layer-split, carried unchanged by the scheduler, generator, sequence and bench options
// down to the pipeline that builds the stages.
struct PlacementOptions {
  std::vector<DeviceSpec> devices = {};  // one per stage, in pipeline order; empty: one "cpu"
  std::vector<double> layer_split = {};  // one weight per device; empty: equal work per token
  std::string model_path = {};           // the model's file, opened by remote stages
  // Uids whose shard daemons are trusted besides this process's own (`--allow-shard-uid`).
  std::vector<uid_t> allowed_shard_uids = {};
  bool show_progress = false;  // stages of a split page in with progress on stderr
};

// "" parses as one device "cpu". n_cores_available bounds core numbers.
Result<std::vector<DeviceSpec>> ParseDevices(std::string_view text, int n_cores_available);

// "" parses as an empty list (equal weights).
Result<std::vector<double>> ParseLayerSplit(std::string_view text);

// Work per token of each layer: the elements of its weight tensors (blk.N.*), [n_layers].
std::vector<size_t> LayerCosts(const GgufFile& file, const ModelConfig& config);

// Work per token of the LM head: the elements of output.weight, or of token_embd.weight
// when the head is tied to it.
size_t HeadCost(const GgufFile& file);

// One range per weight (weights empty: `n_stages` equal weights), covering [0, n_layers)
// in order. Boundary i is the layer count whose cumulative cost comes closest to the
// weights' cumulative share of the whole cost (layers + head_cost, which the last stage
// holds), kept so that every stage has at least one layer. Costs are in any one unit.
Result<std::vector<LayerRange>> PlanLayerRanges(const std::vector<size_t>& layer_costs,
                                                size_t n_stages, const std::vector<double>& weights,
                                                size_t head_cost = 0);

// Moves every boundary of `ranges` that would separate a layer reading shared KV from the
// layer it reads (gemma4's last layers) down to that source layer, so both run in one stage;
// returns one line per moved boundary (for the startup log). InvalidArgument when a moved
// boundary leaves a stage without layers (too many stages for where the model shares KV).
Result<std::vector<std::string>> KeepSharedKvInOneStage(const ModelConfig& config,
                                                        std::vector<LayerRange>& ranges);

}  // namespace shardlm
