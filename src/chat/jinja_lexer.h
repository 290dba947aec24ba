// Jinja lexer: template source → tokens, with jinja2's whitespace rules applied.
//
// Owns: splitting text from {{ }}, {% %} and {# #}; `-` whitespace control, `+` (no
// lstrip), trim_blocks, lstrip_blocks, dropping one trailing newline (keep_trailing_newline
// off); {% raw %}; tokenizing expressions (names, numbers, strings with Python escapes,
// operators), each token with its 1-based source line.
// Goals: the exact text jinja2 (trim_blocks=True, lstrip_blocks=True) would emit.
// Non-goals: line statements, custom delimiters.
#pragma once

#include <string>
#include <vector>

namespace shardlm::jinja {

enum class TokenType {
  kText,
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text is the decoded value
  kInt,
  kFloat,
  kOp,  // text is the operator
  kEof
};

struct Token {
  TokenType type;
  std::string text;
  int line = 1;
};

// Throws JinjaError on an unterminated tag, string or comment, or an unknown character.
std::vector<Token> Tokenize(const std::string& source);

}  // namespace shardlm::jinja
