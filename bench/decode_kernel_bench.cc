// decode_kernel_bench: a weight type's decode kernel alone: the time per block of its row
// kernel (vec_dot_tile, two rows and one token per call, as MatMul calls it in decode) over
// rows that fit the L2 cache, the best of many short trials. On a shared machine whose speed
// drifts the best time filters out what other processes took, so two builds run one after the
// other differ by what their kernels do; it is the figure that guides work on a kernel that is
// bound by its instructions, not by the memory (the grid i-quants). How fast a whole matrix
// streams from DRAM is matmul_bench's question. Row kernels only: panel layouts are not timed.
//
// Usage: decode_kernel_bench TYPE[,TYPE...] [--cols N] [--trials N]
// Prints one JSON line per type: {"bench", "type", "isa", "cols", "rows", "trials",
// "ns_per_block", "gb_s"} (gb_s: the row bytes one thread reads per second at that time).
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
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

constexpr int64_t kRows = 256;     // at 1024 columns 56-144 KiB for 1.75-4.5 bits: L2-resident
constexpr int kCallsPerTrial = 5;  // passes over the rows in one timed trial

// Times the decode kernel of `type` over kRows rows of `cols` columns; prints its line.
void BenchType(GgmlType type, int64_t cols, int trials) {
  const std::string name = GgmlTypeName(static_cast<uint32_t>(type));
  const TypeTraits* traits = GetTypeTraits(type);
  const auto info = LookupGgmlType(static_cast<uint32_t>(type));
  if (traits == nullptr || traits->quantize_row == nullptr || !info ||
      cols % traits->block_size != 0) {
    std::fprintf(stderr, "skipping %s: no kernels, no quantizer or %lld columns do not fit\n",
                 name.c_str(), static_cast<long long>(cols));
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
  for (float& v : row) v = gauss(rng) * 20;
  std::vector<uint8_t> act(ActRowBytes(*traits, cols));
  QuantizeActRow(*traits, row.data(), act.data(), cols);
  std::vector<float> out(kRows);
  const int tile = std::max(1, std::min(2, traits->tile_rows));
  double best = 1e30;
  for (int trial = 0; trial < trials; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kCallsPerTrial; ++k) {
      for (int64_t r = 0; r < kRows; r += tile) {
        if (traits->vec_dot_tile != nullptr) {
          traits->vec_dot_tile(cols, w.data() + r * row_bytes, row_bytes, tile, act.data(), 0, 1,
                               out.data() + r, 1);
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
      "{\"bench\":\"decode_kernel\",\"type\":\"%s\",\"isa\":\"%s\",\"cols\":%lld,\"rows\":%lld,"
      "\"trials\":%d,\"ns_per_block\":%.3f,\"gb_s\":%.3f}\n",
      name.c_str(), IsaName(DetectIsa()), static_cast<long long>(cols),
      static_cast<long long>(kRows), trials, best / blocks * 1e9,
      static_cast<double>(row_bytes) * kRows / best * 1e-9);
  std::fflush(stdout);
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  std::string types;
  int64_t cols = 1024;
  int trials = 300;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cols") == 0 && i + 1 < argc) {
      cols = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--trials") == 0 && i + 1 < argc) {
      trials = std::atoi(argv[++i]);
    } else if (argv[i][0] != '-' && types.empty()) {
      types = argv[i];
    } else {
      std::fprintf(stderr, "usage: %s TYPE[,TYPE...] [--cols N] [--trials N]\n", argv[0]);
      return 2;
    }
  }
  if (types.empty() || cols <= 0 || trials <= 0) {
    std::fprintf(stderr, "usage: %s TYPE[,TYPE...] [--cols N] [--trials N]\n", argv[0]);
    return 2;
  }
  std::stringstream list(types);
  std::string name;
  while (std::getline(list, name, ',')) {
    bool found = false;
    for (uint32_t id = 0; id < static_cast<uint32_t>(shardlm::GgmlType::kSentinel); ++id) {
      const auto info = shardlm::LookupGgmlType(id);
      if (!info || std::string(info->name) != name) continue;
      shardlm::BenchType(static_cast<shardlm::GgmlType>(id), cols, trials);
      found = true;
    }
    if (!found) std::fprintf(stderr, "unknown type %s\n", name.c_str());
  }
  return 0;
}
