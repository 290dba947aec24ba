// Bench runner implementation: a Scheduler per test, random prompt tokens, timed requests.
#include "engine/bench_runner.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <utility>

#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

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

// The batch a deep context is prefilled in (llama-bench's default ubatch).
constexpr int kDepthBatch = 512;

// The subject of one test: a Scheduler with one slot per stream, KV for exactly what a run
// reaches, batches as large as the test's (the whole pp prompt; one entry per tg stream).
class BenchSubject {
 public:
  static Result<std::unique_ptr<BenchSubject>> Create(const Model& model,
                                                      const Tokenizer& tokenizer, int n_threads,
                                                      const BenchTest& test,
                                                      const BenchOptions& options) {
    SchedulerOptions engine;
    engine.n_parallel = test.n_streams;
    // pp: the prompt and room for the token sampled after it; tg: a one-token prompt and
    // n_gen - 1 tokens fed back (at least 2 positions, as every request may generate).
    // At depth: the deep prompt, one more token, then n_gen decoded after the first logits.
    engine.n_ctx = test.n_prompt > 0  ? test.n_prompt + 1
                   : test.n_depth > 0 ? test.n_depth + test.n_gen + 2
                                      : std::max(test.n_gen, 2);
    engine.n_batch = test.n_prompt > 0  ? test.n_prompt
                     : test.n_depth > 0 ? std::max(kDepthBatch, test.n_streams)
                                        : test.n_streams;
    engine.max_queue = 0;
    engine.threads = n_threads;
    engine.kv_type = options.kv_type;
    engine.window_kv = options.window_kv;
    engine.kv_pool = options.kv_pool;
    engine.kv_tier = options.kv_tier;
    engine.log_requests = false;
    engine.placement = options.PlacementOf(test);
    engine.prefix_cache = false;
    engine.prompt_logit_rows = 1;
    auto subject = std::unique_ptr<BenchSubject>(new BenchSubject(test));
    SHARDLM_ASSIGN_OR_RETURN(subject->engine_, Scheduler::Create(model, tokenizer, engine));
    return subject;
  }

  const Scheduler& engine() const { return *engine_; }

  // One run from an empty cache: pp, one request of `tokens` as its prompt; tg, one request
  // per stream, each prompted with one of `tokens`. Timed until the logits of pp's last
  // prompt position arrive, or until every tg request has finished; an error if any
  // request failed or the last logits row of any is not all finite.
  Result<RunTimes> Run(std::span<const TokenId> tokens) {
    std::vector<std::pair<EngineRequest, RequestCallbacks>> requests;
    const bool prefill = test_.n_prompt > 0;
    const int n_requests = prefill ? 1 : test_.n_streams;
    // Logits rows each request computes: pp samples one token after its prompt; at depth the
    // first row ends the untimed prefill, then n_gen rows are timed.
    const bool deep = test_.n_depth > 0;
    const int n_rows = prefill ? 1 : test_.n_gen + (deep ? 1 : 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = n_requests;
      error_ = Status::Ok();
    }
    for (int r = 0; r < n_requests; ++r) {
      EngineRequest request;
      if (prefill) {
        request.prompt.assign(tokens.begin(), tokens.end());
      } else if (deep) {
        // The stream's own deep prompt: the shared context, then its first token.
        request.prompt.assign(tokens.begin() + test_.n_streams, tokens.end());
        request.prompt.push_back(tokens[size_t(r)]);
      } else {
        request.prompt = {tokens[size_t(r)]};
      }
      request.sampling.temperature = 0.0f;
      request.max_tokens = n_rows;
      request.ignore_eos = true;
      RequestCallbacks callbacks;
      callbacks.on_logits = [this, n_rows, prefill, deep,
                             rows = 0](std::span<const float> logits) mutable {
        if (deep && rows == 0) MarkDecodeStart();
        if (++rows < n_rows) return Status::Ok();
        if (prefill) prefill_end_ = Clock::now();
        if (!AllFinite(logits)) {
          return InvalidData("{}: the forward pass produced non-finite logits", test_.Name());
        }
        return Status::Ok();
      };
      callbacks.on_finish = [this](const FinishEvent& event) { OnFinish(event); };
      requests.emplace_back(std::move(request), std::move(callbacks));
    }
    const uint64_t cpu_start = ProcessCpuNs();
    const Clock::time_point start = Clock::now();
    SHARDLM_TRY(engine_->SubmitAll(std::move(requests)).status());
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return running_ == 0; });
    const uint64_t cpu_ns = ProcessCpuNs() - cpu_start;
    SHARDLM_TRY(error_);
    const Clock::time_point end = prefill ? prefill_end_ : finish_end_;
    const Clock::time_point begin = deep ? decode_start_ : start;
    return RunTimes{
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin).count()),
        cpu_ns};
  }

 private:
  explicit BenchSubject(const BenchTest& test) : test_(test) {}

  // Engine thread: the deep prompt's first logits arrived; the timed decode starts at the
  // last stream's (they prefill one after another).
  void MarkDecodeStart() {
    std::lock_guard<std::mutex> lock(mu_);
    decode_start_ = Clock::now();
  }

  // Engine thread. Notifies under the lock: Run may return as soon as it sees running_ 0.
  void OnFinish(const FinishEvent& event) {
    std::lock_guard<std::mutex> lock(mu_);
    if (event.reason != FinishReason::kLength && error_.ok()) {
      error_ = event.reason == FinishReason::kError
                   ? event.error
                   : Status(StatusCode::kInternal,
                            fmt::format("{}: a request ended with {}", test_.Name(),
                                        FinishReasonName(event.reason)));
    }
    finish_end_ = Clock::now();
    if (--running_ == 0) cv_.notify_all();
  }

  BenchTest test_;
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;                 // requests of the run not finished yet
  Status error_;                    // the first failure of the run
  Clock::time_point prefill_end_;   // pp: the last prompt position's logits arrived
  Clock::time_point finish_end_;    // the last request finished
  Clock::time_point decode_start_;  // at depth: the last stream's prefill ended
  // Last: destroyed first, joining the engine thread before what its callbacks touch.
  std::unique_ptr<Scheduler> engine_;
};

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::string BenchTest::Name() const {
  if (n_prompt > 0) return "pp" + std::to_string(n_prompt);
  return "tg" + std::to_string(n_gen) + (n_streams > 1 ? "x" + std::to_string(n_streams) : "") +
         (n_depth > 0 ? "@d" + std::to_string(n_depth) : "");
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
  if (test.n_depth < 0 || (test.n_depth > 0 && test.n_prompt > 0)) {
    return InvalidArgument("a depth applies to decode tests only and must be >= 0, got {}",
                           test.n_depth);
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
  std::vector<TokenId> tokens;  // the prompt tokens of a run
  int n_tokens = 0;             // tokens a run computes (tok/s counts them)
  BenchResult result;
  uint64_t total_ns = 0;
  uint64_t total_cpu_ns = 0;
};

Result<BenchRun> StartRun(const Model& model, const Tokenizer& tokenizer, int n_threads,
                          const BenchTest& test, const BenchOptions& options) {
  BenchRun run;
  SHARDLM_ASSIGN_OR_RETURN(run.subject,
                           BenchSubject::Create(model, tokenizer, n_threads, test, options));
  Rng rng(options.seed);
  // pp: the prompt; tg: the first token of each stream (the rest are sampled).
  // At depth, after the streams' first tokens: the context every stream decodes after.
  run.tokens.resize(size_t(test.n_prompt > 0 ? test.n_prompt : test.n_streams + test.n_depth));
  for (TokenId& token : run.tokens) token = TokenId(rng.Next() % uint64_t(model.config().n_vocab));
  run.n_tokens = test.n_prompt + test.n_gen * test.n_streams;
  run.result.test = test;
  SHARDLM_ASSIGN_OR_RETURN(RunTimes warmup, run.subject->Run(run.tokens));
  (void)warmup;
  return run;
}

Status TimeOnce(BenchRun& run) {
  SHARDLM_ASSIGN_OR_RETURN(RunTimes times, run.subject->Run(run.tokens));
  run.result.samples_ns.push_back(times.wall_ns);
  run.result.samples_ts.push_back(double(run.n_tokens) * 1e9 /
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
  const PipelineCounters counters = run.subject->engine().pipeline_counters();
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

Result<std::vector<BenchResult>> RunBenches(const Model& model, const Tokenizer& tokenizer,
                                            int n_threads, std::span<const BenchTest> tests,
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
      SHARDLM_ASSIGN_OR_RETURN(BenchRun run, StartRun(model, tokenizer, n_threads, test, options));
      runs.push_back(std::move(run));
    }
    for (int rep = 0; rep < options.reps; ++rep) {
      for (BenchRun& run : runs) {
        if (progress) progress(run.result.test, rep);
        SHARDLM_TRY(TimeOnce(run));
      }
    }
    for (BenchRun& run : runs) results.push_back(Finish(run, n_threads));
  }
  return results;
}

Result<BenchResult> RunBench(const Model& model, const Tokenizer& tokenizer, int n_threads,
                             const BenchTest& test, const BenchOptions& options) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<BenchResult> results,
                           RunBenches(model, tokenizer, n_threads, std::span(&test, 1), options));
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
