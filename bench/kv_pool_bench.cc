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
//
// Output: JSON lines on stdout, one per depth and round, then one summary per depth;
// progress on stderr.
// Usage: kv_pool_bench -m MODEL [--depths 4096,16384,65536] [--pool 2048] [--tokens 32]
//   [--rounds 3] [--threads 2] [--tier ram|file:DIR] [--kv-type f16] [--select qk|lru]
//   [--dir DIR] [--unbounded-max D]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
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

Status RunDepth(const Flags& f, const LoadedModel& loaded, KvType kv_type, int depth) {
  const std::string slot_path = f.dir + "/kv_pool_bench_" + std::to_string(depth) + ".slot";
  std::fprintf(stderr, "depth %d: writing a synthetic context to %s\n", depth, slot_path.c_str());
  SHARDLM_TRY(WriteSyntheticSlot(*loaded.model, kv_type, depth, slot_path));
  SchedulerOptions base;
  base.n_parallel = 1;
  base.n_ctx = depth + f.tokens + 2 * kDefaultPageTokens;
  base.n_batch = 64;
  base.threads = f.threads;
  base.kv_type = kv_type;
  base.log_requests = false;
  SchedulerOptions pooled = base;
  pooled.kv_pool.pool_tokens = f.pool;
  SHARDLM_ASSIGN_OR_RETURN(pooled.kv_pool.select, ParsePageSelect(f.select));
  SHARDLM_ASSIGN_OR_RETURN(pooled.kv_tier, ParseKvTierSpec(f.tier));
  std::unique_ptr<Scheduler> engines[2];
  const char* names[2] = {"unbounded", "pooled"};
  const bool paired = depth <= f.unbounded_max;
  for (int e = paired ? 0 : 1; e < 2; ++e) {
    SHARDLM_ASSIGN_OR_RETURN(
        engines[e], Scheduler::Create(*loaded.model, *loaded.tokenizer, e == 0 ? base : pooled));
    const auto start = Clock::now();
    SHARDLM_ASSIGN_OR_RETURN(SlotRestoreResult restored, engines[e]->RestoreSlot(0, slot_path));
    std::fprintf(stderr, "depth %d: %s engine restored %d tokens in %.1f s\n", depth, names[e],
                 restored.n_restored, std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::filesystem::remove(slot_path);
  std::vector<TokenId> prompt;
  {
    std::mt19937 rng(depth);
    std::uniform_int_distribution<int32_t> token(0, loaded.model->config().n_vocab - 1);
    for (int i = 0; i < depth; ++i) prompt.push_back(token(rng));
    prompt.push_back(1);
  }
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
  app.add_option("--unbounded-max", f.unbounded_max,
                 "Deepest context the unbounded engine runs (deeper: the pooled one alone)");
  CLI11_PARSE(app, argc, argv);
  Result<KvType> kv_type = ParseKvType(f.kv_type);
  Result<LoadedModel> loaded = kv_type.ok() ? LoadModelFile(f.model, {}) : kv_type.status();
  Status status = loaded.status();
  for (int depth : f.depths) {
    if (status.ok()) status = RunDepth(f, *loaded, *kv_type, depth);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "kv_pool_bench: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
