// `shardlm run`: one prompt through a GGUF model, the continuation streamed to stdout.
//
// Goals: stdout carries only the generated text (flushed as it streams, so pipes see it
// live); everything else (model load progress, the seed used, timings) goes to stderr;
// sampling flags and defaults as llama.cpp's (temp 0.8, top-k 40, top-p 0.95, min-p 0.05,
// random seed unless given); `--logits-out` records the logits each token was chosen from;
// `--devices` / `--layer-split` run it split into stages (same tokens and logits). The
// prompt is one request through the Scheduler, the engine of `serve` and `bench`: the same
// batching, sampling and finish rules (EOG, -n, a full context).
// Non-goals: chat templates and interactive mode (the server does conversations).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/kv_pool_flags.h"
#include "cli/kv_type_flag.h"
#include "cli/placement_flags.h"
#include "engine/logits_recorder.h"
#include "engine/scheduler.h"
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
  std::string window_kv = "ring";
  KvPoolFlags kv_pool;
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
  DeclareWindowKvFlag(cmd, f.window_kv);
  DeclareKvPoolFlags(cmd, f.kv_pool);
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

using Clock = std::chrono::steady_clock;

// Prefill progress on stderr: at most about once a second, and at the end.
std::function<void(int, int)> PrefillProgressPrinter() {
  const Clock::time_point start = Clock::now();
  return [start, last = start](int done, int total) mutable {
    const Clock::time_point now = Clock::now();
    if (done < total && now - last < std::chrono::seconds(1)) return;
    last = now;
    const double seconds = std::chrono::duration<double>(now - start).count();
    std::fprintf(stderr, "prefill: %d/%d tokens (%.1f tok/s)\n", done, total,
                 seconds > 0 ? done / seconds : 0.0);
  };
}

// Why generation ended, in run's words: "eog", "length" (-n reached), "context" (full).
const char* StopName(const FinishEvent& finish, int n_predict) {
  switch (finish.reason) {
    case FinishReason::kStop:
      return "eog";
    case FinishReason::kLength:
      return n_predict >= 0 && finish.usage.completion_tokens >= n_predict ? "length" : "context";
    default:
      return FinishReasonName(finish.reason);
  }
}

void PrintTimings(const FinishEvent& finish, int n_predict, size_t kv_bytes) {
  const RequestUsage& u = finish.usage;
  const int passes = std::max(u.completion_tokens - 1, 0);  // the last token is not fed back
  std::fprintf(stderr,
               "\nprefill: %d tokens in %.1f ms (%.2f tok/s)\n"
               "decode: %d tokens, %d passes in %.1f ms (%.2f tok/s)\n"
               "kv cache: %.2f MiB\nstop: %s\n",
               u.prompt_tokens, u.prefill_ms,
               u.prefill_ms > 0 ? u.prompt_tokens * 1e3 / u.prefill_ms : 0.0, u.completion_tokens,
               passes, u.decode_ms, u.decode_ms > 0 ? passes * 1e3 / u.decode_ms : 0.0,
               double(kv_bytes) / (1024.0 * 1024.0), StopName(finish, n_predict));
}

// The scheduler's options for one request of n_prompt tokens: one slot whose KV holds what
// the request can reach (min(n_ctx, prompt + n_predict) positions), batches no larger than
// the prompt, no prefix cache (nothing to share).
SchedulerOptions OneRequestOptions(const RunFlags& f, int n_prompt, int n_threads, KvType kv_type,
                                   PlacementOptions placement) {
  SchedulerOptions options;
  options.n_parallel = 1;
  options.n_ctx =
      f.n_predict < 0 ? f.n_ctx : std::min(f.n_ctx, n_prompt + std::max(f.n_predict, 1));
  options.n_batch = std::min(f.n_batch, n_prompt);
  options.max_queue = 0;
  options.threads = n_threads;
  options.kv_type = kv_type;
  options.log_requests = false;
  options.placement = std::move(placement);
  options.placement.model_path = f.model_path;
  options.placement.show_progress = true;
  options.prefix_cache = false;
  options.prompt_logit_rows = 1;
  return options;
}

Status RunCommand(RunFlags& f) {
  SHARDLM_ASSIGN_OR_RETURN(KvType kv_type, ParseKvTypeFlag(f.kv_type));
  SHARDLM_ASSIGN_OR_RETURN(WindowKv window_kv, ParseWindowKvFlag(f.window_kv));
  SHARDLM_ASSIGN_OR_RETURN(PlacementOptions placement, ParsePlacement(f.placement));
  if (f.seed < 0) {
    f.sampling.seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  } else {
    f.sampling.seed = uint64_t(f.seed);
  }
  SHARDLM_TRY(f.sampling.Validate());
  if (f.n_ctx <= 0 || f.n_batch <= 0) {
    return InvalidArgument("context size ({}) and batch size ({}) must be positive", f.n_ctx,
                           f.n_batch);
  }
  SHARDLM_ASSIGN_OR_RETURN(LoadedModel loaded,
                           LoadModelFile(f.model_path, ModelLoadOptions(placement)));
  PrintLoadInfo(loaded);
  std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(f.sampling.seed));

  const int n_threads = ResolveThreads(f.n_threads);
  std::fprintf(stderr, "threads: %d, context: %d, batch: %d, kv: %s\n", n_threads, f.n_ctx,
               f.n_batch, KvTypeName(kv_type));
  EngineRequest request;
  request.prompt = loaded.tokenizer->Encode(f.prompt, /*add_special=*/true, !f.no_parse_special);
  const int n_prompt = int(request.prompt.size());
  if (n_prompt == 0) {
    return InvalidArgument("the prompt encodes to no tokens (and the vocab adds no BOS)");
  }
  if (n_prompt >= f.n_ctx) {
    return OutOfRange(
        "the prompt has {} tokens but the context holds {} (prompt + 1 generated token must "
        "fit; raise -c)",
        n_prompt, f.n_ctx);
  }
  request.sampling = f.sampling;
  request.max_tokens = f.n_predict < 0 ? -1 : f.n_predict;
  // EOG tokens are then fed back like any other (and render as ""), so exactly n_predict
  // tokens come out, as in the fixtures' greedy runs; llama.cpp's --ignore-eos forbids them.
  request.ignore_eos = f.ignore_eos;
  SchedulerOptions options =
      OneRequestOptions(f, n_prompt, n_threads, kv_type, std::move(placement));
  options.window_kv = window_kv;
  SHARDLM_ASSIGN_OR_RETURN(ParsedKvPool kv_pool,
                           ParseKvPoolFlags(f.kv_pool, 1, *loaded.model, kv_type, window_kv));
  options.kv_pool = kv_pool.pool;
  options.kv_tier = kv_pool.tier;
  if (options.bounded_kv()) std::fprintf(stderr, "%s\n", DescribeKvPool(kv_pool).c_str());
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> engine,
                           Scheduler::Create(*loaded.model, *loaded.tokenizer, options));

  std::unique_ptr<LogitsRecorder> recorder;
  if (!f.logits_out.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(recorder, LogitsRecorder::Open(f.logits_out));
  }
  // on_finish runs on the engine thread; it notifies under the lock, so this thread never
  // leaves the wait (and destroys what the callback touches) while the callback still runs.
  std::mutex mu;
  std::condition_variable cv;
  std::optional<FinishEvent> finished;
  auto print = [](std::string_view text) {
    if (text.empty()) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  RequestCallbacks callbacks;
  callbacks.on_token = [&](const TokenEvent& event) {
    print(event.text);
    return true;
  };
  callbacks.on_finish = [&](const FinishEvent& event) {
    print(event.text);
    std::lock_guard<std::mutex> lock(mu);
    finished = event;
    cv.notify_all();
  };
  if (recorder) {
    callbacks.on_logits = [&](std::span<const float> row) { return recorder->Append(row); };
  }
  if (n_prompt > f.n_batch) callbacks.on_prefill = PrefillProgressPrinter();
  SHARDLM_TRY(engine->Submit(std::move(request), std::move(callbacks)).status());
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finished.has_value(); });
  const FinishEvent finish = std::move(*finished);
  lock.unlock();
  if (finish.reason == FinishReason::kError) return finish.error;
  if (recorder) SHARDLM_TRY(recorder->Close());
  PrintTimings(finish, f.n_predict, engine->kv_bytes());
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
