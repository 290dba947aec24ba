// Bench runner implementation: fresh KV per run, random tokens, timed forward passes.
#include "engine/bench_runner.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <span>

#include "kv/block_table.h"
#include "pipeline/pipeline.h"
#include "engine/sampler.h"
#include "engine/sequence.h"

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

// The subject of one test: a Sequence for pp and tg, S block tables on one pipeline for
// tg with S > 1 streams (each step is one batch per micro-batch of streams, every entry
// wanting logits; one micro-batch of all S streams when the pipeline has one stage).
class BenchSubject {
 public:
  static Result<std::unique_ptr<BenchSubject>> Create(const Model& model, int threads,
                                                      const BenchTest& test,
                                                      const BenchOptions& options) {
    auto subject = std::unique_ptr<BenchSubject>(new BenchSubject(test));
    SequenceConfig config;
    config.n_positions = test.n_prompt + test.n_gen;
    config.max_batch = std::max(test.n_prompt, 1);
    config.kv_type = options.kv_type;
    config.threads = threads;
    config.placement = options.PlacementOf(test);
    if (test.n_streams == 1) {
      SHARDLM_ASSIGN_OR_RETURN(subject->seq_, Sequence::Create(model, config));
      return subject;
    }
    PipelineOptions pipeline;
    pipeline.placement = config.placement;
    pipeline.threads = threads;
    pipeline.n_pages =
        test.n_streams * ((config.n_positions + config.page_tokens - 1) / config.page_tokens);
    pipeline.page_tokens = config.page_tokens;
    pipeline.kv_type = config.kv_type;
    pipeline.max_batch_tokens = test.n_streams;
    pipeline.max_logit_rows = test.n_streams;
    SHARDLM_ASSIGN_OR_RETURN(subject->pipeline_, Pipeline::Create(model, pipeline));
    for (int s = 0; s < test.n_streams; ++s) {
      subject->tables_.emplace_back(&subject->pipeline_->allocator());
    }
    return subject;
  }

  ~BenchSubject() { tables_.clear(); }  // pages go back before the pipeline goes

  const Pipeline& pipeline() const { return seq_ ? seq_->pipeline() : *pipeline_; }
  std::span<const float> logits() const { return seq_ ? seq_->logits() : logits_; }

  // One run from an empty cache; tokens holds n_prompt + n_gen × n_streams ids.
  Status Run(std::span<const TokenId> tokens) {
    if (seq_) {
      seq_->Reset();
      if (test_.n_prompt > 0) return seq_->Prefill(tokens);
      for (int i = 0; i < test_.n_gen; ++i) SHARDLM_TRY(seq_->Decode(tokens[i]));
      return Status::Ok();
    }
    for (BlockTable& table : tables_) table.Clear();
    // The streams split into depth() micro-batches, as the server splits them: with several
    // stages, each stage computes one micro-batch while the next stage computes another.
    const int n_streams = int(tables_.size());
    const int n_groups = std::min(pipeline_->depth(), n_streams);
    std::vector<int> steps_submitted(size_t(n_groups), 0);
    std::deque<int> in_flight;  // group of each batch in flight, oldest first
    auto submit = [&](int group) -> Status {
      const int step = steps_submitted[size_t(group)]++;
      std::vector<BatchEntry> batch;
      std::vector<PageCopy> copies;
      std::vector<PageList> pages(tables_.size());
      for (int s = group; s < n_streams; s += n_groups) {
        batch.push_back({tokens[size_t(step) * size_t(n_streams) + size_t(s)], step, s, true});
        SHARDLM_TRY(tables_[s].PrepareWrite(step, step + 1, &copies));
        tables_[s].SetTokens(step + 1);
        pages[size_t(s)] = tables_[s].page_list();
      }
      SHARDLM_TRY(pipeline_->Submit({batch, pages, copies}));
      in_flight.push_back(group);
      return Status::Ok();
    };
    for (int g = 0; g < n_groups && test_.n_gen > 0; ++g) SHARDLM_TRY(submit(g));
    while (!in_flight.empty()) {
      const int group = in_flight.front();
      in_flight.pop_front();
      SHARDLM_ASSIGN_OR_RETURN(std::span<const float> rows, pipeline_->WaitOldest());
      logits_.assign(rows.begin(), rows.end());
      if (steps_submitted[size_t(group)] < test_.n_gen) SHARDLM_TRY(submit(group));
    }
    return Status::Ok();
  }

 private:
  explicit BenchSubject(const BenchTest& test) : test_(test) {}

  BenchTest test_;
  std::unique_ptr<Sequence> seq_;  // one stream
  std::unique_ptr<Pipeline> pipeline_;
  std::vector<BlockTable> tables_;  // [stream]
  std::vector<float> logits_;       // the last step's rows
};

// One timed run of the subject; an error if its last logits are not all finite.
Result<RunTimes> TimedRun(BenchSubject& subject, const BenchTest& test,
                          std::span<const TokenId> tokens) {
  const uint64_t cpu_start = ProcessCpuNs();
  const auto start = std::chrono::steady_clock::now();
  SHARDLM_TRY(subject.Run(tokens));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const uint64_t cpu_ns = ProcessCpuNs() - cpu_start;
  if (!AllFinite(subject.logits())) {
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
  if (n_prompt > 0) return "pp" + std::to_string(n_prompt);
  return "tg" + std::to_string(n_gen) + (n_streams > 1 ? "x" + std::to_string(n_streams) : "");
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

namespace {

Status CheckTest(const BenchTest& test) {
  if ((test.n_prompt > 0) == (test.n_gen > 0) || test.n_prompt < 0 || test.n_gen < 0) {
    return InvalidArgument("a bench test is either pp<N> or tg<N> with N > 0");
  }
  if (test.n_streams < 1 || (test.n_streams > 1 && test.n_prompt > 0)) {
    return InvalidArgument("streams apply to decode tests only and must be >= 1, got {}",
                           test.n_streams);
  }
  return Status::Ok();
}

// One test's subject, prompt tokens and the samples gathered so far.
struct BenchRun {
  std::unique_ptr<BenchSubject> subject;
  std::vector<TokenId> tokens;
  BenchResult result;
  uint64_t total_ns = 0;
  uint64_t total_cpu_ns = 0;
};

Result<BenchRun> StartRun(const Model& model, ThreadPool& threads, const BenchTest& test,
                          const BenchOptions& options) {
  BenchRun run;
  SHARDLM_ASSIGN_OR_RETURN(run.subject, BenchSubject::Create(model, threads.size(), test, options));
  Rng rng(options.seed);
  run.tokens.resize(size_t(test.n_prompt + test.n_gen * test.n_streams));
  for (TokenId& token : run.tokens) token = TokenId(rng.Next() % uint64_t(model.config().n_vocab));
  run.result.test = test;
  SHARDLM_ASSIGN_OR_RETURN(RunTimes warmup, TimedRun(*run.subject, test, run.tokens));
  (void)warmup;
  return run;
}

Status TimeOnce(BenchRun& run) {
  SHARDLM_ASSIGN_OR_RETURN(RunTimes times, TimedRun(*run.subject, run.result.test, run.tokens));
  run.result.samples_ns.push_back(times.wall_ns);
  run.result.samples_ts.push_back(double(run.tokens.size()) * 1e9 /
                                  double(std::max<uint64_t>(times.wall_ns, 1)));
  run.total_ns += times.wall_ns;
  run.total_cpu_ns += times.cpu_ns;
  return Status::Ok();
}

BenchResult Finish(BenchRun& run, int n_threads) {
  BenchResult& result = run.result;
  const size_t reps = std::max<size_t>(result.samples_ns.size(), 1);
  result.avg_ns = run.total_ns / reps;
  result.cpu_share =
      double(run.total_cpu_ns) / (double(std::max<uint64_t>(run.total_ns, 1)) * n_threads);
  MeanStddev(result.samples_ts, result.avg_ts, result.stddev_ts);
  result.median_ts = Median(result.samples_ts);
  const PipelineCounters counters = run.subject->pipeline().counters();
  if (counters.tokens > 0) {
    result.bytes_between_per_token = double(counters.bytes_between) / double(counters.tokens);
    result.tokens_per_batch = double(counters.tokens) / double(counters.batches);
  }
  result.max_in_flight = counters.max_in_flight;
  run.subject.reset();
  return std::move(result);
}

}  // namespace

bool CanInterleave(std::span<const BenchTest> tests, const BenchOptions& options) {
  int remote_subjects = 0;
  for (const BenchTest& test : tests) {
    const std::vector<DeviceSpec>& devices = options.PlacementOf(test).devices;
    remote_subjects += std::any_of(devices.begin(), devices.end(),
                                   [](const DeviceSpec& device) { return device.remote(); });
  }
  return remote_subjects <= 1;
}

Result<std::vector<BenchResult>> RunBenches(const Model& model, ThreadPool& threads,
                                            std::span<const BenchTest> tests,
                                            const BenchOptions& options,
                                            const BenchProgress& progress) {
  for (const BenchTest& test : tests) SHARDLM_TRY(CheckTest(test));
  if (options.reps <= 0) return InvalidArgument("repetitions must be > 0, got {}", options.reps);
  // Tests whose runs interleave: all of them, or one at a time when a remote stage cannot
  // serve two subjects at once.
  const size_t group = CanInterleave(tests, options) ? tests.size() : 1;
  std::vector<BenchResult> results;
  for (size_t first = 0; first < tests.size(); first += group) {
    std::vector<BenchRun> runs;
    for (const BenchTest& test : tests.subspan(first, std::min(group, tests.size() - first))) {
      SHARDLM_ASSIGN_OR_RETURN(BenchRun run, StartRun(model, threads, test, options));
      runs.push_back(std::move(run));
    }
    for (int rep = 0; rep < options.reps; ++rep) {
      for (BenchRun& run : runs) {
        if (progress) progress(run.result.test, rep);
        SHARDLM_TRY(TimeOnce(run));
      }
    }
    for (BenchRun& run : runs) results.push_back(Finish(run, threads.size()));
  }
  return results;
}

Result<BenchResult> RunBench(const Model& model, ThreadPool& threads, const BenchTest& test,
                             const BenchOptions& options) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<BenchResult> results,
                           RunBenches(model, threads, std::span(&test, 1), options));
  return std::move(results.front());
}

double PairedRatio(const BenchResult& a, const BenchResult& b) {
  std::vector<double> ratios;
  for (size_t r = 0; r < a.samples_ts.size() && r < b.samples_ts.size(); ++r) {
    if (b.samples_ts[r] > 0) ratios.push_back(a.samples_ts[r] / b.samples_ts[r]);
  }
  return Median(std::move(ratios));
}

}  // namespace shardlm
