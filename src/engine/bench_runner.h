// Throughput benchmarks of the engine, as llama-bench measures them, run as requests through
// the Scheduler (the engine of `serve` and `run`), measured as the server would run them:
// `pp<N>` is one request whose prompt is N tokens, prefilled in one batch into an empty KV
// cache, timed until the logits of its last position arrive (prefill only); `tg<N>` is a
// request of a one-token prompt that decodes N tokens (N forward passes of one token: the
// prompt's, then each sampled token but the last fed back); `tg<N>x<S>` is S such requests
// submitted together (Scheduler::SubmitAll), decoding together: one batch of S entries per
// step, or on a pipeline of D stages D micro-batches in flight (what `serve --parallel S`
// does with S streams, without HTTP); `tg<N>@d<D>` decodes N tokens after a prompt of D + 1
// (prefilled untimed, as llama-bench's -d). Requests sample greedily and ignore EOG, so every run
// does the same work. Each test runs once to warm up, then `reps` timed times.
//
// Goals: the numbers `shardlm bench` prints and bench/engine_bench.sh records; per-sample
// throughput, mean and sample standard deviation (llama-bench's avg_ts / stddev_ts); a
// check that every run produced finite logits (a benchmark verifies its result).
// Through a pipeline: the same tests run unsplit or split across devices and processes
// (BenchOptions::placement).
// Non-goals: printing (cmd_bench.cc), prompts per stream, sampling settings (server
// benchmarks), the prefix cache (off: every run starts from an empty cache).
//
// Thread safety: one thread drives a run. Lifetime: nothing outlives the call.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/kv_tier.h"
#include "kv/page_pool.h"
#include "kv/pager.h"
#include "model/model.h"
#include "pipeline/placement.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct BenchTest {
  int n_prompt = 0;   // > 0: a prefill test
  int n_gen = 0;      // > 0: a decode test (exactly one of the two is set)
  int n_streams = 1;  // decode: sequences decoding together (1: llama-bench's tg)
  // decode: positions of context each stream decodes after (llama-bench's -d): its prompt is
  // n_depth + 1 tokens, prefilled untimed, then n_gen timed decode passes.
  int n_depth = 0;
  bool on_vs = false;        // runs on BenchOptions::vs_placement instead of placement
  std::string Name() const;  // "pp512" / "tg128" / "tg128x8" / "tg128@d16384"
};

struct BenchOptions {
  int reps = 5;
  KvType kv_type = KvType::kF32;
  WindowKv window_kv = WindowKv::kRing;
  uint64_t seed = 1234;  // random prompt tokens
  // Bounded KV residency (`--kv-pool` and its flags): a pool per sequence; unbounded by
  // default. A pool the test's context fits in is the unbounded engine.
  KvPoolOptions kv_pool = {};
  KvTierSpec kv_tier = {};
  // Placement (placement.h): one device per stage; empty: one "cpu" stage of the n_threads
  // given to RunBench.
  PlacementOptions placement = {};
  // A second placement to compare with (`bench --vs-devices`): the tests with on_vs run on
  // it, interleaved with the others, so PairedRatio of a test on both is robust to drift.
  PlacementOptions vs_placement = {};
  const PlacementOptions& PlacementOf(const BenchTest& test) const {
    return test.on_vs ? vs_placement : placement;
  }
};

struct BenchResult {
  BenchTest test;
  std::vector<uint64_t> samples_ns;  // [reps] wall time per run
  std::vector<double> samples_ts;    // [reps] tokens per second per run (all streams)
  double avg_ts = 0.0;
  double stddev_ts = 0.0;  // sample standard deviation (n - 1), 0 for one rep
  double median_ts = 0.0;
  uint64_t avg_ns = 0;
  // Process CPU time / (wall time × threads) over the timed runs: near 1 when the threads
  // had their cores (a pool that spins while waiting also counts), well below 1 when other
  // processes took the cores; tells a slow engine from a busy machine.
  double cpu_share = 0.0;
  // Hidden-row bytes handed between stages per token (n_embd × 4 × (stages − 1)).
  double bytes_between_per_token = 0.0;
  // Entries per submitted batch, and the most batches in flight at once: with S streams on
  // a pipeline of N stages, micro-batches of S / N streams, N in flight.
  double tokens_per_batch = 0.0;
  int max_in_flight = 0;
};

// Runs one test: a warm-up run, then options.reps timed runs. The model must hold every
// layer and fit the tokenizer; n_threads: the compute threads of an unpinned "cpu" stage.
Result<BenchResult> RunBench(const Model& model, const Tokenizer& tokenizer, int n_threads,
                             const BenchTest& test, const BenchOptions& options);

// Called before each timed run (rep counts from 0).
using BenchProgress = std::function<void(const BenchTest& test, int rep)>;

// Runs several tests, results in the order of `tests`. Every test is set up and warmed up
// first, then the repetitions are interleaved: repetition r of every test, in order, before
// repetition r + 1. On a shared machine whose speed drifts by tens of percent over minutes,
// this exposes every test to the same drift, and the samples of one repetition of two tests
// were taken seconds apart (PairedRatio). When more than one test would hold a remote stage
// at once, the tests run one after another instead (a shard daemon serves one server at a
// time: CanInterleave).
Result<std::vector<BenchResult>> RunBenches(const Model& model, const Tokenizer& tokenizer,
                                            int n_threads, std::span<const BenchTest> tests,
                                            const BenchOptions& options,
                                            const BenchProgress& progress = {});
bool CanInterleave(std::span<const BenchTest> tests, const BenchOptions& options);

// The median over repetitions r of a.samples_ts[r] / b.samples_ts[r]: the ratio of two
// tests measured together (RunBenches interleaved), robust to the machine's drift. 0 when
// there are no samples.
double PairedRatio(const BenchResult& a, const BenchResult& b);

// Mean and sample standard deviation.
void MeanStddev(const std::vector<double>& values, double& mean, double& stddev);
double Median(std::vector<double> values);

}  // namespace shardlm
