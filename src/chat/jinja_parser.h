// Jinja parser: tokens → AST (jinja_ast.h), with jinja2's operator precedence.
//
// Owns: statement structure (if/for/set/macro/call/filter/with/do/break/continue/
// generation), expression grammar (conditional, or, and, not, comparisons, + -, ~, * / // %,
// **, unary, postfix access/calls, filters and tests), and syntax errors with line numbers.
// Goals: accept what jinja2 accepts for chat templates; bounded nesting so hostile input
// cannot exhaust the stack. Non-goals: extends/block/include/import, recursive loops.
#pragma once

#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace shardlm::jinja {

// Throws JinjaError("template syntax error at line N: ...").
Body Parse(const std::vector<Token>& tokens);

}  // namespace shardlm::jinja
