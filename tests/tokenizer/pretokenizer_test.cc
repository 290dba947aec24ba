// PreTokenizer: word splits of each regex set, including llama.cpp's whitespace set.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardlm::tokenizer_internal {
namespace {

std::vector<std::string> Split(PreType type, std::string_view text) {
  auto pre = PreTokenizer::Create(type);
  EXPECT_TRUE(pre.ok()) << pre.status().message();
  std::vector<std::string> out;
  for (std::string_view piece : (*pre)->Split(text)) out.emplace_back(piece);
  return out;
}

using Words = std::vector<std::string>;

TEST(PreTokenizerTest, Qwen2SplitsDigitsAndSpaces) {
  EXPECT_EQ(Split(PreType::kQwen2, "Hello world  123"),
            (Words{"Hello", " world", " ", " ", "1", "2", "3"}));
  EXPECT_EQ(Split(PreType::kQwen2, "they'RE here\n\n  x"),
            (Words{"they", "'RE", " here", "\n\n", " ", " x"}));
  EXPECT_EQ(Split(PreType::kQwen2, ""), (Words{}));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(Split(PreType::kLlama3, "1234567"), (Words{"123", "456", "7"}));
}

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_EQ(Split(PreType::kGpt2, "I'm 42 ok!!  "), (Words{"I", "'m", " 42", " ok", "!!", "  "}));
}

TEST(PreTokenizerTest, DefaultAppliesEachRegexInTurn) {
  EXPECT_EQ(Split(PreType::kDefault, "a+b 12345"), (Words{"a", "+", "b", " ", "123", "45"}));
}

// U+180E is not whitespace for llama.cpp (PCRE2's \s would take it); U+0085 is.
TEST(PreTokenizerTest, WhitespaceSetIsLlamaCpps) {
  EXPECT_EQ(Split(PreType::kQwen2, "!\xE1\xA0\x8E!"), (Words{"!\xE1\xA0\x8E!"}));
  EXPECT_EQ(Split(PreType::kQwen2, "!\xC2\x85!"), (Words{"!", "\xC2\x85", "!"}));
}

}  // namespace
}  // namespace shardlm::tokenizer_internal
