// kv_pool_bench: decode speed at depth with a bounded KV pool (`--kv-pool`) against the full
// cache, on the same model, context and machine.
//
// Method: for each depth D the context is synthetic, not prefilled (a 64K prefill takes hours
// on a small CPU): a slot file of D random token ids and KV pages of random F16 (or the
// chosen type's) values is written once, then restored into slot 0 of two engines, one
// unbounded and one with the pool (its pages go to the tier; only the pool's share comes
// back). Each round then sends the same request to both, in an order that alternates by
// round: the D tokens plus one, which hits the restored sequence (one token is computed),
// then --tokens greedy tokens. A request's decode rate is (tokens - 1) / (time of its last
// token - time of its first), so the first token, with its scoring and page-ins, is left
// out. The figure is the median over rounds of the ratio pooled / unbounded, with each
// side's median rate. Also printed: each engine's KV bytes (frames; the unbounded engine
// holds the whole context), and the pooled stage's page-ins, page-outs and seconds per page
// moved. Depths above --unbounded-max run the pooled engine alone (the full cache would not
// fit the machine): its rate and KV bytes are printed, the unbounded ones are null.
// --flat asks whether pooled decode stays flat with depth: pooled engines only, one per
// depth, restored first and then decoding in turn each round, so the machine's drift over
// minutes touches every depth alike; the figure is each depth's rate over the first one's.
//
// Output: JSON lines on stdout, one per depth and round, then one summary per depth;
// progress on stderr.
// Usage: kv_pool_bench -m MODEL [--depths 4096,16384,65536] [--pool 2048] [--tokens 32]
//   [--rounds 3] [--threads 2] [--tier ram|file:DIR] [--kv-type f16] [--select qk|lru]
//   [--dir DIR] [--unbounded-max D] [--flat]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cache/slot_file.h"
#include "engine/scheduler.h"
#include "gguf/fingerprint.h"
#include "pipeline/model_loader.h"
#include "tensor/type_traits.h"
#include "timed_request.h"

namespace shardlm {
namespace {

using bench::Clock;

struct Flags {
  std::string model;
  std::vector<int> depths = {4096, 16384, 65536};
  int pool = 2048;
  int tokens = 32;
  int rounds = 3;
  int threads = 2;
  std::string tier = "ram";
  std::string kv_type = "f16";
  std::string select = "qk";
  std::string dir = std::filesystem::temp_directory_path().string();
  int unbounded_max = std::numeric_limits<int>::max();
  bool flat = false;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()      ? 0.0
         : v.size() % 2 ? v[v.size() / 2]
                        : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// `value` with three decimals (no trailing zeros for whole numbers), or null when not measured.
std::string JsonNumber(bool measured, double value) {
  if (!measured) return "null";
  char text[64];
  std::snprintf(text, sizeof(text), value == double(int64_t(value)) ? "%.0f" : "%.3f", value);
  return text;
}

// A slot file of `depth` random tokens and random KV for one stage holding every layer.
Status WriteSyntheticSlot(const Model& model, KvType kv_type, int depth, const std::string& path) {
  const ModelConfig& config = model.config();
  SnapshotLayout layout;
  layout.model = ModelFingerprint(model.file());
  layout.stages.push_back({0, config.n_layers});
  layout.page_tokens = kDefaultPageTokens;
  layout.n_kv_heads = config.n_head_kv;
  layout.head_dim = config.head_dim;
  layout.kv_type = kv_type;
  std::mt19937 rng(depth);
  std::vector<int32_t> tokens(static_cast<size_t>(depth));
  std::uniform_int_distribution<int32_t> token(0, config.n_vocab - 1);
  for (int32_t& t : tokens) t = token(rng);
  // Pages of random rows, converted as the forward pass stores them; a few distinct pages,
  // cycled (what attention reads is the same amount of memory either way).
  const TypeTraits& element = *GetTypeTraits(KvElementType(kv_type));
  const size_t row_bytes = KvRowBytes(kv_type, size_t(config.head_dim));
  const size_t page_bytes =
      row_bytes * size_t(config.n_head_kv) * kDefaultPageTokens * size_t(config.n_layers) * 2;
  constexpr int kDistinctPages = 8;
  std::vector<uint8_t> pages(page_bytes * kDistinctPages);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(size_t(config.head_dim));
  for (size_t offset = 0; offset < pages.size(); offset += row_bytes) {
    for (float& x : row) x = normal(rng);
    element.quantize_act(row.data(), pages.data() + offset, config.head_dim);
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return IoError("cannot create {}", path);
  auto write_at = [file](uint64_t offset, std::span<const uint8_t> bytes) -> Status {
    if (std::fseek(file, long(offset), SEEK_SET) != 0 ||
        std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size()) {
      return IoError("short write");
    }
    return Status::Ok();
  };
  Result<SlotFileWriter> writer = SlotFileWriter::Start(layout, tokens, write_at);
  Status status = writer.status();
  const int n_pages = (depth + kDefaultPageTokens - 1) / kDefaultPageTokens;
  for (int p = 0; status.ok() && p < n_pages; ++p) {
    const uint8_t* src = pages.data() + page_bytes * size_t(p % kDistinctPages);
    status = writer->WritePages(1, std::span<const uint8_t* const>(&src, 1));
  }
  if (status.ok()) status = writer->Finish();
  std::fclose(file);
  return status;
}

// The decode rate of `n_tokens` greedy tokens after `prompt`.
Result<double> Decode(Scheduler& engine, std::vector<TokenId> prompt, int n_tokens) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.max_tokens = n_tokens;
  request.ignore_eos = true;
  request.sampling.temperature = 0.0f;
  SHARDLM_ASSIGN_OR_RETURN(bench::TimedRun run, bench::RunTimedRequest(engine, request));
  return run.DecodeTokS();
}

// The options of the unbounded engine (pooled = false) or the pooled one for a context of
// `depth` positions.
Result<SchedulerOptions> EngineOptions(const Flags& f, KvType kv_type, int depth, bool pooled) {
  SchedulerOptions options;
  options.n_parallel = 1;
  options.n_ctx = depth + f.tokens + 2 * kDefaultPageTokens;
  options.n_batch = 64;
  options.threads = f.threads;
  options.kv_type = kv_type;
  options.log_requests = false;
  if (pooled) {
    options.kv_pool.pool_tokens = f.pool;
    SHARDLM_ASSIGN_OR_RETURN(options.kv_pool.select, ParsePageSelect(f.select));
    SHARDLM_ASSIGN_OR_RETURN(options.kv_tier, ParseKvTierSpec(f.tier));
  }
  return options;
}

// Engines holding a synthetic context of `depth` positions in slot 0, one per entry of
// `pooled` (null where the entry is false and `skip_unbounded`).
Status RestoreEngines(const Flags& f, const LoadedModel& loaded, KvType kv_type, int depth,
                      bool skip_unbounded, std::span<std::unique_ptr<Scheduler>> engines,
                      std::span<const bool> pooled) {
  const std::string slot_path = f.dir + "/kv_pool_bench_" + std::to_string(depth) + ".slot";
  std::fprintf(stderr, "depth %d: writing a synthetic context to %s\n", depth, slot_path.c_str());
  SHARDLM_TRY(WriteSyntheticSlot(*loaded.model, kv_type, depth, slot_path));
  Status status = Status::Ok();
  for (size_t e = 0; e < engines.size() && status.ok(); ++e) {
    if (!pooled[e] && skip_unbounded) continue;
    Result<SchedulerOptions> options = EngineOptions(f, kv_type, depth, pooled[e]);
    Result<std::unique_ptr<Scheduler>> engine =
        options.ok() ? Scheduler::Create(*loaded.model, *loaded.tokenizer, *options)
                     : Result<std::unique_ptr<Scheduler>>(options.status());
    if (!engine.ok()) {
      status = engine.status();
      break;
    }
    engines[e] = std::move(engine).value();
    const auto start = Clock::now();
    Result<SlotRestoreResult> restored = engines[e]->RestoreSlot(0, slot_path);
    status = restored.status();
    if (status.ok()) {
      std::fprintf(stderr, "depth %d: %s engine restored %d tokens in %.1f s\n", depth,
                   pooled[e] ? "pooled" : "unbounded", restored->n_restored,
                   std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  std::filesystem::remove(slot_path);
  return status;
}

// The restored context's tokens plus one: the request that continues it.
std::vector<TokenId> DepthPrompt(const LoadedModel& loaded, int depth) {
  std::vector<TokenId> prompt;
  std::mt19937 rng(depth);
  std::uniform_int_distribution<int32_t> token(0, loaded.model->config().n_vocab - 1);
  for (int i = 0; i < depth; ++i) prompt.push_back(token(rng));
  prompt.push_back(1);
  return prompt;
}

Status RunDepth(const Flags& f, const LoadedModel& loaded, KvType kv_type, int depth) {
  std::unique_ptr<Scheduler> engines[2];
  const bool is_pooled[2] = {false, true};
  const bool paired = depth <= f.unbounded_max;
  SHARDLM_TRY(RestoreEngines(f, loaded, kv_type, depth, !paired, engines, is_pooled));
  const std::vector<TokenId> prompt = DepthPrompt(loaded, depth);
  std::vector<double> rates[2], ratios;
  for (int round = 0; round < f.rounds; ++round) {
    double tok_s[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const int e = (round + k) % 2;
      if (!engines[e]) continue;
      SHARDLM_ASSIGN_OR_RETURN(tok_s[e], Decode(*engines[e], prompt, f.tokens));
      rates[e].push_back(tok_s[e]);
    }
    if (paired) ratios.push_back(tok_s[1] / tok_s[0]);
    std::printf(
        "{\"depth\": %d, \"round\": %d, \"unbounded_tok_s\": %s, \"pooled_tok_s\": %.3f, "
        "\"ratio\": %s}\n",
        depth, round, JsonNumber(paired, tok_s[0]).c_str(), tok_s[1],
        JsonNumber(paired, tok_s[1] / tok_s[0]).c_str());
    std::fflush(stdout);
  }
  const ResidencyStats paging = engines[1]->stage_stats()[0].paging;
  const uint64_t moves = paging.page_ins + paging.page_outs;
  std::printf(
      "{\"depth\": %d, \"pool\": %d, \"select\": \"%s\", \"tier\": \"%s\", \"kv_type\": \"%s\", "
      "\"tokens\": %d, \"rounds\": %d, \"unbounded_tok_s\": %s, \"pooled_tok_s\": %.3f, "
      "\"median_ratio\": %s, \"unbounded_kv_bytes\": %s, \"pooled_kv_bytes\": %zu, "
      "\"page_ins\": %llu, \"page_outs\": %llu, \"ms_per_page_moved\": %.3f}\n",
      depth, f.pool, f.select.c_str(), f.tier.c_str(), f.kv_type.c_str(), f.tokens, f.rounds,
      JsonNumber(paired, Median(rates[0])).c_str(), Median(rates[1]),
      JsonNumber(paired, Median(ratios)).c_str(),
      JsonNumber(paired, paired ? double(engines[0]->info().stages[0].kv_bytes) : 0.0).c_str(),
      engines[1]->info().stages[0].kv_bytes, (unsigned long long)paging.page_ins,
      (unsigned long long)paging.page_outs,
      moves > 0 ? 1000.0 * paging.paging_seconds / double(moves) : 0.0);
  std::fflush(stdout);
  return Status::Ok();
}

// --flat: one pooled engine per depth, all restored first, then each round decodes on every
// one in a rotating order; a depth's figure is the median over rounds of its rate divided by
// the first depth's in the same round (flat decode: 1.0 at every depth).
Status RunFlat(const Flags& f, const LoadedModel& loaded, KvType kv_type) {
  const size_t n = f.depths.size();
  std::vector<std::unique_ptr<Scheduler>> engines(n);
  std::vector<std::vector<TokenId>> prompts(n);
  const bool pooled[1] = {true};
  // In reverse list order (deepest first when it ascends): the deep slot file is gone before
  // the shallower ones are written (disk room).
  for (size_t d = n; d-- > 0;) {
    SHARDLM_TRY(RestoreEngines(f, loaded, kv_type, f.depths[d], false,
                               std::span<std::unique_ptr<Scheduler>>(&engines[d], 1), pooled));
    prompts[d] = DepthPrompt(loaded, f.depths[d]);
    // The first request pages in the pool's share of the restored context: not timed.
    SHARDLM_TRY(Decode(*engines[d], prompts[d], 2).status());
  }
  std::vector<std::vector<double>> rates(n), ratios(n);
  for (int round = 0; round < f.rounds; ++round) {
    std::vector<double> tok_s(n);
    for (size_t k = 0; k < n; ++k) {
      const size_t d = (size_t(round) + k) % n;
      SHARDLM_ASSIGN_OR_RETURN(tok_s[d], Decode(*engines[d], prompts[d], f.tokens));
    }
    for (size_t d = 0; d < n; ++d) {
      rates[d].push_back(tok_s[d]);
      ratios[d].push_back(tok_s[d] / tok_s[0]);
      std::printf(
          "{\"flat\": true, \"depth\": %d, \"round\": %d, \"pooled_tok_s\": %.3f, "
          "\"ratio_to_first_depth\": %.3f}\n",
          f.depths[d], round, tok_s[d], tok_s[d] / tok_s[0]);
    }
    std::fflush(stdout);
  }
  for (size_t d = 0; d < n; ++d) {
    std::printf(
        "{\"flat\": true, \"depth\": %d, \"pool\": %d, \"select\": \"%s\", \"tier\": "
        "\"%s\", \"kv_type\": \"%s\", \"tokens\": %d, \"rounds\": %d, \"pooled_tok_s\": "
        "%.3f, \"median_ratio_to_first_depth\": %.3f, \"pooled_kv_bytes\": %zu}\n",
        f.depths[d], f.pool, f.select.c_str(), f.tier.c_str(), f.kv_type.c_str(), f.tokens,
        f.rounds, Median(rates[d]), Median(ratios[d]), engines[d]->info().stages[0].kv_bytes);
  }
  std::fflush(stdout);
  return Status::Ok();
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  using namespace shardlm;
  Flags f;
  CLI::App app("Decode at depth: a bounded KV pool against the full cache");
  app.add_option("-m,--model", f.model, "GGUF model")->required();
  app.add_option("--depths", f.depths, "Context depths (positions)")->delimiter(',');
  app.add_option("--pool", f.pool, "--kv-pool of the pooled engine (positions)");
  app.add_option("--tokens", f.tokens, "Tokens decoded per request");
  app.add_option("--rounds", f.rounds, "Paired rounds per depth");
  app.add_option("--threads", f.threads, "Compute threads");
  app.add_option("--tier", f.tier, "--kv-tier of the pooled engine: ram | file:DIR");
  app.add_option("--kv-type", f.kv_type, "KV element type: f32 | f16 | q8_0");
  app.add_option("--select", f.select, "--kv-select of the pooled engine: qk | lru");
  app.add_option("--dir", f.dir, "Where the synthetic slot files are written (then removed)");
  app.add_flag("--flat", f.flat,
               "Pooled engines only, one per depth, interleaved: each depth's rate against the "
               "first depth's");
  app.add_option("--unbounded-max", f.unbounded_max,
                 "Deepest context the unbounded engine runs (deeper: the pooled one alone)");
  CLI11_PARSE(app, argc, argv);
  Result<KvType> kv_type = ParseKvType(f.kv_type);
  Result<LoadedModel> loaded = kv_type.ok() ? LoadModelFile(f.model, {}) : kv_type.status();
  Status status = loaded.status();
  if (f.flat && status.ok()) {
    status = RunFlat(f, *loaded, *kv_type);
  } else {
    for (int depth : f.depths) {
      if (status.ok()) status = RunDepth(f, *loaded, *kv_type, depth);
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "kv_pool_bench: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
