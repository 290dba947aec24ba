// PCRE2-based pre-tokenizer (see pretokenizer.h).
#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "tokenizer/unicode_util.h"

namespace shardlm::tokenizer_internal {
namespace {

// Case-insensitive English contractions without Unicode case folding.
#define SHARDLM_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"

// GPT-2 (tiktoken r50k): contractions, optional space + letters / numbers / other, spaces.
constexpr const char* kGpt2[] = {
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"};
// Llama 3 (tiktoken cl100k): numbers in groups of up to three.
constexpr const char* kLlama3[] = {
    SHARDLM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// Qwen2/Qwen3: as Llama 3 but every digit alone.
constexpr const char* kQwen2[] = {
    SHARDLM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// llama.cpp's fallback for vocabularies without a named pre-tokenizer.
constexpr const char* kDefault[] = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};

#undef SHARDLM_CONTRACTIONS

std::vector<const char*> PatternsFor(PreType type) {
  switch (type) {
    case PreType::kGpt2:
      return {std::begin(kGpt2), std::end(kGpt2)};
    case PreType::kLlama3:
      return {std::begin(kLlama3), std::end(kLlama3)};
    case PreType::kQwen2:
      return {std::begin(kQwen2), std::end(kQwen2)};
    default:
      return {std::begin(kDefault), std::end(kDefault)};
  }
}

// llama.cpp's whitespace: Unicode White_Space. PCRE2's \s also takes U+180E, which
// llama.cpp classes as "other", so \s and \S are spelled out with this set.
constexpr std::string_view kWhitespace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F})"
    R"(\x{205F}\x{3000})";

// Replaces \s by [set] (or the bare set inside a class) and \S by [^set].
std::string ExpandWhitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? std::string(kWhitespace) : "[" + std::string(kWhitespace) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhitespace) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(PreType type) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  for (const char* raw_pattern : PatternsFor(type)) {
    const std::string pattern = ExpandWhitespace(raw_pattern);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return Status(StatusCode::kInternal,
                    fmt::format("pre-tokenizer regex '{}' does not compile at {}: {}", pattern,
                                error_offset, reinterpret_cast<const char*>(message)));
    }
    pre->regexes_.push_back(std::move(regex));
  }
  return pre;
}

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (const auto& regex : regexes_) {
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) SplitOne(*regex, piece, &next);
    pieces = std::move(next);
  }
  return pieces;
}

// Matches and the gaps between them, within `piece` only (a lookahead sees the piece's end
// as the end of the text, as llama.cpp runs each regex over each piece separately).
void PreTokenizer::SplitOne(const Regex& regex, std::string_view piece,
                            std::vector<std::string_view>* out) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex.code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t last = 0;    // end of the previous match
  size_t offset = 0;  // where the next search starts
  while (offset < piece.size()) {
    // The caller guarantees valid UTF-8; checking it on every call would be quadratic.
    int rc =
        pcre2_match(regex.code, subject, piece.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc < 0) break;  // no further match (or a resource limit: keep the rest whole)
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {  // none of our patterns matches empty; step over a character
      offset = begin + Utf8SequenceLength(static_cast<uint8_t>(piece[begin]));
      continue;
    }
    if (begin > last) out->push_back(piece.substr(last, begin - last));
    out->push_back(piece.substr(begin, end - begin));
    last = offset = end;
  }
  if (last < piece.size()) out->push_back(piece.substr(last));
  pcre2_match_data_free(match);
}

}  // namespace shardlm::tokenizer_internal
