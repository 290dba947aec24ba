// Jinja lexer (see jinja_lexer.h).
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "chat/jinja_strings.h"
#include "chat/jinja_value.h"

namespace shardlm::jinja {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// jinja2 normalizes every line ending to "\n" and, with keep_trailing_newline off, drops
// one trailing newline.
std::string NormalizeSource(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    bool strip_next = false;
    while (pos <= src_.size()) {
      size_t tag = FindTagStart(pos);
      size_t text_end = tag == std::string::npos ? src_.size() : tag;
      std::string text = src_.substr(pos, text_end - pos);
      bool line_starting = pos == 0 || src_[pos - 1] == '\n';
      if (strip_next) text = PyStrip(text, std::nullopt, StripSide::kLeft);
      if (tag == std::string::npos) {
        EmitText(std::move(text), pos);
        break;
      }
      char kind = src_[tag + 1];
      size_t p = tag + 2;
      char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (sign) ++p;
      if (sign == '-') {
        text = PyStrip(text, std::nullopt, StripSide::kRight);
      } else if (sign != '+' && kind != '{') {
        LstripBlock(text, line_starting);
      }
      EmitText(std::move(text), pos);
      bool close_minus = false;
      bool close_plus = false;
      if (kind == '#') {
        pos = SkipComment(p, &close_minus);
      } else {
        pos = LexTag(kind, tag, p, &close_minus, &close_plus);
      }
      strip_next = close_minus;
      bool trim = !close_minus && !close_plus && kind != '{';
      if (trim && pos < src_.size() && src_[pos] == '\n') ++pos;
    }
    tokens_.push_back(Token{TokenType::kEof, "", LineAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t pos) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) -
                            line_starts_.begin()) +
           1;
  }

  [[noreturn]] void Error(size_t pos, const std::string& what) const {
    Fail("template syntax error at line " + std::to_string(LineAt(pos)) + ": " + what);
  }

  size_t FindTagStart(size_t from) const {
    size_t i = from;
    while (true) {
      i = src_.find('{', i);
      if (i == std::string::npos || i + 1 >= src_.size()) return std::string::npos;
      char next = src_[i + 1];
      if (next == '{' || next == '%' || next == '#') return i;
      ++i;
    }
  }

  // lstrip_blocks: spaces/tabs between the line start and a block/comment tag go away.
  static void LstripBlock(std::string& text, bool line_starting) {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    for (size_t i = l_pos; i < text.size(); ++i) {
      if (text[i] != ' ' && text[i] != '\t') return;
    }
    text.resize(l_pos);
  }

  void EmitText(std::string text, size_t pos) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::kText, std::move(text), LineAt(pos)});
  }

  size_t SkipComment(size_t p, bool* close_minus) {
    size_t end = src_.find("#}", p);
    if (end == std::string::npos) Error(p, "unterminated comment");
    *close_minus = end > p && src_[end - 1] == '-';
    return end + 2;
  }

  // Tokenizes one {{ }} or {% %} tag starting after its opening delimiter at `p`.
  size_t LexTag(char kind, size_t tag, size_t p, bool* close_minus, bool* close_plus) {
    bool is_var = kind == '{';
    size_t first_token = tokens_.size();
    tokens_.push_back(
        Token{is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, "", LineAt(tag)});
    const char* close = is_var ? "}}" : "%}";
    int brace_depth = 0;
    while (true) {
      while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n')) ++p;
      if (p >= src_.size()) Error(tag, is_var ? "unterminated '{{'" : "unterminated '{%'");
      if (brace_depth == 0 && src_[p] == '-' && src_.compare(p + 1, 2, close) == 0) {
        *close_minus = true;
        p += 3;
        break;
      }
      if (!is_var && brace_depth == 0 && src_[p] == '+' && src_.compare(p + 1, 2, close) == 0) {
        *close_plus = true;  // `+%}` turns trim_blocks off for this tag
        p += 3;
        break;
      }
      if (brace_depth == 0 && src_.compare(p, 2, close) == 0) {
        p += 2;
        break;
      }
      p = LexToken(p, &brace_depth);
    }
    tokens_.push_back(Token{is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, "", LineAt(p)});
    if (!is_var && tokens_.size() - first_token == 3 && tokens_[first_token + 1].text == "raw" &&
        tokens_[first_token + 1].type == TokenType::kName) {
      tokens_.resize(first_token);
      return LexRaw(p, *close_minus, close_minus);
    }
    return p;
  }

  // Body of {% raw %}: literal text up to {% endraw %}.
  size_t LexRaw(size_t p, bool strip_start, bool* close_minus) {
    size_t search = p;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) Error(p, "missing {% endraw %}");
      size_t q = open + 2;
      bool strip_end = q < src_.size() && src_[q] == '-';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      while (q < src_.size() && (src_[q] == ' ' || src_[q] == '\t' || src_[q] == '\n')) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && (src_[q] == ' ' || src_[q] == '\t' || src_[q] == '\n')) ++q;
      *close_minus = q < src_.size() && src_[q] == '-';
      if (*close_minus) ++q;
      if (src_.compare(q, 2, "%}") != 0) Error(open, "malformed {% endraw %}");
      std::string text = src_.substr(p, open - p);
      if (strip_start) text = PyStrip(text, std::nullopt, StripSide::kLeft);
      if (strip_end) text = PyStrip(text, std::nullopt, StripSide::kRight);
      EmitText(std::move(text), p);
      return q + 2;
    }
  }

  size_t LexToken(size_t p, int* brace_depth) {
    char c = src_[p];
    int line = LineAt(p);
    if (IsNameStart(c)) {
      size_t e = p;
      while (e < src_.size() && IsNameChar(src_[e])) ++e;
      tokens_.push_back(Token{TokenType::kName, src_.substr(p, e - p), line});
      return e;
    }
    if (IsDigit(c)) return LexNumber(p);
    if (c == '\'' || c == '"') return LexString(p);
    static const char* kTwoCharOps[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwoCharOps) {
      if (src_.compare(p, 2, op) == 0) {
        tokens_.push_back(Token{TokenType::kOp, op, line});
        return p + 2;
      }
    }
    if (std::strchr("+-*/%~<>=()[]{},.:|", c) == nullptr) {
      size_t end = p;
      DecodeUtf8(src_, end);
      Error(p, "unexpected character '" + src_.substr(p, end - p) + "'");
    }
    if (c == '{') ++*brace_depth;
    if (c == '}' && *brace_depth > 0) --*brace_depth;
    tokens_.push_back(Token{TokenType::kOp, std::string(1, c), line});
    return p + 1;
  }

  size_t LexNumber(size_t p) {
    size_t e = p;
    bool is_float = false;
    auto digits = [&] {
      while (e < src_.size() && (IsDigit(src_[e]) || src_[e] == '_')) ++e;
    };
    digits();
    if (e + 1 < src_.size() && src_[e] == '.' && IsDigit(src_[e + 1])) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && IsDigit(src_[q])) {
        is_float = true;
        e = q;
        digits();
      }
    }
    std::string text;
    for (size_t i = p; i < e; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back(Token{is_float ? TokenType::kFloat : TokenType::kInt, text, LineAt(p)});
    return e;
  }

  size_t LexString(size_t p) {
    char quote = src_[p];
    std::string value;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) Error(p, "unterminated string");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        value += c;
        ++i;
        continue;
      }
      i = DecodeEscape(i, value);
    }
    tokens_.push_back(Token{TokenType::kString, std::move(value), LineAt(p)});
    return i + 1;
  }

  // Python string-literal escapes; an unknown escape keeps its backslash.
  size_t DecodeEscape(size_t i, std::string& value) {
    static constexpr std::string_view kFrom = "ntr\\'\"abfv";
    static constexpr std::string_view kTo = "\n\t\r\\'\"\a\b\f\v";
    char e = src_[i + 1];
    if (size_t k = kFrom.find(e); k != std::string_view::npos) {
      value += kTo[k];
      return i + 2;
    }
    if (e == '\n') return i + 2;  // backslash-newline continues the literal
    if (e == 'x') return DecodeHex(i, 2, value);
    if (e == 'u') return DecodeHex(i, 4, value);
    if (e == 'U') return DecodeHex(i, 8, value);
    if (e >= '0' && e <= '7') return DecodeOctal(i, value);
    value += '\\';
    return i + 1;
  }

  size_t DecodeOctal(size_t i, std::string& value) {
    size_t q = i + 1;
    uint32_t cp = 0;
    for (int k = 0; k < 3 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k, ++q) {
      cp = cp * 8 + static_cast<uint32_t>(src_[q] - '0');
    }
    AppendUtf8(cp, value);
    return q;
  }

  size_t DecodeHex(size_t i, int count, std::string& value) {
    size_t start = i + 2;
    if (start + count > src_.size()) Error(i, "truncated \\x/\\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < count; ++k) {
      char h = src_[start + k];
      if (!IsHex(h)) Error(i, "invalid \\x/\\u escape");
      cp = cp * 16 + static_cast<uint32_t>(IsDigit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (cp > 0x10FFFF) Error(i, "escape out of Unicode range");
    AppendUtf8(cp, value);
    return start + count;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Tokenize(const std::string& source) {
  return Lexer(NormalizeSource(source)).Run();
}

}  // namespace shardlm::jinja
