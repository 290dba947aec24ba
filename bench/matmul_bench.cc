// matmul_bench: MatMul throughput per weight type on Qwen3-0.6B-like shapes, for the ISA
// this CPU picks (SHARDLM_ISA=generic|avx2|avx512 forces one).
//
// Goals: the numbers that guide kernel work. Batch 1 (decode) reports the GB/s of weights
// streamed, cycling through enough copies of the matrix to defeat the L3 cache so that the
// figure is a DRAM figure like llama.cpp's tg; batches 2, 4 and 8 (streams decoding
// together, or a pipeline stage's micro-batch) do the same and their GOPS show what
// batching gains; batch 512 (prefill) reports GOPS
// (2·rows·cols·tokens). Each case warms up, runs several times, reports the median, and
// checks a sample of outputs against the generic kernels. One JSON object per line.
// Non-goals: attention, full-model timing (`shardlm bench`).
//
// Usage: matmul_bench [comma-separated type names, e.g. q8_0,q4_K] [--quick]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"
#include "tensor/matmul.h"
#include "tensor/panels.h"
#include "tensor/thread_pool.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

struct Shape {
  int64_t cols, rows;  // input features → output features
};
// attn_q/ffn_up-like, ffn_down-like, attn_q (16 heads × 128) of Qwen3-0.6B.
constexpr Shape kShapes[] = {{1024, 3072}, {3072, 1024}, {1024, 2048}};
constexpr int kThreadCounts[] = {1, 2};
// Copies of a matrix cycled through at batch 1: 128 MiB of weights in all, 4x the L3.
constexpr int64_t kDecodeBytes = int64_t{128} << 20;

const GgmlType kAllTypes[] = {
    GgmlType::kQ8_0, GgmlType::kQ4_K,   GgmlType::kQ6_K,  GgmlType::kF32,   GgmlType::kF16,
    GgmlType::kBF16, GgmlType::kQ4_0,   GgmlType::kQ5_0,  GgmlType::kQ4_1,  GgmlType::kQ5_1,
    GgmlType::kQ2_K, GgmlType::kQ3_K,   GgmlType::kQ5_K,  GgmlType::kIq4Nl, GgmlType::kIq4Xs,
    GgmlType::kIq3S, GgmlType::kIq3Xxs, GgmlType::kIq2S,  GgmlType::kIq2Xs, GgmlType::kIq2Xxs,
    GgmlType::kIq1M, GgmlType::kIq1S,   GgmlType::kTq1_0, GgmlType::kTq2_0, GgmlType::kMxfp4};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of the whole process (all threads, spinning included). On a shared, busy
// machine wall time also counts time the scheduler gave to others; with one thread,
// cpu_ms is the kernel's own time.
double CpuNow() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Random weights through the type's own quantizer (realistic scales), or random bits with
// small fp16 scales where no quantizer exists; either way a valid row for the kernels.
std::vector<uint8_t> MakeWeights(const TypeTraits& traits, const Shape& s, int64_t row_bytes) {
  std::vector<uint8_t> w(row_bytes * s.rows);
  std::mt19937 rng(42);
  std::normal_distribution<float> gauss(0.0f, 0.05f);
  std::vector<float> row(s.cols);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (auto& v : row) v = gauss(rng);
    traits.quantize_row(row.data(), w.data() + r * row_bytes, s.cols);
  }
  return w;
}

struct Result {
  double seconds;
  double cpu_seconds;
  double max_rel_err;
};

// Runs MatMul on `copies` matrices in turn, `reps` times after a warm-up; median seconds
// per call, and the worst relative error of sampled outputs against the generic kernels.
// With panels, copies hold the repacked matrices and `rows` the GGUF rows they came from.
Result Run(const WeightView& base, const std::vector<std::vector<uint8_t>>& copies,
           const std::vector<uint8_t>& rows, int64_t n_tokens, int threads, int reps) {
  ThreadPool pool(threads);
  MatMulScratch scratch;
  std::vector<float> x(n_tokens * base.cols), y(n_tokens * base.rows);
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (auto& v : x) v = gauss(rng);
  std::vector<WeightView> views;
  for (const auto& c : copies) {
    WeightView v = base;
    v.data = c.data();
    views.push_back(v);
  }
  for (const auto& v : views) MatMul(v, x.data(), n_tokens, y.data(), pool, scratch);
  std::vector<double> times, cpu_times;
  for (int rep = 0; rep < reps; ++rep) {
    const double t0 = Now(), c0 = CpuNow();
    for (const auto& v : views) MatMul(v, x.data(), n_tokens, y.data(), pool, scratch);
    times.push_back((Now() - t0) / views.size());
    cpu_times.push_back((CpuNow() - c0) / views.size());
  }
  // Verify the last matrix against the generic vec_dot on sampled elements.
  const TypeTraits* generic = GetTypeTraitsFor(base.type, Isa::kGeneric);
  const auto act_info = *LookupGgmlType(static_cast<uint32_t>(generic->act_type));
  std::vector<uint8_t> act(RowBytes(act_info, base.cols));
  double worst = 0;
  const uint8_t* wdata = rows.data();
  for (int64_t t = 0; t < n_tokens; t += std::max<int64_t>(1, n_tokens / 7)) {
    if (generic->act_type == GgmlType::kF32) {
      std::memcpy(act.data(), x.data() + t * base.cols, act.size());
    } else {
      generic->quantize_act(x.data() + t * base.cols, act.data(), base.cols);
    }
    for (int64_t r = 0; r < base.rows; r += 97) {
      float want = 0;
      generic->vec_dot(base.cols, wdata + r * base.row_bytes, act.data(), &want);
      const double got = y[t * base.rows + r];
      worst = std::max(worst, std::fabs(got - want) / (std::fabs(want) + 1e-3));
    }
  }
  return {Median(times), Median(cpu_times), worst};
}

void BenchType(GgmlType type, bool quick) {
  const TypeTraits* traits = GetTypeTraits(type);
  if (traits == nullptr || traits->quantize_row == nullptr) {
    std::fprintf(stderr, "skipping %s: no kernels or quantizer\n",
                 GgmlTypeName(static_cast<uint32_t>(type)).c_str());
    return;
  }
  const auto info = *LookupGgmlType(static_cast<uint32_t>(type));
  for (const Shape& s : kShapes) {
    for (bool panels : {false, true}) {
      if (panels && traits->panel_dot == nullptr) continue;
      WeightView base{type, s.cols, s.rows, nullptr, RowBytes(info, s.cols)};
      const std::vector<uint8_t> rows = MakeWeights(*traits, s, base.row_bytes);
      int64_t bytes = base.row_bytes * s.rows;
      std::vector<std::vector<uint8_t>> copies(1, rows);
      if (panels) {
        base.panel_bytes = PanelStrideBytes(type, s.cols);
        bytes = PanelMatrixBytes(type, s.rows, s.cols);
        copies[0].assign(bytes, 0);
        RepackPanels(type, rows.data(), base.row_bytes, s.rows, s.cols, 0,
                     (s.rows + kPanelRows - 1) / kPanelRows, copies[0].data());
      }
      const int64_t n_copies = quick ? 1 : std::max<int64_t>(1, kDecodeBytes / bytes);
      while (static_cast<int64_t>(copies.size()) < n_copies) copies.push_back(copies[0]);
      for (int threads : kThreadCounts) {
        // Batches 2 to 8 (batched decode of several streams, or a pipeline stage's
        // micro-batch) stream their weights from DRAM like batch 1.
        for (int64_t batch : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{512}}) {
          const bool prefill = batch > 8;
          const std::vector<std::vector<uint8_t>> one(copies.begin(), copies.begin() + 1);
          const Result res = Run(base, prefill ? one : copies, rows, batch, threads,
                                 prefill ? (quick ? 3 : 5) : (quick ? 20 : 9));
          const double ops = 2.0 * s.rows * s.cols * batch;
          // core_*: per CPU-second of the process (all threads): what one core delivers
          // whatever else the machine runs; for 1 thread, the kernel's own throughput.
          std::printf(
              "{\"bench\":\"matmul\",\"type\":\"%s\",\"isa\":\"%s\",\"layout\":\"%s\","
              "\"cols\":%lld,\"rows\":%lld,"
              "\"batch\":%lld,\"threads\":%d,\"median_ms\":%.4f,\"cpu_ms\":%.4f,\"gbps\":%.2f,"
              "\"gops\":%.2f,\"core_gbps\":%.2f,\"core_gops\":%.2f,\"max_rel_err\":%.2e}\n",
              std::string(info.name).c_str(), IsaName(DetectIsa()), panels ? "panels" : "rows",
              static_cast<long long>(s.cols), static_cast<long long>(s.rows),
              static_cast<long long>(batch), threads, res.seconds * 1e3, res.cpu_seconds * 1e3,
              bytes / res.seconds * 1e-9, ops / res.seconds * 1e-9, bytes / res.cpu_seconds * 1e-9,
              ops / res.cpu_seconds * 1e-9, res.max_rel_err);
          std::fflush(stdout);
        }
      }
    }
  }
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  using shardlm::GgmlType;
  std::string filter;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      filter = std::string(",") + argv[i] + ",";
    }
  }
  for (GgmlType type : shardlm::kAllTypes) {
    const std::string name = shardlm::GgmlTypeName(static_cast<uint32_t>(type));
    if (!filter.empty() && filter.find("," + name + ",") == std::string::npos) continue;
    shardlm::BenchType(type, quick);
  }
  return 0;
}
