// `shardlm gguf synth`: writes a random-weight model of a given architecture, shape and quant
// type, for tests and benchmarks without downloads. The model logic lives in
// synth_model.{h,cc}; this file declares the flags and reports progress.
//
// Goals: a preset plus per-dimension overrides; progress on stderr for big models; the file
// written atomically. Non-goals: architectures beyond llama/qwen3/gemma3/qwen35.
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/synth_model.h"

namespace shardlm::cli {
namespace {

struct SynthFlags {
  std::string arch = "qwen3";
  std::string preset = "tiny";
  std::string type = "f32";
  uint64_t seed = 42;
  std::string out;
  int n_threads = 0;
  bool quiet = false;
  bool dry_run = false;
  std::optional<int64_t> layers, embd, ff, heads, kv_heads, head_dim, vocab, ctx, window;
  std::optional<double> rope_base;
  bool tied = false;
  bool untied = false;
};

void DeclareFlags(CLI::App& cmd, SynthFlags& f) {
  cmd.add_option("--arch", f.arch, "llama | qwen3 | gemma3 | qwen35 | gemma4")
      ->capture_default_str();
  cmd.add_option("--preset", f.preset, "tiny | 0.6b | 1.7b (Qwen3 shapes)")->capture_default_str();
  cmd.add_option("--type", f.type,
                 "f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs "
                 "iq3_s iq3_xxs iq2_s iq2_xs iq2_xxs iq1_m iq1_s tq1_0 tq2_0 mxfp4 | mixes "
                 "q4_k_m q5_k_m q3_k_m")
      ->capture_default_str();
  cmd.add_option("--seed", f.seed, "PRNG seed (same seed, same file)")->capture_default_str();
  cmd.add_option("-o,--output", f.out, "Output .gguf path (required unless --dry-run)");
  cmd.add_option("-t,--threads", f.n_threads, "Quantization threads (0: all)");
  cmd.add_option("--layers", f.layers, "Override: block count");
  cmd.add_option("--embd", f.embd, "Override: embedding length");
  cmd.add_option("--ff", f.ff, "Override: feed-forward length");
  cmd.add_option("--heads", f.heads, "Override: attention heads");
  cmd.add_option("--kv-heads", f.kv_heads, "Override: KV heads");
  cmd.add_option("--head-dim", f.head_dim, "Override: head dimension");
  cmd.add_option("--vocab", f.vocab, "Override: vocabulary size (>= 259, padded with [PADn])");
  cmd.add_option("--ctx", f.ctx, "Override: context length");
  cmd.add_option("--rope-base", f.rope_base, "Override: RoPE frequency base");
  cmd.add_option("--window", f.window, "Override (gemma3): attention window of windowed layers");
  cmd.add_flag("--tied", f.tied, "Tie the LM head to token_embd (no output.weight)");
  cmd.add_flag("--untied", f.untied, "Write a separate output.weight");
  cmd.add_flag("-q,--quiet", f.quiet, "No progress on stderr");
  cmd.add_flag("--dry-run", f.dry_run,
               "Print the tensor plan (name, type, shape, bytes) and the total; write nothing");
}

Result<SynthSpec> SpecFromFlags(const SynthFlags& f) {
  SHARDLM_ASSIGN_OR_RETURN(SynthSpec spec, SynthPreset(f.arch, f.preset));
  spec.type = f.type;
  spec.seed = f.seed;
  auto apply = [](const std::optional<int64_t>& v, int64_t& field) {
    if (v) field = *v;
  };
  apply(f.layers, spec.n_layers);
  apply(f.embd, spec.n_embd);
  apply(f.ff, spec.n_ff);
  apply(f.heads, spec.n_head);
  apply(f.kv_heads, spec.n_head_kv);
  apply(f.head_dim, spec.head_dim);
  apply(f.vocab, spec.n_vocab);
  apply(f.ctx, spec.n_ctx);
  apply(f.window, spec.sliding_window);
  if (f.rope_base) spec.rope_base = *f.rope_base;
  if (f.tied && f.untied) return InvalidArgument("--tied and --untied exclude each other");
  if (f.tied) spec.tied = true;
  if (f.untied) spec.tied = false;
  SHARDLM_TRY(ValidateSynthSpec(spec));
  return spec;
}

// Prints every planned tensor and the totals llama-bench would report as the model size.
Status PrintPlan(const SynthSpec& spec) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<SynthTensor> plan, PlanSynthTensors(spec));
  uint64_t total_bytes = 0;
  int64_t n_params = 0;
  for (const SynthTensor& t : plan) {
    auto info = LookupGgmlType(static_cast<uint32_t>(t.type));
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    uint64_t bytes = static_cast<uint64_t>(rows * RowBytes(*info, t.ne[0]));
    std::printf("%-40s %-6s [%s] %llu\n", t.name.c_str(), std::string(info->name).c_str(),
                fmt::format("{}", fmt::join(t.ne, ", ")).c_str(),
                static_cast<unsigned long long>(bytes));
    total_bytes += bytes;
    n_params += rows * t.ne[0];
  }
  std::printf("total: %zu tensors, %llu bytes (%.2f MiB), %lld parameters\n", plan.size(),
              static_cast<unsigned long long>(total_bytes),
              static_cast<double>(total_bytes) / (1 << 20), static_cast<long long>(n_params));
  return Status::Ok();
}

Status RunSynth(const SynthFlags& flags) {
  SHARDLM_ASSIGN_OR_RETURN(SynthSpec spec, SpecFromFlags(flags));
  if (flags.dry_run) return PrintPlan(spec);
  if (flags.out.empty()) return InvalidArgument("gguf synth: -o/--output is required");
  SynthProgress progress;
  if (!flags.quiet) {
    // A terminal gets one line rewritten in place; a log gets a line per tensor.
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    progress = [tty](size_t i, size_t n, const std::string& name) {
      std::fprintf(stderr, tty ? "\rsynth: tensor %zu/%zu %-40s" : "synth: tensor %zu/%zu %s\n",
                   i + 1, n, name.c_str());
      std::fflush(stderr);
    };
  }
  auto start = std::chrono::steady_clock::now();
  SHARDLM_ASSIGN_OR_RETURN(GgufWriter writer, BuildSynthModel(spec, flags.n_threads, progress));
  Status st = writer.WriteToFile(flags.out);
  if (!flags.quiet && ::isatty(STDERR_FILENO)) std::fputc('\n', stderr);
  SHARDLM_TRY(st);
  if (!flags.quiet) {
    std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "synth: wrote %s (%zu tensors, %.1f MiB) in %.1f s\n", flags.out.c_str(),
                 writer.n_tensors(), static_cast<double>(writer.FileSize()) / (1 << 20), s.count());
  }
  return Status::Ok();
}

}  // namespace

void AddGgufSynthCommand(CLI::App& gguf, Action& action) {
  auto flags = std::make_shared<SynthFlags>();
  CLI::App* cmd =
      gguf.add_subcommand("synth", "Write a random-weight model (llama, qwen3, gemma3, qwen35)");
  DeclareFlags(*cmd, *flags);
  cmd->callback([flags, &action] { action = [flags] { return RunSynth(*flags); }; });
}

}  // namespace shardlm::cli
