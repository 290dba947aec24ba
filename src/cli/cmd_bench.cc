// `shardlm bench`: prefill and decode throughput of a GGUF model, like llama-bench.
//
// Goals: `pp<p>` (prefill p tokens in one batch, fresh KV each repetition) and `tg<n>`
// (decode n tokens one at a time; with --streams S, `tg<n>x<S>`: S sequences decoding
// together, one batch of S tokens per step, or on a split one micro-batch per stage in
// flight), each run as requests through the engine `serve` runs (bench_runner.h), a
// warm-up run each, mean ± sample stddev of tok/s over -r repetitions; a markdown
// table like llama-bench's on stdout, or with --json one JSON object per test per line (JSON
// lines: model_filename, model_type, model_size, model_n_params, n_threads, type_k,
// n_prompt, n_gen, n_streams, n_depth, test, avg_ns, avg_ts, stddev_ts, median_ts, cpu_share,
// samples_ns, samples_ts, devices, bytes_between_per_token, tokens_per_batch,
// max_in_flight, and where a run pairs them paired_ratio / paired_ratio_vs) for scripts
// (bench/engine_bench.sh, bench/split_bench.sh). `--devices` / `--layer-split` run the same
// tests through a split pipeline; `--vs-devices` / `--vs-layer-split` run them on a second
// placement too, interleaved, with each test's paired ratio to the first placement.
// Non-goals: parameter sweeps (lists of -p/-n/-t values), several models per run.
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/kv_pool_flags.h"
#include "cli/kv_type_flag.h"
#include "cli/placement_flags.h"
#include "engine/bench_runner.h"
#include "pipeline/model_loader.h"

namespace shardlm::cli {
namespace {

struct BenchFlags {
  std::string model_path;
  int n_prompt = 512;
  int n_gen = 128;
  int n_depth = 0;
  std::vector<int> streams = {1};
  int n_threads = 0;  // 0: every hardware thread
  int reps = 5;
  std::string kv_type = "f32";
  std::string window_kv = "ring";
  bool json = false;
  PlacementFlags placement;
  PlacementFlags vs_placement;  // --vs-devices / --vs-layer-split; devices "" → none
  KvPoolFlags kv_pool;
};

void DeclareFlags(CLI::App& cmd, BenchFlags& f) {
  cmd.add_option("-m,--model", f.model_path, "GGUF model file")->required();
  cmd.add_option("-p,--n-prompt", f.n_prompt, "Prompt tokens of the pp test (0: skip)")
      ->capture_default_str();
  cmd.add_option("-n,--n-gen", f.n_gen, "Generated tokens of the tg test (0: skip)")
      ->capture_default_str();
  cmd.add_option("-d,--depth", f.n_depth,
                 "Decode tests run after this many positions of context, prefilled untimed "
                 "(llama-bench's -d)")
      ->capture_default_str();
  cmd.add_option("-s,--streams", f.streams,
                 "Sequences decoding together in the tg test, comma-separated for several "
                 "tests, e.g. 1,8")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("-t,--threads", f.n_threads, "Threads (0: all hardware threads)")
      ->capture_default_str();
  cmd.add_option("-r,--repetitions", f.reps, "Timed repetitions per test")->capture_default_str();
  DeclareKvTypeFlag(cmd, f.kv_type);
  DeclareWindowKvFlag(cmd, f.window_kv);
  DeclareKvPoolFlags(cmd, f.kv_pool);
  cmd.add_flag("--json", f.json, "Print one JSON object per test (JSON lines)");
  DeclarePlacementFlags(cmd, f.placement);
  cmd.add_option("--vs-devices", f.vs_placement.devices,
                 "A second placement (as --devices) to run every test on too, interleaved with "
                 "the first, with the paired ratio of each test on it to the same test on the "
                 "first");
  cmd.add_option("--vs-layer-split", f.vs_placement.layer_split,
                 "--layer-split of the --vs-devices placement");
}

// The --devices value a result ran on, "cpu" for one unpinned stage.
std::string DevicesOf(const BenchFlags& f, const BenchResult& r) {
  const PlacementFlags& p = r.test.on_vs ? f.vs_placement : f.placement;
  return p.devices.empty() ? "cpu" : p.devices;
}

// llama.cpp's names for general.file_type (llama_model_ftype), as llama-bench prints them.
std::string FileTypeName(const GgufFile& file) {
  static const std::map<uint64_t, const char*> kNames = {{0, "all F32"},
                                                         {1, "F16"},
                                                         {2, "Q4_0"},
                                                         {3, "Q4_1"},
                                                         {7, "Q8_0"},
                                                         {8, "Q5_0"},
                                                         {9, "Q5_1"},
                                                         {10, "Q2_K - Medium"},
                                                         {11, "Q3_K - Small"},
                                                         {12, "Q3_K - Medium"},
                                                         {13, "Q3_K - Large"},
                                                         {14, "Q4_K - Small"},
                                                         {15, "Q4_K - Medium"},
                                                         {16, "Q5_K - Small"},
                                                         {17, "Q5_K - Medium"},
                                                         {18, "Q6_K"},
                                                         {19, "IQ2_XXS - 2.0625 bpw"},
                                                         {20, "IQ2_XS - 2.3125 bpw"},
                                                         {23, "IQ3_XXS - 3.0625 bpw"},
                                                         {24, "IQ1_S - 1.5625 bpw"},
                                                         {25, "IQ4_NL - 4.5 bpw"},
                                                         {26, "IQ3_S - 3.4375 bpw"},
                                                         {29, "IQ2_M - 2.7 bpw"},
                                                         {30, "IQ4_XS - 4.25 bpw"},
                                                         {31, "IQ1_M - 1.75 bpw"},
                                                         {36, "TQ1_0 - 1.69 bpw ternary"},
                                                         {37, "TQ2_0 - 2.06 bpw ternary"},
                                                         {38, "MXFP4 MoE"},
                                                         {32, "BF16"}};
  Result<uint64_t> ftype = file.GetUint("general.file_type");
  if (ftype.ok()) {
    auto it = kNames.find(*ftype);
    if (it != kNames.end()) return it->second;
    return "ftype " + std::to_string(*ftype);
  }
  // No file type recorded: name the type that holds most of the bytes.
  std::map<uint32_t, uint64_t> bytes_by_type;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    bytes_by_type[uint32_t(tensor.type)] += tensor.n_bytes;
  }
  uint32_t main_type = 0;
  uint64_t most = 0;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > most) {
      main_type = type;
      most = bytes;
    }
  }
  return GgmlTypeName(main_type);
}

struct ModelFacts {
  std::string filename;
  std::string type;  // "qwen3 Q4_K - Medium"
  uint64_t size_bytes = 0;
  uint64_t n_params = 0;
};

ModelFacts DescribeModel(const LoadedModel& loaded) {
  ModelFacts facts;
  facts.filename = loaded.file->name();
  facts.type =
      std::string(ArchName(loaded.model->config().arch)) + " " + FileTypeName(*loaded.file);
  for (const GgufTensorInfo& tensor : loaded.file->tensors()) {
    facts.size_bytes += tensor.n_bytes;
    facts.n_params += uint64_t(tensor.n_elements());
  }
  return facts;
}

nlohmann::json ToJson(const ModelFacts& facts, const BenchFlags& f, int n_threads,
                      const BenchResult& r) {
  return {{"model_filename", facts.filename},
          {"model_type", facts.type},
          {"model_size", facts.size_bytes},
          {"model_n_params", facts.n_params},
          {"n_threads", n_threads},
          {"type_k", f.kv_type},
          {"kv_pool",
           f.kv_pool.pool.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.kv_pool.pool)},
          {"n_prompt", r.test.n_prompt},
          {"n_gen", r.test.n_gen},
          {"n_streams", r.test.n_streams},
          {"n_depth", r.test.n_depth},
          {"test", r.test.Name()},
          {"avg_ns", r.avg_ns},
          {"avg_ts", r.avg_ts},
          {"stddev_ts", r.stddev_ts},
          {"median_ts", r.median_ts},
          {"cpu_share", r.cpu_share},
          {"samples_ns", r.samples_ns},
          {"samples_ts", r.samples_ts},
          {"devices", DevicesOf(f, r)},
          {"layer_split", (r.test.on_vs ? f.vs_placement : f.placement).layer_split},
          {"bytes_between_per_token", r.bytes_between_per_token},
          {"tokens_per_batch", r.tokens_per_batch},
          {"max_in_flight", r.max_in_flight}};
}

void PrintTableHeader() {
  std::printf("| model | size | params | backend | threads | test | t/s |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
}

// backend: "CPU" unsplit, else the stages' devices ("cpu:0,unix:/run/s1.sock").
void PrintTableRow(const ModelFacts& facts, const std::string& backend, int n_threads,
                   const BenchResult& r) {
  std::printf("| %s | %.2f MiB | %.2f M | %s | %d | %s | %.2f ± %.2f |\n", facts.type.c_str(),
              double(facts.size_bytes) / (1024.0 * 1024.0), double(facts.n_params) / 1e6,
              backend.c_str(), n_threads, r.test.Name().c_str(), r.avg_ts, r.stddev_ts);
  std::fflush(stdout);
}

Status BenchCommand(const BenchFlags& f) {
  SHARDLM_ASSIGN_OR_RETURN(KvType kv_type, ParseKvTypeFlag(f.kv_type));
  SHARDLM_ASSIGN_OR_RETURN(WindowKv window_kv, ParseWindowKvFlag(f.window_kv));
  if (f.n_prompt < 0 || f.n_gen < 0 || f.n_depth < 0) {
    return InvalidArgument("-p, -n and -d must be >= 0");
  }
  SHARDLM_ASSIGN_OR_RETURN(PlacementOptions placement, ParsePlacement(f.placement));
  const bool vs = !f.vs_placement.devices.empty();
  if (!vs && !f.vs_placement.layer_split.empty()) {
    return InvalidArgument("--vs-layer-split needs --vs-devices");
  }
  PlacementOptions vs_placement;
  if (vs) {
    SHARDLM_ASSIGN_OR_RETURN(vs_placement, ParsePlacement(f.vs_placement));
    vs_placement.allowed_shard_uids = placement.allowed_shard_uids;  // one flag for both
  }
  // An unsplit placement computes with the loaded model itself, so it must be loaded whole.
  const bool vs_unsplit = vs && vs_placement.devices.size() <= 1;
  SHARDLM_ASSIGN_OR_RETURN(
      LoadedModel loaded,
      LoadModelFile(f.model_path, ModelLoadOptions(vs_unsplit ? vs_placement : placement)));
  const ModelFacts facts = DescribeModel(loaded);
  const unsigned hardware = std::thread::hardware_concurrency();
  const int n_threads = f.n_threads > 0 ? f.n_threads : int(hardware > 0 ? hardware : 1);

  std::vector<BenchTest> tests;
  if (f.n_prompt > 0) tests.push_back({f.n_prompt, 0});
  for (int streams : f.streams) {
    if (streams < 1) return InvalidArgument("--streams must be >= 1, got {}", streams);
    if (f.n_gen > 0) tests.push_back({0, f.n_gen, streams, f.n_depth});
  }
  if (vs) {
    const size_t n = tests.size();
    for (size_t i = 0; i < n; ++i) {
      tests.push_back(tests[i]);
      tests.back().on_vs = true;
    }
  }
  BenchOptions options;
  options.reps = f.reps;
  options.kv_type = kv_type;
  options.window_kv = window_kv;
  // A pool per sequence: every stream of a tg test has its own.
  SHARDLM_ASSIGN_OR_RETURN(ParsedKvPool kv_pool,
                           ParseKvPoolFlags(f.kv_pool, 1, *loaded.model, kv_type, window_kv));
  options.kv_pool = kv_pool.pool;
  options.kv_tier = kv_pool.tier;
  if (kv_pool.pool.bounded()) std::fprintf(stderr, "bench: %s\n", DescribeKvPool(kv_pool).c_str());
  for (auto [target, parsed] : {std::pair{&options.placement, &placement},
                                std::pair{&options.vs_placement, &vs_placement}}) {
    *target = *parsed;
    target->model_path = f.model_path;
    target->show_progress = false;  // no loading lines between the runs
  }
  const bool interleaved = CanInterleave(tests, options);
  std::fprintf(stderr, "bench: %zu tests, %d threads, warm-up + %d runs each%s\n", tests.size(),
               n_threads, f.reps, tests.size() > 1 && interleaved ? ", runs interleaved" : "");
  auto progress = [&](const BenchTest& test, int rep) {
    std::fprintf(stderr, "bench: %s%s run %d/%d\n", test.Name().c_str(),
                 test.on_vs ? " (--vs-devices)" : "", rep + 1, f.reps);
  };
  SHARDLM_ASSIGN_OR_RETURN(
      std::vector<BenchResult> results,
      RunBenches(*loaded.model, *loaded.tokenizer, n_threads, tests, options, progress));
  if (!f.json) PrintTableHeader();
  for (const BenchResult& result : results) {
    // Paired with the same run's tg<N> on the same placement (tg<N>x<S> only), and with the
    // same test on the first placement (--vs-devices tests only).
    const BenchResult* single = nullptr;
    const BenchResult* first = nullptr;
    for (const BenchResult& other : results) {
      const BenchTest& a = result.test;
      const BenchTest& b = other.test;
      if (a.n_streams > 1 && b.n_streams == 1 && b.n_gen == a.n_gen && b.on_vs == a.on_vs) {
        single = &other;
      }
      if (a.on_vs && !b.on_vs && b.Name() == a.Name()) first = &other;
    }
    if (!interleaved) single = first = nullptr;
    if (f.json) {
      nlohmann::json line = ToJson(facts, f, n_threads, result);
      if (single != nullptr) {
        line["paired_ratio"] = {{"to", single->test.Name()},
                                {"median", PairedRatio(result, *single)}};
      }
      if (first != nullptr) {
        line["paired_ratio_vs"] = {{"to", DevicesOf(f, *first)},
                                   {"median", PairedRatio(result, *first)}};
      }
      std::printf("%s\n", line.dump().c_str());
    } else {
      const std::string devices = DevicesOf(f, result);
      PrintTableRow(facts, devices == "cpu" ? "CPU" : devices, n_threads, result);
      if (single != nullptr) {
        std::printf("|  |  |  |  |  | %s / %s (median of paired runs) | %.2f× |\n",
                    result.test.Name().c_str(), single->test.Name().c_str(),
                    PairedRatio(result, *single));
      }
      if (first != nullptr) {
        std::printf("|  |  |  |  |  | %s on %s / on %s (median of paired runs) | %.2f× |\n",
                    result.test.Name().c_str(), devices.c_str(), DevicesOf(f, *first).c_str(),
                    PairedRatio(result, *first));
      }
    }
    std::fflush(stdout);
  }
  return Status::Ok();
}

}  // namespace

void AddBenchCommand(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill (pp) and decode (tg) throughput");
  auto flags = std::make_shared<BenchFlags>();
  DeclareFlags(*cmd, *flags);
  cmd->callback([&action, flags] { action = [flags] { return BenchCommand(*flags); }; });
}

}  // namespace shardlm::cli
