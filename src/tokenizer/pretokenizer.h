// PreTokenizer: splits text into words before byte-level BPE, with the regexes that the
// vocabulary's tokenizer.ggml.pre names (PCRE2, UTF + UCP, so \p{L}, \p{N} and \s are
// Unicode-aware).
//
// Goals: the same words as llama.cpp's unicode_regex_split for the qwen2, llama3, gpt2 and
// default pre-tokenizers: each regex of a set splits every piece the previous one left, and
// both the matches and the text between them become pieces. The patterns are the models'
// own (tokenizer.json), with case-insensitive contractions spelled out ('[sS]) so that no
// Unicode case folding applies, as in llama.cpp.
// Non-goals: other pre-tokenizers; invalid UTF-8 (callers pass SanitizeUtf8 output).
//
// Thread safety: immutable after Create; Split may run concurrently (match data is per call).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/vocab.h"

namespace shardlm::tokenizer_internal {

class PreTokenizer {
 public:
  static Result<std::unique_ptr<PreTokenizer>> Create(PreType type);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // `text` must be valid UTF-8. The pieces are views into it, in order, covering it all.
  std::vector<std::string_view> Split(std::string_view text) const;

 private:
  struct Regex;
  PreTokenizer() = default;
  void SplitOne(const Regex& regex, std::string_view piece,
                std::vector<std::string_view>* out) const;

  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace shardlm::tokenizer_internal
