// Placement (placement.h): `--devices` and `--layer-split` parsing, per-layer costs (weight
// elements), and the greedy cut of cumulative layer costs at the weights' cumulative shares.
#include "pipeline/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

namespace shardlm {
namespace {

constexpr std::string_view kDeviceForms = "cpu, cpu:A, cpu:A-B or unix:PATH";

std::string_view Trim(std::string_view text) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Splits at commas, trimming each item; an empty item is an error naming its position.
Result<std::vector<std::string_view>> SplitItems(std::string_view text, std::string_view flag) {
  std::vector<std::string_view> items;
  for (;;) {
    const size_t comma = text.find(',');
    const std::string_view item = Trim(text.substr(0, comma));
    if (item.empty()) {
      return InvalidArgument("{}: item {} is empty (write a comma-separated list, no ',,')", flag,
                             items.size() + 1);
    }
    items.push_back(item);
    if (comma == std::string_view::npos) return items;
    text.remove_prefix(comma + 1);
  }
}

// A whole decimal core number: digits only, no sign, no overflow.
Result<int> ParseCore(std::string_view digits, std::string_view item) {
  int core = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), core);
  if (digits.empty() || digits.front() == '-' || digits.front() == '+' || ec != std::errc() ||
      end != digits.data() + digits.size()) {
    return InvalidArgument("--devices: '{}': '{}' is not a core number (expected {})", item, digits,
                           kDeviceForms);
  }
  return core;
}

Result<DeviceSpec> ParseCpu(std::string_view item, int n_cores_available) {
  DeviceSpec device;
  device.kind = DeviceSpec::Kind::kCpu;
  if (item == "cpu") return device;
  const std::string_view cores = item.substr(4);  // after "cpu:"
  const size_t dash = cores.find('-', 1);         // position 0 would be a sign
  SHARDLM_ASSIGN_OR_RETURN(const int first, ParseCore(cores.substr(0, dash), item));
  int last = first;
  if (dash != std::string_view::npos) {
    SHARDLM_ASSIGN_OR_RETURN(last, ParseCore(cores.substr(dash + 1), item));
  }
  if (last < first) {
    return InvalidArgument("--devices: '{}': the range {}-{} is reversed (write cpu:{}-{})", item,
                           first, last, last, first);
  }
  if (last >= n_cores_available) {
    return InvalidArgument(
        "--devices: '{}': core {} does not exist; this machine has {} cores (0-{})", item, last,
        n_cores_available, n_cores_available - 1);
  }
  for (int core = first; core <= last; ++core) device.cores.push_back(core);
  return device;
}

Result<DeviceSpec> ParseDevice(std::string_view item, int n_cores_available) {
  if (item == "cpu" || item.starts_with("cpu:")) return ParseCpu(item, n_cores_available);
  if (item.starts_with("unix:")) {
    DeviceSpec device;
    device.kind = DeviceSpec::Kind::kUnix;
    device.socket_path = std::string(item.substr(5));
    if (device.socket_path.empty()) {
      return InvalidArgument("--devices: '{}' has no socket path (write unix:/path/to/s.sock)",
                             item);
    }
    return device;
  }
  return InvalidArgument("--devices: unknown device '{}' (expected {})", item, kDeviceForms);
}

Result<double> ParseWeight(std::string_view item, size_t index) {
  std::string_view digits = item;
  if (digits.starts_with('+')) digits.remove_prefix(1);
  double weight = 0.0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), weight);
  if (ec == std::errc::invalid_argument || end != digits.data() + digits.size()) {
    return InvalidArgument("--layer-split: weight {} '{}' is not a number", index + 1, item);
  }
  if (ec != std::errc() || !std::isfinite(weight) || !(weight > 0.0)) {
    return InvalidArgument(
        "--layer-split: weight {} is '{}'; every weight must be a finite number > 0", index + 1,
        item);
  }
  return weight;
}

// "blk.N." → N, or -1 for any other name.
int BlockIndex(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (!name.starts_with(kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  int layer = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') return -1;
  return layer;
}

// The count b in [lo, hi] whose cumulative bytes come closest to target (the lower on a tie).
int ClosestBoundary(const std::vector<double>& cumulative, int lo, int hi, double target) {
  int best = lo;
  for (int b = lo + 1; b <= hi; ++b) {
    if (std::abs(cumulative[b] - target) < std::abs(cumulative[best] - target)) best = b;
  }
  return best;
}

}  // namespace

std::string DeviceSpec::ToString() const {
  if (kind == Kind::kUnix) return "unix:" + socket_path;
  if (cores.empty()) return "cpu";
  // Runs of consecutive cores; ParseDevices only makes one run, so this is "cpu:A[-B]".
  std::string text = "cpu:";
  for (size_t i = 0; i < cores.size();) {
    size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    if (i > 0) text += '+';
    text += std::to_string(cores[i]);
    if (j > i) text += "-" + std::to_string(cores[j]);
    i = j + 1;
  }
  return text;
}

Result<std::vector<DeviceSpec>> ParseDevices(std::string_view text, int n_cores_available) {
  if (Trim(text).empty()) return std::vector<DeviceSpec>{DeviceSpec{}};
  SHARDLM_ASSIGN_OR_RETURN(const std::vector<std::string_view> items,
                           SplitItems(text, "--devices"));
  std::vector<DeviceSpec> devices;
  for (std::string_view item : items) {
    SHARDLM_ASSIGN_OR_RETURN(DeviceSpec device, ParseDevice(item, n_cores_available));
    devices.push_back(std::move(device));
  }
  return devices;
}

Result<std::vector<double>> ParseLayerSplit(std::string_view text) {
  if (Trim(text).empty()) return std::vector<double>{};
  SHARDLM_ASSIGN_OR_RETURN(const std::vector<std::string_view> items,
                           SplitItems(text, "--layer-split"));
  std::vector<double> weights;
  for (size_t i = 0; i < items.size(); ++i) {
    SHARDLM_ASSIGN_OR_RETURN(const double weight, ParseWeight(items[i], i));
    weights.push_back(weight);
  }
  return weights;
}

std::vector<size_t> LayerCosts(const GgufFile& file, const ModelConfig& config) {
  std::vector<size_t> costs(size_t(std::max(config.n_layers, 0)), 0);
  for (const GgufTensorInfo& tensor : file.tensors()) {
    const int layer = BlockIndex(tensor.name);
    if (layer >= 0 && layer < config.n_layers) costs[layer] += size_t(tensor.n_elements());
  }
  return costs;
}

size_t HeadCost(const GgufFile& file) {
  size_t embedding = 0;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    if (tensor.name == "output.weight") return size_t(tensor.n_elements());
    if (tensor.name == "token_embd.weight") embedding = size_t(tensor.n_elements());
  }
  return embedding;
}

Result<std::vector<LayerRange>> PlanLayerRanges(const std::vector<size_t>& layer_costs,
                                                size_t n_stages, const std::vector<double>& weights,
                                                size_t head_cost) {
  const size_t n_layers = layer_costs.size();
  if (n_stages == 0) return InvalidArgument("a pipeline needs at least one stage");
  if (!weights.empty() && weights.size() != n_stages) {
    return InvalidArgument(
        "--layer-split has {} weights but --devices names {} stages; give one "
        "weight per device",
        weights.size(), n_stages);
  }
  if (n_stages > n_layers) {
    return InvalidArgument(
        "{} stages but the model has only {} layers; every stage needs at "
        "least one layer (use at most {} devices)",
        n_stages, n_layers, n_layers);
  }
  double weight_sum = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || !(weights[i] > 0.0)) {
      return InvalidArgument("--layer-split: weight {} is {}; every weight must be > 0", i + 1,
                             weights[i]);
    }
    weight_sum += weights[i];
  }
  // cumulative[b] = cost of layers [0, b); layers without a cost count as equal (1 each).
  size_t total_cost = 0;
  for (size_t cost : layer_costs) total_cost += cost;
  std::vector<double> cumulative(n_layers + 1, 0.0);
  for (size_t layer = 0; layer < n_layers; ++layer) {
    cumulative[layer + 1] = cumulative[layer] + (total_cost > 0 ? double(layer_costs[layer]) : 1.0);
  }
  // The head counts in the same units as the layers (nothing when layers count as 1 each).
  const double head = total_cost > 0 ? double(head_cost) : 0.0;
  std::vector<LayerRange> ranges;
  double weight_before = 0.0;
  int begin = 0;
  for (size_t stage = 0; stage + 1 < n_stages; ++stage) {
    weight_before += weights.empty() ? 1.0 : weights[stage];
    const double share = weight_before / (weights.empty() ? double(n_stages) : weight_sum);
    // Leave at least one layer for this stage and for each stage after it.
    const int lo = begin + 1;
    const int hi = int(n_layers - (n_stages - 1 - stage));
    const int end = ClosestBoundary(cumulative, lo, hi, share * (cumulative[n_layers] + head));
    ranges.push_back(LayerRange{begin, end});
    begin = end;
  }
  ranges.push_back(LayerRange{begin, int(n_layers)});
  return ranges;
}

Result<std::vector<std::string>> KeepSharedKvInOneStage(const ModelConfig& config,
                                                        std::vector<LayerRange>& ranges) {
  std::vector<std::string> moved;
  for (size_t i = 1; i < ranges.size(); ++i) {
    int boundary = ranges[i].begin;
    // The earliest source read across the boundary; moving there may bring a new layer's
    // source across, so repeat until none is.
    while (config.SplitsSharedKv(boundary)) {
      int source = boundary;
      for (int layer = boundary; layer < config.n_layers; ++layer) {
        if (config.layers[size_t(layer)].shared_kv)
          source = std::min(source, config.KvSource(layer));
      }
      boundary = source;
    }
    if (boundary == ranges[i].begin) continue;
    if (boundary <= ranges[i - 1].begin) {
      return InvalidArgument(
          "stage {} would start at layer {}, but layers from {} read the KV of layer {}: a stage "
          "boundary cannot separate them, and moving it leaves stage {} without layers (use "
          "fewer devices)",
          i, ranges[i].begin, ranges[i].begin, boundary, i - 1);
    }
    moved.push_back(fmt::format(
        "stage {} starts at layer {} instead of {}: layers from there read the KV of layer {}", i,
        boundary, ranges[i].begin, boundary));
    ranges[i - 1].end = boundary;
    ranges[i].begin = boundary;
  }
  return moved;
}

}  // namespace shardlm
