// Drives the real `shardlm` binary: `run` prints exactly llama.cpp's greedy text, records
// logits with --logits-out, fails cleanly on a bad model; `bench --json` emits results.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_process.h"
#include "support/fixtures.h"

namespace shardlm {
namespace {

using nlohmann::json;
using testing::CliTempPath;
using testing::FixturePath;
using testing::ProcessResult;
using testing::RunShardlm;

std::vector<json> Entries() { return testing::RunnableGoldenEntries(); }

// Steps whose ids the printed text depends on: through the first EOG, or all 32.
int StepsNeeded(const json& entry) {
  const auto is_eog = entry["greedy_is_eog"].get<std::vector<bool>>();
  for (size_t t = 0; t < is_eog.size(); ++t) {
    if (is_eog[t]) return int(t) + 1;
  }
  return int(is_eog.size());
}

TEST(RunCliTest, GreedyTextEqualsGolden) {
  SHARDLM_REQUIRE_FIXTURES();
  int checked = 0;
  for (const json& entry : Entries()) {
    // greedy_text is null where the bytes are not valid UTF-8: `run` prints U+FFFD there.
    if (entry["greedy_safe_prefix"].get<int>() < StepsNeeded(entry)) continue;
    if (entry["greedy_text"].is_null()) continue;
    SCOPED_TRACE(entry["id"].get<std::string>());
    ProcessResult run = RunShardlm({"run", "-m", FixturePath(entry["model"]), "-p",
                                    entry["prompt_text"], "-n", "32", "--temp", "0", "-t", "2"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.out, entry["greedy_text"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(RunCliTest, LogitsOutMatchesGoldenSteps) {
  SHARDLM_REQUIRE_FIXTURES();
  const json golden = testing::ReadJsonFile(FixturePath("golden.json"));
  const json* entry = nullptr;
  for (const json& e : golden["entries"]) {
    if (e["id"] == "stories260K.p1") entry = &e;
  }
  ASSERT_NE(entry, nullptr);
  const std::string path = CliTempPath("steps.f32");
  ProcessResult run =
      RunShardlm({"run", "-m", FixturePath("stories260K.gguf"), "-p", (*entry)["prompt_text"], "-n",
                  "4", "--temp", "0", "--logits-out", path});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::vector<float> rows = testing::ReadF32File(path);
  std::filesystem::remove(path);
  const int n_vocab = (*entry)["n_vocab"];
  ASSERT_EQ(rows.size(), size_t(4 * n_vocab));
  const std::vector<float> last = testing::ReadF32File(FixturePath((*entry)["logits_file"]));
  const std::vector<float> steps = testing::ReadF32File(FixturePath((*entry)["step_logits_file"]));
  const double atol = golden["suggested_tolerances"]["per_model"]["stories260K.gguf"]["atol"];
  double worst_row0 = 0.0, worst_steps = 0.0;
  for (int i = 0; i < n_vocab; ++i)
    worst_row0 = std::max(worst_row0, double(std::fabs(rows[i] - last[i])));
  for (size_t i = 0; i < rows.size(); ++i) {
    worst_steps = std::max(worst_steps, double(std::fabs(rows[i] - steps[i])));
  }
  EXPECT_LE(worst_row0, atol);
  EXPECT_LE(worst_steps, atol);
}

TEST(RunCliTest, MissingModelFailsWithMessage) {
  ProcessResult run = RunShardlm({"run", "-m", "/nonexistent/model.gguf", "-p", "hi"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(run.out.empty());
  EXPECT_NE(run.err.find("/nonexistent/model.gguf"), std::string::npos) << run.err;
}

TEST(RunCliTest, InvalidModelFileFailsWithMessage) {
  const std::string path = CliTempPath("not_a_model.gguf");
  {
    std::FILE* file = std::fopen(path.c_str(), "wb");
    ASSERT_NE(file, nullptr);
    std::fputs("this is not a gguf file, just text", file);
    std::fclose(file);
  }
  ProcessResult run = RunShardlm({"run", "-m", path, "-p", "hi"});
  std::filesystem::remove(path);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(run.out.empty());
  EXPECT_NE(run.err.find("error"), std::string::npos) << run.err;
}

TEST(RunCliTest, BadFlagValuesFail) {
  SHARDLM_REQUIRE_FIXTURES();
  ProcessResult run =
      RunShardlm({"run", "-m", FixturePath("stories260K.gguf"), "-p", "hi", "--top-p", "1.5"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("top_p"), std::string::npos) << run.err;
  run = RunShardlm({"run", "-m", FixturePath("stories260K.gguf"), "-p", "hi", "--kv-type", "q9"});
  EXPECT_NE(run.exit_code, 0);
  // A q8_0 cache needs whole blocks of 32 per head row: stories260K's heads have 8.
  run = RunShardlm({"run", "-m", FixturePath("stories260K.gguf"), "-p", "hi", "--kv-type", "q8_0"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("head_dim % 32"), std::string::npos) << run.err;
}

// A block-type KV cache (q8_0 and the 4- and 5-bit ones) on a model whose heads are whole
// blocks: `run` says which, and the greedy text of two local stages equals unsplit's.
TEST(RunCliTest, BlockKvRunsAndSplitsLikeUnsplit) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const std::string kv : {"q8_0", "q4_0", "q5_1", "iq4_nl"}) {
    SCOPED_TRACE(kv);
    const std::vector<std::string> base = {"run",
                                           "-m",
                                           FixturePath("qwen3-tiny-q8_0.gguf"),
                                           "-p",
                                           "Once upon a time",
                                           "-n",
                                           "16",
                                           "--temp",
                                           "0",
                                           "--kv-type",
                                           kv};
    ProcessResult whole = RunShardlm(base);
    ASSERT_EQ(whole.exit_code, 0) << whole.err;
    EXPECT_NE(whole.err.find("kv: " + kv), std::string::npos) << whole.err;
    std::vector<std::string> split_args = base;
    split_args.insert(split_args.end(), {"--devices", "cpu:0,cpu:1"});
    ProcessResult split = RunShardlm(split_args);
    ASSERT_EQ(split.exit_code, 0) << split.err;
    EXPECT_EQ(split.out, whole.out);
  }
}

TEST(RunCliTest, SeededRunIsReproducibleAndPrintsSeed) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::vector<std::string> args = {
      "run",    "-m", FixturePath("stories260K.gguf"), "-p", "Once upon a time", "-n", "24",
      "--seed", "11"};
  ProcessResult a = RunShardlm(args);
  ProcessResult b = RunShardlm(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(a.out.empty());
  EXPECT_NE(a.err.find("seed: 11"), std::string::npos) << a.err;
}

TEST(RunCliTest, IgnoreEosKeepsGoing) {
  SHARDLM_REQUIRE_FIXTURES();
  // qwen3-tiny-f32 p1: llama.cpp's greedy continuation emits <|endoftext|> at step 5.
  const std::vector<std::string> args = {
      "run",    "-m", FixturePath("qwen3-tiny-f32.gguf"), "-p", "Hello, world!", "-n", "32",
      "--temp", "0"};
  ProcessResult stopped = RunShardlm(args);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_NE(stopped.err.find("decode: 6 tokens"), std::string::npos) << stopped.err;
  EXPECT_NE(stopped.err.find("stop: eog"), std::string::npos) << stopped.err;
  std::vector<std::string> ignoring = args;
  ignoring.push_back("--ignore-eos");
  ProcessResult kept = RunShardlm(ignoring);
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_NE(kept.err.find("decode: 32 tokens"), std::string::npos) << kept.err;
  EXPECT_NE(kept.err.find("stop: length"), std::string::npos) << kept.err;
  EXPECT_GT(kept.out.size(), stopped.out.size());
}

TEST(BenchCliTest, JsonLinesCarryResults) {
  SHARDLM_REQUIRE_FIXTURES();
  ProcessResult run = RunShardlm({"bench", "-m", FixturePath("stories260K.gguf"), "-p", "32", "-n",
                                  "8", "-r", "2", "-t", "1", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::istringstream lines(run.out);
  std::vector<json> results;
  for (std::string line; std::getline(lines, line);) results.push_back(json::parse(line));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["test"], "pp32");
  EXPECT_EQ(results[1]["test"], "tg8");
  for (const json& result : results) {
    EXPECT_GT(result["avg_ts"].get<double>(), 0.0);
    EXPECT_EQ(result["samples_ts"].size(), 2u);
    EXPECT_EQ(result["n_threads"], 1);
    EXPECT_GT(result["model_size"].get<uint64_t>(), 0u);
  }
}

// --kv-pool: the prompt prefills through the pool in chunks (fewer tokens per batch than
// the prompt), and the line says which pool it ran with.
TEST(BenchCliTest, APoolPrefillsThePromptThroughIt) {
  SHARDLM_REQUIRE_FIXTURES();
  ProcessResult run = RunShardlm({"bench", "-m", FixturePath("stories260K.gguf"), "-p", "1024",
                                  "-n", "0", "-r", "1", "-t", "1", "--kv-pool", "256", "--kv-sink",
                                  "16", "--kv-tail", "64", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("kv pool: 256 positions"), std::string::npos) << run.err;
  const json result = json::parse(run.out);
  EXPECT_EQ(result["kv_pool"], "256");
  EXPECT_LT(result["tokens_per_batch"].get<double>(), 256.0);
  EXPECT_GT(result["avg_ts"].get<double>(), 0.0);
}

// --streams 1,S: the runs interleave, and tg<N>xS carries its ratio to tg<N>.
TEST(BenchCliTest, StreamsCarryTheirPairedRatio) {
  SHARDLM_REQUIRE_FIXTURES();
  ProcessResult run = RunShardlm({"bench", "-m", FixturePath("stories260K.gguf"), "-p", "0", "-n",
                                  "8", "--streams", "1,2", "-r", "2", "-t", "1", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("runs interleaved"), std::string::npos) << run.err;
  std::istringstream lines(run.out);
  std::vector<json> results;
  for (std::string line; std::getline(lines, line);) results.push_back(json::parse(line));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["test"], "tg8");
  EXPECT_FALSE(results[0].contains("paired_ratio"));
  EXPECT_EQ(results[1]["test"], "tg8x2");
  ASSERT_TRUE(results[1].contains("paired_ratio")) << run.out;
  EXPECT_EQ(results[1]["paired_ratio"]["to"], "tg8");
  EXPECT_GT(results[1]["paired_ratio"]["median"].get<double>(), 0.0);
}

// --vs-devices runs every test on a second placement too, interleaved, each line naming its
// devices and the second placement's lines carrying their ratio to the first's.
TEST(BenchCliTest, VsDevicesPairsEveryTestWithTheFirstPlacement) {
  SHARDLM_REQUIRE_FIXTURES();
  ProcessResult run = RunShardlm({"bench", "-m", FixturePath("stories260K.gguf"), "-p", "0", "-n",
                                  "8", "--streams", "1,2", "-r", "2", "-t", "2", "--vs-devices",
                                  "cpu:0,cpu:1", "--vs-layer-split", "1,1", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("runs interleaved"), std::string::npos) << run.err;
  std::istringstream lines(run.out);
  std::vector<json> results;
  for (std::string line; std::getline(lines, line);) results.push_back(json::parse(line));
  ASSERT_EQ(results.size(), 4u) << run.out;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(results[i]["test"], i % 2 ? "tg8x2" : "tg8");
    EXPECT_EQ(results[i]["devices"], i < 2 ? "cpu" : "cpu:0,cpu:1");
    EXPECT_EQ(results[i].contains("paired_ratio_vs"), i >= 2) << results[i];
  }
  EXPECT_EQ(results[3]["paired_ratio_vs"]["to"], "cpu");
  EXPECT_GT(results[3]["paired_ratio_vs"]["median"].get<double>(), 0.0);
  EXPECT_EQ(results[3]["paired_ratio"]["to"], "tg8");  // against tg8 on its own placement
  EXPECT_EQ(results[3]["max_in_flight"], 2);

  run = RunShardlm({"bench", "-m", FixturePath("stories260K.gguf"), "-p", "0", "-n", "8",
                    "--vs-layer-split", "1,1"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("--vs-layer-split needs --vs-devices"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace shardlm
