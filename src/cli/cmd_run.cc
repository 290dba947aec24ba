// `shardlm run`: one prompt through a GGUF model, the continuation streamed to stdout.
//
// Goals: stdout carries only the generated text (flushed as it streams, so pipes see it
// live); everything else (model load progress, the seed used, timings) goes to stderr;
// sampling flags and defaults as llama.cpp's (temp 0.8, top-k 40, top-p 0.95, min-p 0.05,
// random seed unless given); `--logits-out` records the logits each token was chosen from;
// `--devices` / `--layer-split` run it split into stages (same tokens and logits).
// Non-goals: chat templates and interactive mode (the server does conversations).
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/kv_type_flag.h"
#include "cli/placement_flags.h"
#include "engine/generator.h"
#include "engine/logits_recorder.h"
#include "pipeline/model_loader.h"

namespace shardlm::cli {
namespace {

struct RunFlags {
  std::string model_path;
  std::string prompt;
  int n_predict = 64;
  int n_threads = 0;  // 0: every hardware thread
  int n_ctx = 4096;
  int n_batch = 512;
  std::string kv_type = "f32";
  bool no_parse_special = false;
  bool ignore_eos = false;
  std::string logits_out;
  SamplingParams sampling;
  int64_t seed = -1;  // < 0: random
  PlacementFlags placement;
};

void DeclareFlags(CLI::App& cmd, RunFlags& f) {
  cmd.add_option("-m,--model", f.model_path, "GGUF model file")->required();
  cmd.add_option("-p,--prompt", f.prompt, "Prompt text")->required();
  cmd.add_option("-n,--n-predict", f.n_predict, "Tokens to generate (-1: until EOG or ctx full)")
      ->capture_default_str();
  cmd.add_option("-t,--threads", f.n_threads, "Threads (0: all hardware threads)")
      ->capture_default_str();
  cmd.add_option("-c,--ctx-size", f.n_ctx, "Context size in tokens")->capture_default_str();
  cmd.add_option("-b,--batch-size", f.n_batch, "Most prompt tokens per forward pass")
      ->capture_default_str();
  DeclareKvTypeFlag(cmd, f.kv_type);
  cmd.add_flag("--no-parse-special", f.no_parse_special,
               "Tokenize special-token text in the prompt as plain text");
  cmd.add_flag("--ignore-eos", f.ignore_eos,
               "Do not stop at end-of-generation tokens (they are kept and render as nothing)");
  cmd.add_option("--logits-out", f.logits_out,
                 "Write the logits of each step: raw float32 [n_generated][n_vocab]");
  SamplingParams& s = f.sampling;
  cmd.add_option("--temp", s.temperature, "Temperature (<= 0: greedy)")->capture_default_str();
  cmd.add_option("--top-k", s.top_k, "Top-k (<= 0: off)")->capture_default_str();
  cmd.add_option("--top-p", s.top_p, "Top-p (1: off)")->capture_default_str();
  cmd.add_option("--min-p", s.min_p, "Min-p (0: off)")->capture_default_str();
  cmd.add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  cmd.add_option("--repeat-last-n", s.repeat_last_n, "Penalty window (0: off, -1: all)")
      ->capture_default_str();
  cmd.add_option("--presence-penalty", s.presence_penalty, "Presence penalty (0: off)")
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty (0: off)")
      ->capture_default_str();
  cmd.add_option("--seed", f.seed, "Sampling seed (< 0: random, printed to stderr)")
      ->capture_default_str();
  DeclarePlacementFlags(cmd, f.placement);
}

int ResolveThreads(int requested) {
  if (requested > 0) return requested;
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware > 0 ? int(hardware) : 1;
}

void PrintLoadInfo(const LoadedModel& loaded) {
  const ModelConfig& c = loaded.model->config();
  std::fprintf(stderr,
               "model: %s: %s, %d layers, n_embd %d, vocab %d, %.2f MiB, loaded in %.0f ms\n",
               loaded.file->name().c_str(), ArchName(c.arch), c.n_layers, c.n_embd, c.n_vocab,
               double(loaded.file->file_size()) / (1024.0 * 1024.0), loaded.load_seconds * 1e3);
}

void PrintTimings(const GenerationResult& result) {
  std::fprintf(stderr,
               "\nprefill: %zu tokens in %.1f ms (%.2f tok/s)\n"
               "decode: %zu tokens, %d passes in %.1f ms (%.2f tok/s)\n"
               "kv cache: %.2f MiB\nstop: %s\n",
               result.prompt_ids.size(), result.prefill_seconds * 1e3,
               result.PrefillTokensPerSecond(), result.ids.size(), result.decode_passes,
               result.decode_seconds * 1e3, result.DecodeTokensPerSecond(),
               double(result.kv_bytes) / (1024.0 * 1024.0), StopReasonName(result.stop));
}

Status RunCommand(RunFlags& f) {
  SHARDLM_ASSIGN_OR_RETURN(KvType kv_type, ParseKvTypeFlag(f.kv_type));
  SHARDLM_ASSIGN_OR_RETURN(PlacementOptions placement, ParsePlacement(f.placement));
  if (f.seed < 0) {
    f.sampling.seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  } else {
    f.sampling.seed = uint64_t(f.seed);
  }
  SHARDLM_TRY(f.sampling.Validate());
  SHARDLM_ASSIGN_OR_RETURN(LoadedModel loaded,
                           LoadModelFile(f.model_path, ModelLoadOptions(placement)));
  PrintLoadInfo(loaded);
  std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(f.sampling.seed));

  const int n_threads = ResolveThreads(f.n_threads);
  std::fprintf(stderr, "threads: %d, context: %d, batch: %d, kv: %s\n", n_threads, f.n_ctx,
               f.n_batch, KvTypeName(kv_type));
  ThreadPool threads(n_threads);
  GeneratorConfig config;
  config.n_ctx = f.n_ctx;
  config.n_batch = f.n_batch;
  config.kv_type = kv_type;
  config.placement = std::move(placement);
  config.placement.model_path = f.model_path;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Generator> generator,
                           Generator::Create(*loaded.model, *loaded.tokenizer, threads, config));

  std::unique_ptr<LogitsRecorder> recorder;
  if (!f.logits_out.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(recorder, LogitsRecorder::Open(f.logits_out));
  }
  GenerateCallbacks callbacks;
  callbacks.on_text = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  if (recorder) {
    callbacks.on_logits = [&](std::span<const float> row) { return recorder->Append(row); };
  }
  GenerateOptions options;
  options.n_predict = f.n_predict;
  options.parse_special = !f.no_parse_special;
  options.ignore_eos = f.ignore_eos;
  options.show_progress = true;
  SHARDLM_ASSIGN_OR_RETURN(GenerationResult result,
                           generator->Generate(f.prompt, f.sampling, options, callbacks));
  if (recorder) SHARDLM_TRY(recorder->Close());
  PrintTimings(result);
  return Status::Ok();
}

}  // namespace

void AddRunCommand(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("run", "Generate a continuation of one prompt");
  auto flags = std::make_shared<RunFlags>();
  DeclareFlags(*cmd, *flags);
  cmd->callback([&action, flags] { action = [flags] { return RunCommand(*flags); }; });
}

}  // namespace shardlm::cli
