// Bench runner implementation: fresh KV per run, random prompt tokens, timed forward passes.
#include "runtime/bench_runner.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>

#include "runtime/sampler.h"
#include "runtime/sequence.h"

namespace shardlm {
namespace {

bool AllFinite(std::span<const float> values) {
  for (float value : values) {
    if (!std::isfinite(value)) return false;
  }
  return true;
}

uint64_t ProcessCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct RunTimes {
  uint64_t wall_ns = 0;
  uint64_t cpu_ns = 0;
};

// One timed run from an empty cache.
Result<RunTimes> TimedRun(Sequence& seq, const BenchTest& test,
                          const std::vector<TokenId>& tokens) {
  seq.Reset();
  const uint64_t cpu_start = ProcessCpuNs();
  const auto start = std::chrono::steady_clock::now();
  if (test.n_prompt > 0) {
    SHARDLM_TRY(seq.Prefill(tokens));
  } else {
    for (int i = 0; i < test.n_gen; ++i) SHARDLM_TRY(seq.Decode(tokens[i]));
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const uint64_t cpu_ns = ProcessCpuNs() - cpu_start;
  if (!AllFinite(seq.logits())) {
    return InvalidData("{}: the forward pass produced non-finite logits", test.Name());
  }
  return RunTimes{uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
                  cpu_ns};
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::string BenchTest::Name() const {
  return n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
}

void MeanStddev(const std::vector<double>& values, double& mean, double& stddev) {
  mean = 0.0;
  stddev = 0.0;
  if (values.empty()) return;
  for (double value : values) mean += value;
  mean /= double(values.size());
  if (values.size() < 2) return;
  double sum_sq = 0.0;
  for (double value : values) sum_sq += (value - mean) * (value - mean);
  stddev = std::sqrt(sum_sq / double(values.size() - 1));
}

Result<BenchResult> RunBench(const Model& model, ThreadPool& threads, const BenchTest& test,
                             const BenchOptions& options) {
  if ((test.n_prompt > 0) == (test.n_gen > 0) || test.n_prompt < 0 || test.n_gen < 0) {
    return InvalidArgument("a bench test is either pp<N> or tg<N> with N > 0");
  }
  if (options.reps <= 0) return InvalidArgument("repetitions must be > 0, got {}", options.reps);
  const int n_tokens = test.n_prompt + test.n_gen;
  SequenceConfig config;
  config.n_positions = n_tokens;
  config.max_batch = std::max(test.n_prompt, 1);
  config.kv_type = options.kv_type;
  config.threads = threads.size();
  config.placement = options.placement;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, Sequence::Create(model, config));
  Rng rng(options.seed);
  std::vector<TokenId> tokens(n_tokens);
  for (TokenId& token : tokens) token = TokenId(rng.Next() % uint64_t(model.config().n_vocab));

  BenchResult result;
  result.test = test;
  SHARDLM_ASSIGN_OR_RETURN(RunTimes warmup, TimedRun(*seq, test, tokens));
  (void)warmup;
  uint64_t total_ns = 0, total_cpu_ns = 0;
  for (int rep = 0; rep < options.reps; ++rep) {
    SHARDLM_ASSIGN_OR_RETURN(RunTimes times, TimedRun(*seq, test, tokens));
    result.samples_ns.push_back(times.wall_ns);
    result.samples_ts.push_back(double(n_tokens) * 1e9 /
                                double(std::max<uint64_t>(times.wall_ns, 1)));
    total_ns += times.wall_ns;
    total_cpu_ns += times.cpu_ns;
  }
  result.avg_ns = total_ns / uint64_t(options.reps);
  result.cpu_share = double(total_cpu_ns) / (double(total_ns) * threads.size());
  MeanStddev(result.samples_ts, result.avg_ts, result.stddev_ts);
  result.median_ts = Median(result.samples_ts);
  const PipelineCounters counters = seq->pipeline().counters();
  if (counters.tokens > 0) {
    result.bytes_between_per_token = double(counters.bytes_between) / double(counters.tokens);
  }
  return result;
}

}  // namespace shardlm
