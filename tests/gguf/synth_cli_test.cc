// `shardlm gguf synth` and `shardlm gguf info`, run as a user would run them: a tiny synth
// model has exactly the tensors, shapes, quant mix, hparams and vocabulary of the llama.cpp
// fixture of the same shape; the same seed gives the same bytes; info --json describes it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gguf/fingerprint.h"
#include "gguf/gguf_file.h"
#include "gguf_test_util.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace {

using ::shardlm::testing::V;

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The synth file has exactly the fixture's tensor names, each with the fixture's shape (and
// type, with `types`).
void ExpectTheFixturesTensors(const GgufFile& synth, const std::string& fixture,
                              bool types = false) {
  auto ref = GgufFile::Open(testing::FixturePath(fixture));
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_EQ(synth.tensors().size(), (*ref)->tensors().size());
  for (const GgufTensorInfo& t : (*ref)->tensors()) {
    const GgufTensorInfo* s = synth.FindTensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(s->ne, t.ne) << t.name;
    if (types) {
      EXPECT_EQ(GgmlTypeName(static_cast<uint32_t>(s->type)),
                GgmlTypeName(static_cast<uint32_t>(t.type)))
          << t.name;
    }
  }
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class SynthCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SHARDLM_REQUIRE_BINARY();
    dir_ = folder_.path().string();
  }

  RunResult Run(const std::string& args) {
    std::string out = dir_ + "/stdout", err = dir_ + "/stderr";
    std::string cmd = testing::ShardlmBinary() + " " + args + " >" + out + " 2>" + err;
    int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
  }

  // Writes a synth model and opens it.
  std::unique_ptr<GgufFile> Synth(const std::string& name, const std::string& args) {
    RunResult r = Run("gguf synth -q -o " + dir_ + "/" + name + " " + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto file = GgufFile::Open(dir_ + "/" + name);
    EXPECT_TRUE(file.ok()) << file.status().message();
    return file.ok() ? std::move(file).value() : nullptr;
  }

  testing_util::TempDir folder_{"shardlm_synth_cli"};
  std::string dir_;  // folder_.path()
};

// Same tensor names, types and shapes as the fixture, and the same hparams/tokenizer keys.
void ExpectLikeFixture(const GgufFile& synth, const std::string& fixture) {
  ExpectTheFixturesTensors(synth, fixture, /*types=*/true);
  auto ref = GgufFile::Open(testing::FixturePath(fixture));
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  for (const GgufKeyValue& kv : (*ref)->metadata()) {
    if (kv.key == "general.name" || kv.key == "tokenizer.ggml.eos_token_id") continue;
    const GgufValue* v = synth.Find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_EQ(v->type, kv.value.type) << kv.key;
    EXPECT_EQ(v->scalar, kv.value.scalar) << kv.key;
    EXPECT_EQ(v->strings, kv.value.strings) << kv.key;  // the byte vocabulary, token by token
    EXPECT_EQ(v->ints, kv.value.ints) << kv.key;
  }
}

TEST_F(SynthCliTest, TinyQwen3MatchesTheLlamaCppFixtureLayout) {
  SHARDLM_REQUIRE_FIXTURES();
  const struct {
    const char* file;
    const char* args;
    const char* fixture;
  } kCases[] = {
      {"f32.gguf", "--arch qwen3 --preset tiny --type f32 --seed 1", "qwen3-tiny-f32.gguf"},
      {"q4km.gguf", "--arch qwen3 --preset tiny --type q4_k_m --seed 1", "qwen3-tiny-q4_k_m.gguf"},
      {"q8.gguf", "--type q8_0", "qwen3-tiny-q8_0.gguf"},
      {"iq4_nl.gguf", "--type iq4_nl", "qwen3-tiny-iq4_nl.gguf"},
      {"iq4_xs.gguf", "--type iq4_xs", "qwen3-tiny-iq4_xs.gguf"},
      {"iq3_s.gguf", "--type iq3_s", "qwen3-tiny-iq3_s.gguf"},
      {"tq1_0.gguf", "--type tq1_0", "qwen3-tiny-tq1_0.gguf"},
      {"tq2_0.gguf", "--type tq2_0", "qwen3-tiny-tq2_0.gguf"},
      {"mxfp4.gguf", "--type mxfp4", "qwen3-tiny-mxfp4.gguf"},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.fixture);
    auto synth = Synth(c.file, c.args);
    ASSERT_NE(synth, nullptr);
    ExpectLikeFixture(*synth, c.fixture);
  }
}

// gemma3 in the fixture's shape: the same tensors (post norms, q/k norms, tied head), the
// window key, and a model `run` computes.
TEST_F(SynthCliTest, TinyGemma3HasTheFixtureTensorsAndRuns) {
  SHARDLM_REQUIRE_FIXTURES();
  auto synth = Synth("g3.gguf",
                     "--arch gemma3 --preset tiny --layers 6 --heads 4 --kv-heads 1 "
                     "--head-dim 128 --vocab 260");
  ASSERT_NE(synth, nullptr);
  ExpectTheFixturesTensors(*synth, "gemma3-tiny.gguf");
  auto window = synth->GetUint("gemma3.attention.sliding_window");
  ASSERT_TRUE(window.ok());
  EXPECT_EQ(*window, 16u);
  RunResult r = Run("run -m " + dir_ + "/g3.gguf -p 'Once upon a time' -n 24 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// qwen35 in the fixture's shape: the same tensors (DeltaNet's ssm_* beside the gated attention
// layer), decay rates that shrink the state, and a model `run` computes.
TEST_F(SynthCliTest, TinyQwen35HasTheFixtureTensorsAndRuns) {
  SHARDLM_REQUIRE_FIXTURES();
  auto synth = Synth("q35.gguf", "--arch qwen35 --preset tiny");
  ASSERT_NE(synth, nullptr);
  ExpectTheFixturesTensors(*synth, "qwen35-tiny.gguf");
  const GgufTensorInfo* a = synth->FindTensor("blk.0.ssm_a");
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_LT(reinterpret_cast<const float*>(a->data)[i], 0.0f);
  for (const char* key :
       {"qwen35.ssm.state_size", "qwen35.full_attention_interval", "qwen35.rope.dimension_count"}) {
    EXPECT_TRUE(synth->GetUint(key).ok()) << key;
  }
  RunResult r = Run("run -m " + dir_ + "/q35.gguf -p 'Once upon a time' -n 24 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// gemma4 in the fixture's shape: the same tensors (per-layer inputs, no k/v on the layers that
// share KV, no v on the global layers), the fixture's layer layout read back, and a model `run`
// computes.
TEST_F(SynthCliTest, TinyGemma4HasTheFixtureTensorsAndLayoutAndRuns) {
  SHARDLM_REQUIRE_FIXTURES();
  auto synth = Synth("g4.gguf", "--arch gemma4 --preset tiny");
  ASSERT_NE(synth, nullptr);
  ExpectTheFixturesTensors(*synth, "gemma4-tiny.gguf");
  auto fixture = GgufFile::Open(testing::FixturePath("gemma4-tiny.gguf"));
  ASSERT_TRUE(fixture.ok()) << fixture.status().message();
  for (const char* key :
       {"gemma4.feed_forward_length", "gemma4.attention.head_count_kv",
        "gemma4.attention.sliding_window_pattern", "gemma4.attention.shared_kv_layers",
        "gemma4.attention.sliding_window", "gemma4.attention.key_length",
        "gemma4.attention.key_length_swa", "gemma4.rope.dimension_count_swa",
        "gemma4.embedding_length_per_layer_input"}) {
    SCOPED_TRACE(key);
    const GgufValue* got = synth->Find(key);
    const GgufValue* want = (*fixture)->Find(key);
    ASSERT_TRUE(got != nullptr && want != nullptr);
    EXPECT_EQ(got->ints, want->ints);
    if (got->type != GgufValueType::kArray) {
      EXPECT_EQ(synth->GetUint(key).value(), (*fixture)->GetUint(key).value());
    }
  }
  RunResult r = Run("run -m " + dir_ + "/g4.gguf -p 'Once upon a time' -n 24 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(SynthCliTest, WeightsLookLikeAModelAndTheVocabIsChatReady) {
  auto f = Synth("m.gguf", "--type f32 --seed 3");
  ASSERT_NE(f, nullptr);
  const GgufTensorInfo* q = f->FindTensor("blk.0.attn_q.weight");
  const GgufTensorInfo* norm = f->FindTensor("blk.1.ffn_norm.weight");
  ASSERT_TRUE(q && norm);
  auto stats = [](const GgufTensorInfo& t) {
    const float* x = reinterpret_cast<const float*>(t.data);
    double sum = 0, sq = 0;
    int64_t n = t.n_elements();
    for (int64_t i = 0; i < n; ++i) sum += x[i], sq += double(x[i]) * x[i];
    double mean = sum / n;
    return std::pair{mean, std::sqrt(sq / n - mean * mean)};
  };
  auto [q_mean, q_std] = stats(*q);
  EXPECT_NEAR(q_mean, 0.0, 0.002);
  EXPECT_NEAR(q_std, 0.02, 0.002);
  auto [n_mean, n_std] = stats(*norm);
  EXPECT_NEAR(n_mean, 1.0, 0.02);
  EXPECT_GT(n_std, 0.0);
  EXPECT_LT(n_std, 0.1);
  EXPECT_EQ(V(f->GetUint("tokenizer.ggml.eos_token_id")), 258u);  // <|im_end|>
  const GgufValue* tokens = V(f->GetArray("tokenizer.ggml.tokens", GgufValueType::kString));
  ASSERT_EQ(tokens->strings.size(), 259u);
  EXPECT_EQ(tokens->strings[' '], "\xC4\xA0");  // GPT-2 maps space to U+0120
  EXPECT_EQ(tokens->strings['A'], "A");
  EXPECT_EQ(tokens->strings[258], "<|im_end|>");
  auto tmpl = f->GetString("tokenizer.chat_template");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_NE(tmpl->find("<|im_start|>"), std::string::npos);
}

TEST_F(SynthCliTest, SameSeedSameBytesOtherSeedOtherFingerprint) {
  ASSERT_EQ(Run("gguf synth -q --type q4_0 --seed 7 -t 1 -o " + dir_ + "/a.gguf").exit_code, 0);
  ASSERT_EQ(Run("gguf synth -q --type q4_0 --seed 7 -t 2 -o " + dir_ + "/b.gguf").exit_code, 0);
  ASSERT_EQ(Run("gguf synth -q --type q4_0 --seed 8 -o " + dir_ + "/c.gguf").exit_code, 0);
  std::string a = Slurp(dir_ + "/a.gguf");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, Slurp(dir_ + "/b.gguf"));  // thread count does not matter
  auto fa = GgufFile::Open(dir_ + "/a.gguf");
  auto fc = GgufFile::Open(dir_ + "/c.gguf");
  ASSERT_TRUE(fa.ok() && fc.ok());
  EXPECT_NE(ModelFingerprint(**fa), ModelFingerprint(**fc));
}

TEST_F(SynthCliTest, OverridesAndTiedLlama) {
  auto f = Synth("l.gguf",
                 "--arch llama --layers 3 --embd 128 --ff 256 --heads 4 --kv-heads 4 "
                 "--head-dim 32 --vocab 300 --tied --type q8_0");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(V(f->GetString("general.architecture")), "llama");
  EXPECT_EQ(V(f->GetUint("llama.block_count")), 3u);
  EXPECT_EQ(f->FindTensor("output.weight"), nullptr);
  EXPECT_EQ(f->FindTensor("blk.0.attn_q_norm.weight"), nullptr);
  const GgufTensorInfo* embd = f->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->ne, (std::vector<int64_t>{128, 300}));
  const GgufValue* tokens = V(f->GetArray("tokenizer.ggml.tokens", GgufValueType::kString));
  EXPECT_EQ(tokens->strings[299], "[PAD299]");
  EXPECT_EQ(f->tensors().size(), 1u + 3 * 9 + 1);
}

// The 0.6B plan reproduces llama-quantize's mixes: llama-bench reports 372.65 MiB of tensors
// for Qwen3-0.6B Q4_K_M and 604.15 MiB for Q8_0 (fixtures README, section 8).
TEST_F(SynthCliTest, DryRunPlanMatchesLlamaQuantizeSizes) {
  RunResult r = Run("gguf synth --preset 0.6b --type q4_k_m --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(372.65 MiB)"), std::string::npos) << r.out.substr(r.out.rfind("total"));
  EXPECT_NE(r.out.find("token_embd.weight                        q6_K   [1024, 151936]"),
            std::string::npos);
  EXPECT_EQ(r.out.find("\noutput.weight "), std::string::npos);  // tied
  r = Run("gguf synth --preset 0.6b --type q8_0 --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(604.15 MiB)"), std::string::npos) << r.out.substr(r.out.rfind("total"));
  r = Run("gguf synth --type q4_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-o/--output is required"), std::string::npos) << r.err;
}

TEST_F(SynthCliTest, BadFlagsFailWithAMessage) {
  RunResult r = Run("gguf synth -q --type q9_9 -o " + dir_ + "/x.gguf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--type q9_9"), std::string::npos) << r.err;
  r = Run("gguf synth -q --heads 5 --kv-heads 2 -o " + dir_ + "/x.gguf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--heads 5 is not a multiple of --kv-heads 2"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x.gguf"));
  r = Run("gguf info " + dir_ + "/missing.gguf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("missing.gguf"), std::string::npos);
}

TEST_F(SynthCliTest, InfoTextAndJsonDescribeTheFile) {
  auto f = Synth("i.gguf", "--type q4_k_m");
  ASSERT_NE(f, nullptr);
  RunResult r = Run("gguf info --json " + dir_ + "/i.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "qwen3");
  EXPECT_EQ(j["fingerprint"], ModelFingerprint(*f).ToHex());
  EXPECT_EQ(j["tensors"].size(), f->tensors().size());
  EXPECT_EQ(j["tokenizer"]["n_vocab"], 259);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["length"], 259);
  EXPECT_FALSE(j["metadata"]["tokenizer.ggml.tokens"].contains("values"));
  EXPECT_EQ(j["summary"]["tensor_types"]["q6_K"], 3);
  int64_t params = 0;
  for (const GgufTensorInfo& t : f->tensors()) params += t.n_elements();
  EXPECT_EQ(j["summary"]["n_params"], params);
  r = Run("gguf info " + dir_ + "/i.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture: qwen3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[string x 259]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.1.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.out.find("q6_K: 3"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shardlm
