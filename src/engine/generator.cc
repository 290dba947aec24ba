// Generator implementation: encode → chunked prefill → sample/decode loop (see generator.h).
#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "engine/sequence.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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

}  // namespace

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kEog:
      return "eog";
    case StopReason::kLength:
      return "length";
    case StopReason::kContext:
      return "context";
  }
  return "unknown";
}

double GenerationResult::PrefillTokensPerSecond() const {
  return prefill_seconds > 0 ? double(prompt_ids.size()) / prefill_seconds : 0.0;
}

double GenerationResult::DecodeTokensPerSecond() const {
  return decode_seconds > 0 ? double(decode_passes) / decode_seconds : 0.0;
}

Generator::Generator(const Model& model, const Tokenizer& tokenizer, ThreadPool& threads,
                     const GeneratorConfig& config)
    : model_(model), tokenizer_(tokenizer), threads_(threads), config_(config) {}

Result<std::unique_ptr<Generator>> Generator::Create(const Model& model, const Tokenizer& tokenizer,
                                                     ThreadPool& threads,
                                                     const GeneratorConfig& config) {
  if (!model.is_first_stage() || !model.is_last_stage()) {
    return InvalidArgument("the generator needs every layer of the model");
  }
  if (config.n_ctx <= 0 || config.n_batch <= 0) {
    return InvalidArgument("context size ({}) and batch size ({}) must be positive", config.n_ctx,
                           config.n_batch);
  }
  if (tokenizer.n_vocab() != model.config().n_vocab) {
    return InvalidData("the tokenizer has {} tokens but the model's embedding has {} rows",
                       tokenizer.n_vocab(), model.config().n_vocab);
  }
  return std::unique_ptr<Generator>(new Generator(model, tokenizer, threads, config));
}

Result<GenerationResult> Generator::Generate(std::string_view prompt,
                                             const SamplingParams& sampling,
                                             const GenerateOptions& options,
                                             const GenerateCallbacks& callbacks) {
  std::vector<TokenId> ids = tokenizer_.Encode(prompt, options.add_special, options.parse_special);
  return GenerateFromIds(std::move(ids), sampling, options, callbacks);
}

// The request's state machine: prefill once, then sample → emit → decode until a stop.
struct Generator::Run {
  const Tokenizer& tokenizer;
  const GenerateOptions& options;
  const GenerateCallbacks& callbacks;
  int n_ctx;
  Sequence& seq;
  Sampler sampler;
  StreamDecoder decoder;
  GenerationResult result;

  void Emit(const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (callbacks.on_text) callbacks.on_text(text);
  }

  // Chooses token t from the current logits; true when generation stops after it.
  Result<bool> SampleNext() {
    std::span<const float> logits = seq.logits();
    if (callbacks.on_logits) SHARDLM_TRY(callbacks.on_logits(logits));
    SampledToken token = sampler.Sample(logits, options.want_logprobs);
    sampler.Accept(token.id);
    result.ids.push_back(token.id);
    if (options.want_logprobs) result.logprobs.push_back(std::move(token));
    const TokenId id = result.ids.back();
    if (!options.ignore_eos && tokenizer.IsEog(id)) {
      result.stop = StopReason::kEog;
      return true;
    }
    Emit(decoder.Push(id));
    if (options.n_predict >= 0 && int(result.ids.size()) >= options.n_predict) {
      result.stop = StopReason::kLength;
      return true;
    }
    if (seq.n_tokens() >= n_ctx) {
      result.stop = StopReason::kContext;
      return true;
    }
    return false;
  }

  Status DecodeLoop() {
    if (options.n_predict == 0) return Status::Ok();
    const Clock::time_point start = Clock::now();
    for (;;) {
      SHARDLM_ASSIGN_OR_RETURN(bool done, SampleNext());
      if (done) break;
      SHARDLM_TRY(seq.Decode(result.ids.back()));
      ++result.decode_passes;
    }
    result.decode_seconds = SecondsSince(start);
    Emit(decoder.Flush());
    return Status::Ok();
  }
};

// Checks the prompt against the vocabulary and the context; the positions the request needs.
Result<int> Generator::PlanPositions(const std::vector<TokenId>& prompt_ids,
                                     const GenerateOptions& options) const {
  const int n_prompt = int(prompt_ids.size());
  if (n_prompt == 0) {
    return InvalidArgument("the prompt encodes to no tokens (and the vocab adds no BOS)");
  }
  for (TokenId id : prompt_ids) {
    if (id < 0 || id >= model_.config().n_vocab) {
      return InvalidArgument("prompt token id {} is outside the vocabulary [0, {})", id,
                             model_.config().n_vocab);
    }
  }
  if (n_prompt > config_.n_ctx) {
    return OutOfRange("the prompt has {} tokens but the context holds {} (raise -c)", n_prompt,
                      config_.n_ctx);
  }
  // The prompt, then every generated token but the last is fed back.
  if (options.n_predict < 0) return config_.n_ctx;
  return std::min(config_.n_ctx, n_prompt + std::max(options.n_predict - 1, 0));
}

Result<GenerationResult> Generator::GenerateFromIds(std::vector<TokenId> prompt_ids,
                                                    const SamplingParams& sampling,
                                                    const GenerateOptions& options,
                                                    const GenerateCallbacks& callbacks) {
  SHARDLM_TRY(sampling.Validate());
  SHARDLM_ASSIGN_OR_RETURN(const int n_positions, PlanPositions(prompt_ids, options));
  const int n_prompt = int(prompt_ids.size());
  SequenceConfig seq_config;
  seq_config.n_positions = n_positions;
  seq_config.max_batch = std::min(config_.n_batch, n_prompt);
  seq_config.kv_type = config_.kv_type;
  seq_config.page_tokens = config_.page_tokens;
  seq_config.threads = threads_.size();
  seq_config.placement = config_.placement;
  seq_config.placement.show_progress = options.show_progress;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, Sequence::Create(model_, seq_config));

  Run run{tokenizer_,
          options,
          callbacks,
          config_.n_ctx,
          *seq,
          Sampler(sampling, model_.config().n_vocab),
          StreamDecoder(tokenizer_),
          {}};
  for (TokenId id : prompt_ids) run.sampler.Accept(id);
  run.result.kv_bytes = seq->kv_bytes();

  std::function<void(int, int)> progress;
  if (options.show_progress && n_prompt > config_.n_batch) progress = PrefillProgressPrinter();
  const Clock::time_point start = Clock::now();
  SHARDLM_TRY(seq->Prefill(prompt_ids, progress));
  run.result.prefill_seconds = SecondsSince(start);
  run.result.prompt_ids = std::move(prompt_ids);
  SHARDLM_TRY(run.DecodeLoop());
  return std::move(run.result);
}

}  // namespace shardlm
