// Tokenizer against llama.cpp's own outputs in ../shared/fixtures: the tokenizer vectors
// (qwen3-vocab and stories260K, with and without parse_special), llama.cpp's
// test-tokenizer-0 vectors for the Qwen2 vocabulary, the EOG sets, and the byte-vocab models.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace shardlm {
namespace {

using ::shardlm::testing::FixturePath;
using ::shardlm::testing::ReadTextFile;

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

Loaded Load(const std::string& name) {
  Loaded loaded;
  auto file = GgufFile::Open(FixturePath(name));
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return loaded;
  loaded.file = std::move(file).value();
  auto tokenizer = Tokenizer::FromGguf(*loaded.file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  if (tokenizer.ok()) loaded.tokenizer = std::move(tokenizer).value();
  return loaded;
}

std::string Hex(const std::string& text) {
  std::string out;
  for (unsigned char c : text) out += fmt::format("{:02x} ", c);
  return out;
}

std::string ParseHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// One .jsonl file: every line's ids must be identical.
void CheckVectors(const std::string& model, const std::string& vectors) {
  Loaded loaded = Load(model);
  ASSERT_NE(loaded.tokenizer, nullptr);
  std::istringstream lines(ReadTextFile(FixturePath(vectors)));
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const nlohmann::json entry = nlohmann::json::parse(line);
    const std::string text = entry["text"];
    const std::vector<TokenId> expected = entry["ids"];
    const std::vector<TokenId> ids = loaded.tokenizer->Encode(
        text, entry["add_special"].get<bool>(), entry["parse_special"].get<bool>());
    EXPECT_EQ(ids, expected) << vectors << ": text '" << text << "' (" << Hex(text) << ")";
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

TEST(TokenizerFixtureTest, QwenVectorsSpecial) {
  SHARDLM_REQUIRE_FIXTURES();
  CheckVectors("qwen3-vocab.gguf", "qwen3-vocab.tokvec.special.jsonl");
}

TEST(TokenizerFixtureTest, QwenVectorsNoSpecial) {
  SHARDLM_REQUIRE_FIXTURES();
  CheckVectors("qwen3-vocab.gguf", "qwen3-vocab.tokvec.nospecial.jsonl");
}

TEST(TokenizerFixtureTest, StoriesVectorsSpecial) {
  SHARDLM_REQUIRE_FIXTURES();
  CheckVectors("stories260K.gguf", "stories260K.tokvec.special.jsonl");
}

TEST(TokenizerFixtureTest, StoriesVectorsNoSpecial) {
  SHARDLM_REQUIRE_FIXTURES();
  CheckVectors("stories260K.gguf", "stories260K.tokvec.nospecial.jsonl");
}

// llama.cpp's test-tokenizer-0 format: every input is followed by "\n__ggml_vocab_test__\n";
// .out has one line of ids per input. Encoded without BOS and without special parsing.
TEST(TokenizerFixtureTest, QwenTestTokenizer0) {
  SHARDLM_REQUIRE_FIXTURES();
  Loaded loaded = Load("qwen3-vocab.gguf");
  ASSERT_NE(loaded.tokenizer, nullptr);
  const std::string raw = ReadTextFile(FixturePath("qwen3-vocab.tok.inp"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0, next; (next = raw.find(separator, pos)) != std::string::npos;
       pos = next + separator.size()) {
    inputs.push_back(raw.substr(pos, next - pos));
  }
  std::istringstream out(ReadTextFile(FixturePath("qwen3-vocab.tok.out")));
  std::vector<std::vector<TokenId>> expected;
  for (std::string line; std::getline(out, line);) {
    std::istringstream fields(line);
    expected.emplace_back();
    for (TokenId id; fields >> id;) expected.back().push_back(id);
  }
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(inputs.size(), expected.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<TokenId> ids = loaded.tokenizer->Encode(inputs[i], false, false);
    EXPECT_EQ(ids, expected[i]) << "input " << i << " '" << inputs[i] << "'";
    EXPECT_EQ(loaded.tokenizer->Decode(ids), inputs[i]) << "input " << i;
  }
}

// Byte-level BPE round-trips any text (special tokens render as their text on request).
TEST(TokenizerFixtureTest, QwenVectorsRoundTrip) {
  SHARDLM_REQUIRE_FIXTURES();
  Loaded loaded = Load("qwen3-vocab.gguf");
  ASSERT_NE(loaded.tokenizer, nullptr);
  std::istringstream lines(ReadTextFile(FixturePath("qwen3-vocab.tokvec.special.jsonl")));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const std::string text = nlohmann::json::parse(line)["text"];
    EXPECT_EQ(loaded.tokenizer->Decode(loaded.tokenizer->Encode(text, false, false)), text);
    EXPECT_EQ(loaded.tokenizer->Decode(loaded.tokenizer->Encode(text, false, true), true), text);
  }
}

TEST(TokenizerFixtureTest, QwenVocabLoadsFast) {
  SHARDLM_REQUIRE_FIXTURES();
  auto file = GgufFile::Open(FixturePath("qwen3-vocab.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  // The thread's CPU time, not the wall clock: what the build costs, whatever else the
  // machine runs at the same time (ctest -j2, a compiler).
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  };
  const double start = cpu_seconds();
  auto tokenizer = Tokenizer::FromGguf(**file);
  const double seconds = cpu_seconds() - start;
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  EXPECT_EQ((*tokenizer)->n_vocab(), 151936);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(seconds, 0.5);
#endif
  std::printf("qwen3 vocab: tokenizer built in %.3f s of CPU\n", seconds);
}

TEST(TokenizerFixtureTest, EogSets) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::pair<std::string, std::vector<TokenId>> cases[] = {
      {"qwen3-vocab.gguf", {128247, 151643, 151645, 151662, 151663, 151664}},
      {"qwen3-tiny-qwenvocab-q8_0.gguf", {128247, 151643, 151645, 151662, 151663, 151664}},
      {"qwen3-tiny-f32.gguf", {256, 258}},
      {"qwen35-tiny.gguf", {256, 258}},
      {"gemma3-tiny.gguf", {257, 259}},
      {"stories260K.gguf", {2}},
      {"llama-tiny-spm.gguf", {2}},
  };
  for (const auto& [model, eog] : cases) {
    Loaded loaded = Load(model);
    ASSERT_NE(loaded.tokenizer, nullptr) << model;
    EXPECT_EQ(loaded.tokenizer->EogIds(), eog) << model;
    for (TokenId id : eog) EXPECT_TRUE(loaded.tokenizer->IsEog(id)) << model << " " << id;
    EXPECT_FALSE(loaded.tokenizer->IsEog(0)) << model;
  }
}

// Byte vocabularies (no merges): every byte is its own token; special text becomes the
// special id only when parse_special.
TEST(TokenizerFixtureTest, ByteVocabSpecials) {
  SHARDLM_REQUIRE_FIXTURES();
  Loaded qwen = Load("qwen3-tiny-f32.gguf");
  ASSERT_NE(qwen.tokenizer, nullptr);
  EXPECT_FALSE(qwen.tokenizer->add_bos());
  EXPECT_EQ(qwen.tokenizer->Encode("<|im_start|>hi<|im_end|>", true, true),
            (std::vector<TokenId>{257, 'h', 'i', 258}));
  EXPECT_EQ(qwen.tokenizer->Encode("<|endoftext|>", true, false).size(), 13u);
  EXPECT_EQ(qwen.tokenizer->Encode("é", false, false), (std::vector<TokenId>{0xC3, 0xA9}));
  EXPECT_EQ(qwen.tokenizer->Piece(258), "");
  EXPECT_EQ(qwen.tokenizer->Piece(258, true), "<|im_end|>");

  Loaded gemma = Load("gemma3-tiny.gguf");
  ASSERT_NE(gemma.tokenizer, nullptr);
  EXPECT_TRUE(gemma.tokenizer->add_bos());
  EXPECT_EQ(gemma.tokenizer->Encode("<start_of_turn>user\n<end_of_turn>", true, true),
            (std::vector<TokenId>{256, 258, 'u', 's', 'e', 'r', '\n', 259}));
  EXPECT_EQ(gemma.tokenizer->Encode("<eos>", false, true), (std::vector<TokenId>{257}));
}

// Calls check(entry, tokenizer) for each golden.json entry of a model whose weights are
// readable, with that model's tokenizer (each model loaded once).
template <typename Check>
void ForEachGoldenEntry(Check check) {
  const nlohmann::json golden = testing::ReadJsonFile(FixturePath("golden.json"));
  std::map<std::string, Loaded> models;
  for (const auto& entry : golden["entries"]) {
    const std::string model = entry["model"];
    if (!models.count(model)) models.emplace(model, Load(model));
    const Tokenizer* tokenizer = models[model].tokenizer.get();
    ASSERT_NE(tokenizer, nullptr) << model;
    check(entry, *tokenizer);
  }
}

// The golden prompts were tokenized by llama.cpp with add_special and parse_special.
TEST(TokenizerFixtureTest, GoldenPromptIds) {
  SHARDLM_REQUIRE_FIXTURES();
  int checked = 0;
  ForEachGoldenEntry([&](const nlohmann::json& entry, const Tokenizer& tokenizer) {
    const std::vector<TokenId> expected = entry["prompt_ids"];
    EXPECT_EQ(tokenizer.Encode(entry["prompt_text"].get<std::string>(), true, true), expected)
        << entry["model"].get<std::string>() << " " << entry["prompt_id"];
    ++checked;
  });
  EXPECT_GT(checked, 10);
}

// greedy_text_hex is llama.cpp's pieces of the greedy ids up to the first EOG, concatenated
// (special tokens render as empty): exactly Decode().
TEST(TokenizerFixtureTest, GoldenGreedyTextIsDecode) {
  SHARDLM_REQUIRE_FIXTURES();
  ForEachGoldenEntry([](const nlohmann::json& entry, const Tokenizer& tokenizer) {
    std::vector<TokenId> ids;
    for (TokenId id : entry["greedy_ids"].get<std::vector<TokenId>>()) {
      if (tokenizer.IsEog(id)) break;
      ids.push_back(id);
    }
    EXPECT_EQ(Hex(tokenizer.Decode(ids)), Hex(ParseHex(entry["greedy_text_hex"])))
        << entry["model"].get<std::string>() << " " << entry["prompt_id"];
    // Streaming gives the same bytes, whatever the token boundaries.
    StreamDecoder stream(tokenizer);
    std::string streamed;
    for (TokenId id : ids) streamed += stream.Push(id);
    streamed += stream.Flush();
    if (!entry["greedy_text"].is_null()) {
      EXPECT_EQ(streamed, entry["greedy_text"].get<std::string>())
          << entry["model"].get<std::string>();
    }
  });
}

// Random bytes (valid and invalid UTF-8, spaces, special-token fragments) never crash and
// round-trip: byte-level BPE gives back the text with invalid bytes as U+FFFD, SPM gives
// back " " + text for valid UTF-8 (its prefix space; byte fallback covers every byte).
TEST(TokenizerFixtureTest, RandomBytesRoundTrip) {
  SHARDLM_REQUIRE_FIXTURES();
  Loaded qwen = Load("qwen3-vocab.gguf");
  Loaded stories = Load("stories260K.gguf");
  ASSERT_NE(qwen.tokenizer, nullptr);
  ASSERT_NE(stories.tokenizer, nullptr);
  std::mt19937 rng(42);
  const std::vector<std::string> atoms = {"a",        " ",    "  ",         "\n",  "\t", "é",
                                          "中",       "😀",    "<|im_end|>", "<s>", "1",  "'s",
                                          "\xF0\x9F", "\xFF", "\x80",       "\r\n"};
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    EXPECT_EQ(qwen.tokenizer->Decode(qwen.tokenizer->Encode(text, false, false)),
              tokenizer_internal::SanitizeUtf8(text))
        << Hex(text);
    EXPECT_EQ(qwen.tokenizer->Decode(qwen.tokenizer->Encode(text, false, true), true),
              tokenizer_internal::SanitizeUtf8(text))
        << Hex(text);
    const std::vector<TokenId> spm = stories.tokenizer->Encode(text, false, false);
    // (SPM splits invalid UTF-8 by lead byte, as llama.cpp, so a bad lead byte can swallow
    // an escaped space: those bytes come back as U+2581. Only valid text round-trips.)
    if (tokenizer_internal::SanitizeUtf8(text) == text) {
      EXPECT_EQ(stories.tokenizer->Decode(spm), text.empty() ? "" : " " + text) << Hex(text);
    }
  }
}

}  // namespace
}  // namespace shardlm
