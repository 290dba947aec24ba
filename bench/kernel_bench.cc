// kernel_bench: one weight type's MatMul kernel alone, over a matrix that fits the L2 cache,
// the best of many short trials. Without --panels it times the row kernel as MatMul calls it:
// in decode (one token: vec_dot_tile, two rows per call) or in prefill (--tokens N: tiles of
// the type's tile_rows rows and N tokens); with --panels, the panel kernel (panel_dot) over
// the matrix repacked into panels, --tokens tokens per call (1-2: decode's one pass over a
// panel, 3 and more: prefill's tiles). On a shared machine whose speed drifts the
// best time filters out what other processes took, so two builds run one after the other
// differ by what their kernels do; it is the figure that guides work on a kernel bound by its
// instructions (the grid i-quants' decode, every type's prefill). How fast a whole matrix
// streams from DRAM is matmul_bench's question.
//
// Usage: kernel_bench TYPE[,TYPE...] [--cols N] [--trials N] [--panels] [--tokens N]
// Prints one JSON line per type: {"bench", "type", "isa", "layout", "cols", "rows", "tokens",
// "trials", "ns_per_block", "gb_s", "gops"}: ns_per_block per weight block and token; gb_s the
// weight bytes one thread reads per second at that time (each token's pass counted once per
// call); gops 2·rows·cols·tokens per second.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"
#include "tensor/panels.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

constexpr int64_t kRows = 256;     // at 1024 columns 56-144 KiB for 1.75-4.5 bits: L2-resident
constexpr int kCallsPerTrial = 5;  // passes over the rows in one timed trial

struct Options {
  int64_t cols = 1024;
  int trials = 300;
  bool panels = false;
  int tokens = 1;
};

// Times the kernel of `type` over kRows rows of options.cols columns; prints its line.
void BenchType(GgmlType type, const Options& options) {
  const int64_t cols = options.cols;
  const std::string name = GgmlTypeName(static_cast<uint32_t>(type));
  const TypeTraits* traits = GetTypeTraits(type);
  const auto info = LookupGgmlType(static_cast<uint32_t>(type));
  if (traits == nullptr || traits->quantize_row == nullptr || !info ||
      cols % traits->block_size != 0) {
    std::fprintf(stderr, "skipping %s: no kernels, no quantizer or %lld columns do not fit\n",
                 name.c_str(), static_cast<long long>(cols));
    return;
  }
  if (options.panels && (traits->panel_dot == nullptr || cols % PanelColumns(type) != 0 ||
                         options.tokens > traits->panel_tokens)) {
    std::fprintf(stderr,
                 "skipping %s: no panel kernel here, or %d tokens or %lld columns do not fit\n",
                 name.c_str(), options.tokens, static_cast<long long>(cols));
    return;
  }
  if (!options.panels && options.tokens > 1 &&
      (traits->vec_dot_tile == nullptr || options.tokens > traits->tile_cols)) {
    std::fprintf(stderr, "skipping %s: no tile kernel for %d tokens\n", name.c_str(),
                 options.tokens);
    return;
  }
  const int64_t row_bytes = RowBytes(*info, cols);
  std::vector<uint8_t> w(row_bytes * kRows);
  std::mt19937 rng(42);
  std::normal_distribution<float> gauss(0.0f, 0.05f);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (float& v : row) v = gauss(rng);
    traits->quantize_row(row.data(), w.data() + r * row_bytes, cols);
  }
  std::vector<uint8_t> panels;
  int64_t panel_bytes = 0;
  if (options.panels) {
    panels.resize(PanelMatrixBytes(type, kRows, cols));
    panel_bytes = PanelStrideBytes(type, cols);
    RepackPanels(type, w.data(), row_bytes, kRows, cols, 0, kRows / kPanelRows, panels.data());
  }
  const int64_t act_bytes = ActRowBytes(*traits, cols);
  std::vector<uint8_t> act(act_bytes * options.tokens);
  for (int c = 0; c < options.tokens; ++c) {
    for (float& v : row) v = gauss(rng) * 20;
    QuantizeActRow(*traits, row.data(), act.data() + c * act_bytes, cols);
  }
  std::vector<float> out(kRows * options.tokens);
  // Rows per row-kernel call: decode's two, or the tiles' tile_rows.
  const int tile = options.tokens == 1 ? std::max(1, std::min(2, traits->tile_rows))
                                       : traits->tile_rows;
  double best = 1e30;
  for (int trial = 0; trial < options.trials; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kCallsPerTrial; ++k) {
      if (options.panels) {
        for (int64_t r = 0; r < kRows; r += kPanelRows) {
          traits->panel_dot(cols, panels.data() + r / kPanelRows * panel_bytes, act.data(),
                            act_bytes, options.tokens, out.data() + r, kRows, kPanelRows);
        }
        continue;
      }
      for (int64_t r = 0; r < kRows; r += tile) {
        if (traits->vec_dot_tile != nullptr) {
          traits->vec_dot_tile(cols, w.data() + r * row_bytes, row_bytes, tile, act.data(),
                               act_bytes, options.tokens, out.data() + r * options.tokens,
                               options.tokens);
        } else {
          traits->vec_dot(cols, w.data() + r * row_bytes, act.data(), out.data() + r);
        }
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s / kCallsPerTrial);
  }
  const double blocks = static_cast<double>(kRows) * cols / traits->block_size;
  std::printf(
      "{\"bench\":\"kernel\",\"type\":\"%s\",\"isa\":\"%s\",\"layout\":\"%s\",\"cols\":%lld,"
      "\"rows\":%lld,\"tokens\":%d,\"trials\":%d,\"ns_per_block\":%.3f,\"gb_s\":%.3f,"
      "\"gops\":%.2f}\n",
      name.c_str(), IsaName(DetectIsa()), options.panels ? "panels" : "rows",
      static_cast<long long>(cols), static_cast<long long>(kRows), options.tokens, options.trials,
      best / (blocks * options.tokens) * 1e9, static_cast<double>(row_bytes) * kRows / best * 1e-9,
      2.0 * kRows * cols * options.tokens / best * 1e-9);
  std::fflush(stdout);
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  const char* usage = "usage: %s TYPE[,TYPE...] [--cols N] [--trials N] [--panels] [--tokens N]\n";
  std::string types;
  shardlm::Options options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cols") == 0 && i + 1 < argc) {
      options.cols = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--trials") == 0 && i + 1 < argc) {
      options.trials = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
      options.tokens = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--panels") == 0) {
      options.panels = true;
    } else if (argv[i][0] != '-' && types.empty()) {
      types = argv[i];
    } else {
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  if (types.empty() || options.cols <= 0 || options.trials <= 0 || options.tokens <= 0) {
    std::fprintf(stderr, usage, argv[0]);
    return 2;
  }
  std::stringstream list(types);
  std::string name;
  while (std::getline(list, name, ',')) {
    bool found = false;
    for (uint32_t id = 0; id < static_cast<uint32_t>(shardlm::GgmlType::kSentinel); ++id) {
      const auto info = shardlm::LookupGgmlType(id);
      if (!info || std::string(info->name) != name) continue;
      shardlm::BenchType(static_cast<shardlm::GgmlType>(id), options);
      found = true;
    }
    if (!found) std::fprintf(stderr, "unknown type %s\n", name.c_str());
  }
  return 0;
}
