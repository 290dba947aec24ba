// constrained_bench: how fast a constrained stream decodes (output held to a JSON Schema, as
// response_format json_schema asks) against an unconstrained one, on the same model, prompt
// and sampling.
//
// Method: the grammar is the one the server builds for the request (output_constraint.h).
// One untimed warm-up pair first, unconstrained then constrained (it builds the vocabulary
// trie and the automaton's first masks: its constrained rate and that rate over the plain
// one are reported as `cold_tok_s` and `cold_ratio`, what a schema costs the first time it
// is seen), then --rounds paired
// rounds: each runs the unconstrained and the constrained request one after the other,
// alone on the engine, in an order that alternates by round, so a machine that drifts over
// minutes affects both alike. A request's decode rate is (tokens - 1) / (time of its last
// token - time of its first): prefill and the wait for the first token are left out. The
// figure is the median over rounds of the ratio constrained / unconstrained. Both requests
// of a round share a seed; the seed changes by round, so the constrained outputs walk new
// grammar states as well as cached ones.
// Checks: every constrained output is accepted by the grammar as far as it goes, and one
// that ended by itself parses as JSON.
//
// Default schema: records of short bounded strings, enums, integers, numbers and booleans
// in an array without bound, so the output keeps moving between grammar states and runs to
// --tokens. The synth model's vocabulary is bytes only; --vocab takes the tokenizer of
// another GGUF with the same vocabulary size (a Qwen3 one: 151936 tokens) so that the masks
// are those of a real vocabulary.
//
// Output: JSON lines on stdout, one per round, then one summary line; progress on stderr.
// Usage: constrained_bench -m MODEL [--vocab GGUF] [--rounds 7] [--tokens 128] [--threads 2]
//   [--temperature 0.8] [--schema FILE]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "grammar/byte_automaton.h"
#include "pipeline/model_loader.h"
#include "server/output_constraint.h"
#include "timed_request.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;
using server::Json;

constexpr char kDefaultSchema[] = R"({"type": "object", "properties": {
  "items": {"type": "array", "minItems": 100, "items": {"type": "object", "properties": {
    "id": {"type": "integer"},
    "name": {"type": "string", "maxLength": 12},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    "score": {"type": "number"},
    "ok": {"type": "boolean"}},
    "required": ["id", "name", "tags", "score", "ok"], "additionalProperties": false}}},
  "required": ["items"], "additionalProperties": false})";
constexpr char kPrompt[] =
    "<|im_start|>user\nList the items of the inventory as JSON.<|im_end|>\n"
    "<|im_start|>assistant\n";

struct Flags {
  std::string model;
  std::string vocab;
  std::string schema_file;
  int rounds = 7;
  int tokens = 128;
  int threads = 2;
  float temperature = 0.8f;  // the server's default; 0: greedy
};

// One request's tokens as they came, timed on the engine thread.
using Run = bench::TimedRun;

Result<Run> RunRequest(Engine& engine, const EngineRequest& request) {
  return bench::RunTimedRequest(engine, request);
}

// The output is one the grammar accepts so far, and parses when the grammar ended it.
Status Verify(const Run& run, const std::shared_ptr<const grammar::Grammar>& g) {
  grammar::ByteAutomaton automaton(g);
  const auto state = automaton.Walk(automaton.initial(), run.text);
  if (state == grammar::ByteAutomaton::kDead) {
    return Status(StatusCode::kInternal, "the grammar refuses the output: " + run.text);
  }
  if (run.finish.reason == FinishReason::kStop &&
      Json::parse(run.text, nullptr, /*allow_exceptions=*/false).is_discarded()) {
    return Status(StatusCode::kInternal, "a finished output does not parse: " + run.text);
  }
  return Status::Ok();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n == 0 ? 0.0 : n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

Result<std::shared_ptr<const grammar::Grammar>> SchemaGrammar(const std::string& schema_text) {
  Json schema = Json::parse(schema_text, nullptr, false);
  if (schema.is_discarded()) return InvalidArgument("--schema: not JSON");
  server::ChatCompletionRequest chat;
  chat.messages = Json::array({Json{{"role", "user"}, {"content", "x"}}});
  chat.options.response_format.type = server::ResponseFormat::Type::kJsonSchema;
  chat.options.response_format.schema = std::move(schema);
  std::string param;
  return server::ChatOutputConstraint(chat, server::ConstraintContext{}, &param);
}

Result<std::string> SchemaText(const Flags& flags) {
  if (flags.schema_file.empty()) return std::string(kDefaultSchema);
  std::ifstream in(flags.schema_file);
  if (!in) return InvalidArgument("--schema {}: cannot open", flags.schema_file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model, and the tokenizer the engine uses: the model's, or --vocab's.
struct BenchModel {
  LoadedModel loaded;
  std::shared_ptr<const GgufFile> vocab_file;
  std::unique_ptr<Tokenizer> vocab;
  const Tokenizer* tokenizer = nullptr;
};

Result<BenchModel> LoadBenchModel(const Flags& flags) {
  BenchModel m;
  LoadOptions load;
  load.show_progress = true;
  SHARDLM_ASSIGN_OR_RETURN(m.loaded, LoadModelFile(flags.model, load));
  m.tokenizer = m.loaded.tokenizer.get();
  if (flags.vocab.empty()) return m;
  SHARDLM_ASSIGN_OR_RETURN(m.vocab_file, GgufFile::Open(flags.vocab));
  SHARDLM_ASSIGN_OR_RETURN(m.vocab, Tokenizer::FromGguf(*m.vocab_file));
  if (m.vocab->n_vocab() != m.tokenizer->n_vocab()) {
    return InvalidArgument("--vocab {}: {} tokens, the model has {}", flags.vocab,
                           m.vocab->n_vocab(), m.tokenizer->n_vocab());
  }
  m.tokenizer = m.vocab.get();
  return m;
}

// One round: the plain request and the constrained one with the same seed, in the given
// order; the constrained output is verified.
struct Pair {
  Run plain;
  Run constrained;
  double ratio() const { return constrained.DecodeTokS() / plain.DecodeTokS(); }
};

Result<Pair> RunPair(Engine& engine, EngineRequest plain, EngineRequest constrained, uint64_t seed,
                     bool constrained_first) {
  plain.sampling.seed = constrained.sampling.seed = seed;
  Pair pair;
  if (constrained_first) {
    SHARDLM_ASSIGN_OR_RETURN(pair.constrained, RunRequest(engine, constrained));
    SHARDLM_ASSIGN_OR_RETURN(pair.plain, RunRequest(engine, plain));
  } else {
    SHARDLM_ASSIGN_OR_RETURN(pair.plain, RunRequest(engine, plain));
    SHARDLM_ASSIGN_OR_RETURN(pair.constrained, RunRequest(engine, constrained));
  }
  SHARDLM_TRY(Verify(pair.constrained, constrained.grammar));
  return pair;
}

void PrintRound(int round, bool constrained_first, const Pair& pair) {
  std::printf(
      "{\"test\":\"constrained_round\",\"round\":%d,\"order\":\"%s\",\"plain_tok_s\":%.2f,"
      "\"constrained_tok_s\":%.2f,\"ratio\":%.3f,\"plain_tokens\":%zu,"
      "\"constrained_tokens\":%zu,\"constrained_finish\":\"%s\"}\n",
      round, constrained_first ? "constrained_first" : "plain_first", pair.plain.DecodeTokS(),
      pair.constrained.DecodeTokS(), pair.ratio(), pair.plain.times.size(),
      pair.constrained.times.size(), FinishReasonName(pair.constrained.finish.reason));
  std::fflush(stdout);
}

void PrintSummary(const Flags& flags, int32_t n_vocab, const Pair& warm,
                  const std::vector<Pair>& rounds) {
  std::vector<double> ratios, plain, constrained;
  for (const Pair& pair : rounds) {
    ratios.push_back(pair.ratio());
    plain.push_back(pair.plain.DecodeTokS());
    constrained.push_back(pair.constrained.DecodeTokS());
  }
  std::printf(
      "{\"test\":\"constrained_decode\",\"model\":\"%s\",\"vocab\":\"%s\",\"n_vocab\":%d,"
      "\"rounds\":%d,\"tokens\":%d,\"threads\":%d,\"temperature\":%.2f,"
      "\"median_plain_tok_s\":%.2f,\"median_constrained_tok_s\":%.2f,\"cold_tok_s\":%.2f,"
      "\"cold_ratio\":%.3f,\"median_ratio\":%.3f,\"min_ratio\":%.3f,\"max_ratio\":%.3f}\n",
      flags.model.c_str(), flags.vocab.empty() ? "model" : flags.vocab.c_str(), n_vocab,
      flags.rounds, flags.tokens, flags.threads, flags.temperature, Median(plain),
      Median(constrained), warm.constrained.DecodeTokS(), warm.ratio(), Median(ratios),
      *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()));
}

Status Bench(const Flags& flags) {
  SHARDLM_ASSIGN_OR_RETURN(std::string schema_text, SchemaText(flags));
  SHARDLM_ASSIGN_OR_RETURN(auto g, SchemaGrammar(schema_text));
  SHARDLM_ASSIGN_OR_RETURN(BenchModel model, LoadBenchModel(flags));
  SchedulerOptions options;
  options.n_parallel = 1;
  options.n_ctx = 2048;
  options.threads = flags.threads;
  options.log_requests = false;
  options.prefix_cache = false;  // every request prefills its prompt the same way
  SHARDLM_ASSIGN_OR_RETURN(auto engine,
                           Scheduler::Create(*model.loaded.model, *model.tokenizer, options));
  EngineRequest plain;
  plain.prompt = model.tokenizer->Encode(kPrompt, /*add_special=*/true, /*parse_special=*/true);
  plain.max_tokens = flags.tokens;
  plain.ignore_eos = true;  // as long as the constrained one may run
  plain.sampling.temperature = flags.temperature;
  EngineRequest constrained = plain;
  constrained.grammar = g;

  std::fprintf(stderr, "constrained_bench: warm-up\n");
  // Plain first: the engine is warm when the grammar's first masks are computed.
  SHARDLM_ASSIGN_OR_RETURN(Pair warm, RunPair(*engine, plain, constrained, 1000, false));
  std::vector<Pair> rounds;
  for (int round = 0; round < flags.rounds; ++round) {
    const bool constrained_first = round % 2 == 1;
    SHARDLM_ASSIGN_OR_RETURN(
        Pair pair, RunPair(*engine, plain, constrained, uint64_t(round + 1), constrained_first));
    PrintRound(round, constrained_first, pair);
    rounds.push_back(std::move(pair));
  }
  PrintSummary(flags, model.tokenizer->n_vocab(), warm, rounds);
  return Status::Ok();
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  shardlm::Flags flags;
  CLI::App app{"constrained_bench: constrained vs unconstrained decode speed"};
  app.add_option("-m,--model", flags.model, "GGUF model")->required();
  app.add_option("--vocab", flags.vocab, "GGUF whose tokenizer replaces the model's");
  app.add_option("--schema", flags.schema_file, "JSON Schema file (default: records)");
  app.add_option("--rounds", flags.rounds, "Timed paired rounds")->capture_default_str();
  app.add_option("--tokens", flags.tokens, "Tokens per request")->capture_default_str();
  app.add_option("-t,--threads", flags.threads, "Compute threads")->capture_default_str();
  app.add_option("--temperature", flags.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (flags.rounds < 1 || flags.tokens < 2) {
    std::fprintf(stderr, "constrained_bench: --rounds >= 1 and --tokens >= 2\n");
    return 2;
  }
  const shardlm::Status st = shardlm::Bench(flags);
  if (!st.ok()) {
    std::fprintf(stderr, "constrained_bench: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}
