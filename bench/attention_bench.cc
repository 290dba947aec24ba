// attention_bench: decode attention alone, one token over a context of D positions, as the
// forward pass runs it (one task per layer and kv head on a thread pool), and the rate it
// reads the KV cache at.
//
// Method: a page pool shaped like a model's KV (default Qwen3-0.6B: 28 layers, 8 kv heads of
// 128, GQA group 2) holds D positions of random K and V in the chosen element type, its pages
// in a shuffled order (a long-running server's pages are not in position order). Each trial
// attends one query token at position D - 1 in every (layer, kv head); the figure is the best
// trial's time per token and the KV bytes it read per second (the whole cache: every row of
// every layer once). At depth the KV is far larger than the CPU's caches, so that is the rate
// decode at depth reads its KV at.
//
// Output: one JSON line per depth on stdout.
// Usage: attention_bench [--depths 512,2048,8192] [--kv-type f16] [--threads 2]
//   [--trials 20] [--layers 28] [--kv-heads 8] [--head-dim 128] [--group 2]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "kv/page_pool.h"
#include "model/attention.h"
#include "tensor/thread_pool.h"

namespace shardlm {
namespace {

struct Flags {
  std::vector<int> depths = {512, 2048, 8192};
  std::string kv_type = "f16";
  int threads = 2;
  int trials = 20;
  int layers = 28;
  int kv_heads = 8;
  int head_dim = 128;
  int group = 2;
};

constexpr size_t kDistinctRows = 331;

int Run(const Flags& f) {
  Result<KvType> kv_type = ParseKvType(f.kv_type);
  if (!kv_type.ok()) {
    std::fprintf(stderr, "attention_bench: %s\n", kv_type.status().message().c_str());
    return 2;
  }
  ThreadPool threads(f.threads);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int depth : f.depths) {
    PagePoolConfig config;
    config.page_tokens = kDefaultPageTokens;
    config.n_pages = (depth + config.page_tokens - 1) / config.page_tokens;
    config.n_layers = f.layers;
    config.n_kv_heads = f.kv_heads;
    config.head_dim = f.head_dim;
    config.kv_type = *kv_type;
    auto pool = PagePool::Create(config);
    if (!pool.ok()) {
      std::fprintf(stderr, "attention_bench: %s\n", pool.status().message().c_str());
      return 1;
    }
    std::vector<PageId> pages(size_t(config.n_pages));
    std::iota(pages.begin(), pages.end(), PageId{0});
    std::shuffle(pages.begin(), pages.end(), rng);
    // Rows drawn from a few hundred random ones: the values do not change the time, and
    // drawing every row took longer than the trials.
    const size_t row_floats = size_t(f.kv_heads) * f.head_dim;
    std::vector<float> rows(kDistinctRows * row_floats);
    for (float& x : rows) x = normal(rng);
    for (int pos = 0; pos < depth; ++pos) {
      for (int layer = 0; layer < f.layers; ++layer) {
        const size_t i = (size_t(pos) * f.layers + layer) % kDistinctRows;
        WriteKv(**pool, pages, layer, pos, &rows[i * row_floats],
                &rows[((i + 1) % kDistinctRows) * row_floats]);
      }
    }
    const int n_heads = f.kv_heads * f.group;
    std::vector<float> q(size_t(n_heads) * f.head_dim), out(q.size());
    for (float& x : q) x = normal(rng);
    const size_t per_worker = AttendTileScratch(f.group, size_t(depth), f.head_dim);
    std::vector<float> scratch(per_worker * size_t(f.threads));
    const size_t group_dim = size_t(f.group) * f.head_dim;
    double best = INFINITY;
    for (int trial = 0; trial < f.trials; ++trial) {
      const auto start = std::chrono::steady_clock::now();
      for (int layer = 0; layer < f.layers; ++layer) {
        threads.ParallelFor(size_t(f.kv_heads), [&](size_t g, size_t worker) {
          AttentionTile tile;
          tile.q = &q[g * group_dim];
          tile.q_stride = int64_t(q.size());
          tile.out = &out[g * group_dim];
          tile.out_stride = int64_t(out.size());
          tile.first_position = depth - 1;
          tile.n_heads = f.group;
          tile.kv_head = int(g);
          tile.scale = 1.0f / std::sqrt(float(f.head_dim));
          AttendTile(**pool, pages, layer, f.head_dim, tile, &scratch[worker * per_worker]);
        });
      }
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    const double kv_bytes =
        double(depth) * f.layers * f.kv_heads * 2 * KvRowBytes(*kv_type, size_t(f.head_dim));
    std::printf(
        "{\"bench\":\"attention\",\"kv_type\":\"%s\",\"depth\":%d,\"threads\":%d,"
        "\"layers\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"group\":%d,\"ms_per_token\":%.3f,"
        "\"kv_mib\":%.1f,\"gb_s\":%.2f,\"checksum\":%.6g}\n",
        KvTypeName(*kv_type), depth, f.threads, f.layers, f.kv_heads, f.head_dim, f.group,
        best * 1e3, kv_bytes / (1 << 20), kv_bytes / best / 1e9,
        double(std::accumulate(out.begin(), out.end(), 0.0f)));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  shardlm::Flags f;
  CLI::App app{"Decode attention alone over a synthetic KV cache"};
  app.add_option("--depths", f.depths, "Context positions, comma-separated")->delimiter(',');
  app.add_option("--kv-type", f.kv_type, "KV element type");
  app.add_option("--threads", f.threads, "Threads");
  app.add_option("--trials", f.trials, "Trials per depth (the best is printed)");
  app.add_option("--layers", f.layers, "Layers");
  app.add_option("--kv-heads", f.kv_heads, "KV heads per layer");
  app.add_option("--head-dim", f.head_dim, "Elements per head");
  app.add_option("--group", f.group, "Query heads per kv head");
  CLI11_PARSE(app, argc, argv);
  return shardlm::Run(f);
}
