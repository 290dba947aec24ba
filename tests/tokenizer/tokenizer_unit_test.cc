// Tokenizer on small vocabularies written with GgufWriter: SPM merges and byte fallback,
// BPE merge ranks, special tokens, pieces, the stream decoder, and every load-time error.
// No fixtures needed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace shardlm {
namespace {

using tokenizer_internal::ByteToUtf8;

constexpr int64_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

struct VocabSpec {
  std::string model = "gpt2";
  std::string pre = "qwen2";
  std::vector<std::string> tokens;
  std::vector<double> scores;
  std::vector<int64_t> types;
  std::vector<std::string> merges;
  bool with_merges = true;
};

// GPT-2 byte alphabet (ids 0..255) plus `extra` normal tokens.
VocabSpec ByteVocab(std::vector<std::string> extra = {}) {
  VocabSpec spec;
  for (int b = 0; b < 256; ++b) spec.tokens.emplace_back(ByteToUtf8(static_cast<uint8_t>(b)));
  spec.types.assign(256, kNormal);
  for (std::string& token : extra) {
    spec.tokens.push_back(std::move(token));
    spec.types.push_back(kNormal);
  }
  return spec;
}

void AddToken(VocabSpec& spec, std::string text, int64_t type, double score = 0.0) {
  spec.tokens.push_back(std::move(text));
  spec.types.push_back(type);
  if (!spec.scores.empty()) spec.scores.push_back(score);
}

// <unk> <s> </s>, the 256 byte tokens, then `pieces` with descending scores.
VocabSpec SpmVocab(const std::vector<std::string>& pieces) {
  VocabSpec spec;
  spec.model = "llama";
  spec.pre = "";
  spec.with_merges = false;
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.types = {kUnknown, kControl, kControl};
  spec.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) AddToken(spec, fmt::format("<0x{:02X}>", b), kByte);
  for (size_t i = 0; i < pieces.size(); ++i) {
    AddToken(spec, pieces[i], kNormal, -static_cast<double>(i));
  }
  return spec;
}

struct Built {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

// Writes the spec (plus `extra` keys) and opens it.
Built Write(const VocabSpec& spec, const std::function<void(GgufWriter&)>& extra = nullptr) {
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetString("tokenizer.ggml.model", spec.model);
  if (!spec.pre.empty()) writer.SetString("tokenizer.ggml.pre", spec.pre);
  writer.SetStringArray("tokenizer.ggml.tokens", spec.tokens);
  if (!spec.scores.empty()) {
    EXPECT_TRUE(
        writer.SetFloatArray("tokenizer.ggml.scores", GgufValueType::kFloat32, spec.scores).ok());
  }
  if (!spec.types.empty()) {
    EXPECT_TRUE(
        writer.SetIntArray("tokenizer.ggml.token_type", GgufValueType::kInt32, spec.types).ok());
  }
  if (spec.with_merges) writer.SetStringArray("tokenizer.ggml.merges", spec.merges);
  if (extra) extra(writer);
  Built built;
  auto bytes = writer.WriteToBytes();
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  built.bytes = std::move(bytes).value();
  auto file = GgufFile::FromBytes(built.bytes, "test.gguf");
  EXPECT_TRUE(file.ok()) << file.status().message();
  built.file = std::move(file).value();
  return built;
}

std::unique_ptr<Tokenizer> Make(const Built& built) {
  auto tokenizer = Tokenizer::FromGguf(*built.file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

Status LoadError(const VocabSpec& spec, const std::function<void(GgufWriter&)>& extra = nullptr) {
  Built built = Write(spec, extra);
  auto tokenizer = Tokenizer::FromGguf(*built.file);
  return tokenizer.ok() ? Status::Ok() : tokenizer.status();
}

TEST(SpmTest, MergesByScoreWithPrefixSpaceAndBos) {
  // "▁ab" outranks everything; "ab" beats "▁a".
  Built built = Write(SpmVocab({"▁ab", "ab", "▁a", "a", "b", "▁"}));
  auto tok = Make(built);
  ASSERT_NE(tok, nullptr);
  const TokenId base = 3 + 256;
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->Encode("ab", true, false), (std::vector<TokenId>{1, base}));
  EXPECT_EQ(tok->Encode("ab ab", false, false), (std::vector<TokenId>{base, base}));
  EXPECT_EQ(tok->Encode("", true, false), (std::vector<TokenId>{1}));
  EXPECT_EQ(tok->Encode("", false, false), (std::vector<TokenId>{}));
  EXPECT_EQ(tok->Decode({1, base, base}), " ab ab");
  EXPECT_EQ(tok->Decode({1, base}, true), "<s> ab");
}

TEST(SpmTest, ByteFallbackAndSpecialTokens) {
  Built built = Write(SpmVocab({"▁", "a"}));
  auto tok = Make(built);
  ASSERT_NE(tok, nullptr);
  const TokenId space = 3 + 256;
  // é is not in the vocab: its two bytes become <0xC3> <0xA9>.
  EXPECT_EQ(tok->Encode("é", false, false), (std::vector<TokenId>{space, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->Decode(tok->Encode("é", false, false)), " é");
  // With parse_special, "</s>" is EOS and the text after it gets a prefix space again.
  EXPECT_EQ(tok->Encode("a</s>a", false, true),
            (std::vector<TokenId>{space, space + 1, 2, space, space + 1}));
  EXPECT_EQ(tok->Encode("<unk>", false, true), (std::vector<TokenId>{0}));
  EXPECT_TRUE(tok->IsEog(2));
  EXPECT_EQ(tok->Piece(3 + 'A'), "A");
  EXPECT_EQ(tok->Piece(0), "");
  EXPECT_EQ(tok->Piece(0, true), "<unk>");
  EXPECT_EQ(tok->Piece(-1), "");
  EXPECT_EQ(tok->Piece(1 << 20), "");
}

TEST(BpeTest, MergesByRank) {
  // "b c" has the better rank, so "abc" becomes a + bc although "a b" then "ab c" exist.
  VocabSpec spec = ByteVocab({"bc", "ab", "abc"});
  spec.merges = {"b c", "a b", "ab c"};
  Built built = Write(spec);
  auto tok = Make(built);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("abc", true, false), (std::vector<TokenId>{'a', 256}));
  EXPECT_EQ(tok->Encode("ab", true, false), (std::vector<TokenId>{257}));
  // The pre-tokenizer keeps words apart: no merge crosses " ".
  EXPECT_EQ(tok->Encode("a bc", true, false), (std::vector<TokenId>{'a', ' ', 256}));

  spec.merges = {"a b", "ab c", "b c"};
  Built built2 = Write(spec);
  auto tok2 = Make(built2);
  ASSERT_NE(tok2, nullptr);
  EXPECT_EQ(tok2->Encode("abc", true, false), (std::vector<TokenId>{258}));
  EXPECT_EQ(tok2->Decode({258, ' ', 'a'}), "abc a");
}

TEST(BpeTest, SpecialAndUserDefinedTokens) {
  VocabSpec spec = ByteVocab();
  AddToken(spec, "<|im_start|>", kControl);
  AddToken(spec, "<|im_end|>", kControl);
  AddToken(spec, "<think>", kUserDefined);
  Built built = Write(spec, [](GgufWriter& w) {
    w.SetUint32("tokenizer.ggml.eos_token_id", 257);
    w.SetBool("tokenizer.ggml.add_bos_token", false);
  });
  auto tok = Make(built);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("<|im_start|>x<think>", true, true), (std::vector<TokenId>{256, 'x', 258}));
  // Without parse_special CONTROL text is plain text, USER_DEFINED is still split out.
  std::vector<TokenId> ids = tok->Encode("<|im_start|><think>", true, false);
  ASSERT_EQ(ids.size(), 13u);
  EXPECT_EQ(ids.back(), 258);
  EXPECT_EQ(tok->Piece(258), "<think>");
  EXPECT_EQ(tok->Piece(256), "");
  EXPECT_TRUE(tok->IsControl(256));
  EXPECT_TRUE(tok->IsEog(257));
  EXPECT_EQ(tok->FindToken("<|im_end|>"), 257);
  EXPECT_EQ(tok->FindToken("nope"), -1);
  // Invalid UTF-8 is tokenized as U+FFFD, as llama.cpp does.
  EXPECT_EQ(tok->Decode(tok->Encode("a\xFF", false, false)), "a\xEF\xBF\xBD");
}

TEST(StreamDecoderTest, HoldsIncompleteUtf8) {
  Built built = Write(ByteVocab());
  auto tok = Make(built);
  ASSERT_NE(tok, nullptr);
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, four byte tokens
  const std::vector<TokenId> ids = tok->Encode("a" + emoji + "b", false, false);
  ASSERT_EQ(ids.size(), 6u);
  StreamDecoder decoder(*tok);
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(decoder.Push(id));
  EXPECT_EQ(out, (std::vector<std::string>{"a", "", "", "", emoji, "b"}));
  EXPECT_EQ(decoder.Flush(), "");

  StreamDecoder cut(*tok);
  EXPECT_EQ(cut.Push(0xF0), "");
  EXPECT_EQ(cut.Push(0x9F), "");
  EXPECT_EQ(cut.Flush(), "\xF0\x9F");
  // A lead byte followed by ASCII can never complete: it becomes U+FFFD.
  StreamDecoder broken(*tok);
  EXPECT_EQ(broken.Push(0xE2), "");
  EXPECT_EQ(broken.Push('x'), "\xEF\xBF\xBDx");
  EXPECT_EQ(broken.Push(0x80), "\xEF\xBF\xBD");
}

// A vocabulary whose markup is CONTROL tokens (Gemma 4's): the decoder gives the text of the
// ones it is asked to render and no other control token's.
TEST(StreamDecoderTest, RendersTheControlTokensAskedFor) {
  VocabSpec spec = ByteVocab();
  for (const char* marker : {"<|channel>", "<channel|>", "<|tool_call>", "<|\"|>", "<|turn>"}) {
    AddToken(spec, marker, kControl);
  }
  AddToken(spec, "<turn|>", kControl);
  Built built = Write(spec);
  auto tok = Make(built);
  ASSERT_NE(tok, nullptr);
  const std::vector<TokenId> ids =
      tok->Encode("<|turn><|channel>x<channel|><|tool_call>y<|\"|><turn|>", false, true);
  ASSERT_EQ(ids, (std::vector<TokenId>{260, 256, 'x', 257, 258, 'y', 259, 261}));
  EXPECT_TRUE(tok->IsEog(261));
  auto decode = [&](StreamDecoder decoder) {
    std::string text;
    for (TokenId id : ids) text += decoder.Push(id);
    return text + decoder.Flush();
  };
  EXPECT_EQ(decode(StreamDecoder(*tok)), "xy");
  EXPECT_EQ(decode(StreamDecoder(*tok, false, {259, 257, 256, 258})),
            "<|channel>x<channel|><|tool_call>y<|\"|>");
  EXPECT_EQ(decode(StreamDecoder(*tok, true)),
            "<|turn><|channel>x<channel|><|tool_call>y<|\"|><turn|>");
}

TEST(TokenizerLoadTest, DefaultsFollowLlamaCpp) {
  VocabSpec spec = ByteVocab();
  spec.pre = "llama-bpe";
  Built built = Write(spec);
  auto tok = Make(built);
  ASSERT_NE(tok, nullptr);
  EXPECT_TRUE(tok->add_bos());  // llama3 pre-tokenizer adds BOS unless told otherwise
  EXPECT_EQ(tok->bos(), 11);
  EXPECT_EQ(tok->Encode("1234", true, false), (std::vector<TokenId>{11, '1', '2', '3', '4'}));

  spec.pre = "";  // missing: llama.cpp's "default"
  Built built2 = Write(spec);
  auto tok2 = Make(built2);
  ASSERT_NE(tok2, nullptr);
  EXPECT_FALSE(tok2->add_bos());
}

TEST(TokenizerLoadTest, Errors) {
  auto expect = [](const Status& status, StatusCode code, const std::string& needle) {
    EXPECT_EQ(status.code(), code) << status.message();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
  };
  VocabSpec bert = ByteVocab();
  bert.model = "bert";
  expect(LoadError(bert), StatusCode::kUnsupported, "'bert'");

  VocabSpec pre = ByteVocab();
  pre.pre = "klingon";
  expect(LoadError(pre), StatusCode::kUnsupported, "'klingon'");

  VocabSpec types = ByteVocab();
  types.types.pop_back();
  expect(LoadError(types), StatusCode::kInvalidData, "token_type");

  VocabSpec scores = SpmVocab({"a"});
  scores.scores.pop_back();
  expect(LoadError(scores), StatusCode::kInvalidData, "scores");

  VocabSpec no_merges = ByteVocab();
  no_merges.with_merges = false;
  expect(LoadError(no_merges), StatusCode::kNotFound, "merges");

  VocabSpec duplicate = ByteVocab({"a"});
  expect(LoadError(duplicate), StatusCode::kInvalidData, "duplicate");

  expect(LoadError(ByteVocab(),
                   [](GgufWriter& w) { w.SetUint32("tokenizer.ggml.eos_token_id", 256); }),
         StatusCode::kInvalidData, "eos_token_id = 256");
  expect(LoadError(ByteVocab(),
                   [](GgufWriter& w) { w.SetString("tokenizer.ggml.bos_token_id", "one"); }),
         StatusCode::kInvalidData, "bos_token_id");

  // 0xFFFFFFFF means "none" (stories260K writes it) and keeps llama.cpp's default.
  EXPECT_TRUE(LoadError(SpmVocab({"a"}), [](GgufWriter& w) {
                w.SetUint32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
              }).ok());

  VocabSpec tiny;
  tiny.model = "llama";
  tiny.tokens = {"<unk>"};
  tiny.with_merges = false;
  expect(LoadError(tiny), StatusCode::kInvalidData, "add_bos_token");

  VocabSpec empty = ByteVocab();
  empty.tokens.clear();
  empty.types.clear();
  expect(LoadError(empty), StatusCode::kInvalidData, "empty");

  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  auto bytes = writer.WriteToBytes();
  ASSERT_TRUE(bytes.ok());
  auto file = GgufFile::FromBytes(*bytes, "novocab.gguf");
  ASSERT_TRUE(file.ok());
  auto tokenizer = Tokenizer::FromGguf(**file);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.status().message().find("novocab.gguf"), std::string::npos);
}

}  // namespace
}  // namespace shardlm
