// Jinja parser: statements (see jinja_parser.h).
#include "chat/jinja_parser.h"

#include <algorithm>

#include "chat/jinja_parser_impl.h"

namespace shardlm::jinja {

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

// Parses until EOF or a {% tag %} whose name is in `ends` (left unconsumed).
Body Parser::ParseBody(std::initializer_list<std::string_view> ends) {
  DepthGuard guard(this);
  Body body;
  while (true) {
    const Token& tok = Peek();
    if (tok.type == TokenType::kEof) {
      if (ends.size() > 0) {
        Error("unexpected end of template, expected '" + std::string(*(ends.end() - 1)) + "'");
      }
      return body;
    }
    if (tok.type == TokenType::kText) {
      auto s = MakeStmt(StmtKind::kText, tok.line);
      s->text = Next().text;
      body.push_back(std::move(s));
    } else if (tok.type == TokenType::kVarBegin) {
      Next();
      auto s = MakeStmt(StmtKind::kOutput, tok.line);
      s->expr = ParseTupleOrExpr();
      if (Peek().type != TokenType::kVarEnd) Error("expected '}}', got " + Describe(Peek()));
      Next();
      body.push_back(std::move(s));
    } else if (tok.type == TokenType::kBlockBegin) {
      const Token& name = Peek(1);
      if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) return body;
      body.push_back(ParseStatement());
    } else {
      Error("unexpected " + Describe(tok));
    }
  }
}

// Consumes `{% name %}` closing a block.
void Parser::ExpectEndTag(std::string_view name) {
  if (Peek().type != TokenType::kBlockBegin) Error("expected '" + std::string(name) + "'");
  Next();
  ExpectName(name);
  ExpectBlockEnd();
}

StmtPtr Parser::ParseStatement() {
  Next();  // {%
  int line = Peek().line;
  if (Peek().type != TokenType::kName) Error("expected a tag name, got " + Describe(Peek()));
  std::string tag = Next().text;
  if (tag == "if") return ParseIf(line);
  if (tag == "for") return ParseFor(line);
  if (tag == "set") return ParseSet(line);
  if (tag == "macro") return ParseMacro(line);
  if (tag == "call") return ParseCallBlock(line);
  if (tag == "filter") return ParseFilterBlock(line);
  if (tag == "with") return ParseWith(line);
  if (tag == "generation") return ParseSimpleBlock(StmtKind::kGeneration, "endgeneration", line);
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) Error("'" + tag + "' outside of a loop");
    ExpectBlockEnd();
    return MakeStmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
  }
  if (tag == "do") {
    auto s = MakeStmt(StmtKind::kDo, line);
    s->expr = ParseTupleOrExpr();
    ExpectBlockEnd();
    return s;
  }
  Error("unknown or unsupported tag '" + tag + "'");
}

StmtPtr Parser::ParseIf(int line) {
  size_t unknown_mark = unknown_.size();
  StmtPtr s = ParseIfChain(line);
  unknown_.resize(unknown_mark);  // unknown filters/tests under an if fail at run time
  return s;
}

StmtPtr Parser::ParseIfChain(int line) {
  auto s = MakeStmt(StmtKind::kIf, line);
  s->conds.push_back(ParseTupleOrExpr());
  ExpectBlockEnd();
  while (true) {
    s->bodies.push_back(ParseBody({"elif", "else", "endif"}));
    Next();  // {%
    std::string tag = Next().text;
    if (tag == "elif") {
      s->conds.push_back(ParseTupleOrExpr());
      ExpectBlockEnd();
    } else if (tag == "else") {
      ExpectBlockEnd();
      s->bodies.push_back(ParseBody({"endif"}));
      ExpectEndTag("endif");
      return s;
    } else {
      ExpectBlockEnd();
      return s;
    }
  }
}

std::vector<std::string> Parser::ParseTargets() {
  std::vector<std::string> names;
  bool paren = SkipOp("(");
  do {
    names.push_back(ExpectIdentifier());
  } while (SkipOp(","));
  if (paren) ExpectOp(")");
  return names;
}

StmtPtr Parser::ParseFor(int line) {
  auto s = MakeStmt(StmtKind::kFor, line);
  s->targets = ParseTargets();
  ExpectName("in");
  s->expr = ParseExpr(/*with_condition=*/false);
  if (SkipName("if")) s->cond = ParseExpr(true);
  if (IsName("recursive")) Error("recursive loops are not supported");
  ExpectBlockEnd();
  ++loop_depth_;
  int64_t refs_before = loop_refs_;
  s->bodies.push_back(ParseBody({"else", "endfor"}));
  s->uses_loop = loop_refs_ != refs_before;
  --loop_depth_;
  Next();  // {%
  if (SkipName("else")) {
    ExpectBlockEnd();
    s->bodies.push_back(ParseBody({"endfor"}));
    ExpectEndTag("endfor");
  } else {
    ExpectName("endfor");
    ExpectBlockEnd();
  }
  return s;
}

StmtPtr Parser::ParseSet(int line) {
  auto s = MakeStmt(StmtKind::kSet, line);
  if (Peek().type == TokenType::kName && IsOp(".", 1)) {
    s->targets.push_back(Next().text);
    Next();
    s->text = ExpectIdentifier();
  } else {
    s->targets = ParseTargets();
  }
  if (SkipOp("=")) {
    s->expr = ParseTupleOrExpr();
    ExpectBlockEnd();
    return s;
  }
  if (s->targets.size() != 1 || !s->text.empty()) Error("block set needs a single name");
  s->kind = StmtKind::kSetBlock;
  if (IsOp("|")) s->cond = ParseFilterChain(nullptr);
  ExpectBlockEnd();
  s->bodies.push_back(ParseBody({"endset"}));
  ExpectEndTag("endset");
  return s;
}

void Parser::ParseParams(Stmt* s) {
  ExpectOp("(");
  while (!IsOp(")")) {
    s->params.push_back(ExpectIdentifier());
    s->defaults.push_back(SkipOp("=") ? ParseExpr(true) : nullptr);
    if (!SkipOp(",")) break;
  }
  ExpectOp(")");
}

StmtPtr Parser::ParseMacro(int line) {
  auto s = MakeStmt(StmtKind::kMacro, line);
  s->text = ExpectIdentifier();
  ParseParams(s.get());
  ExpectBlockEnd();
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  s->bodies.push_back(ParseBody({"endmacro"}));
  loop_depth_ = saved_loops;
  ExpectEndTag("endmacro");
  return s;
}

StmtPtr Parser::ParseCallBlock(int line) {
  auto s = MakeStmt(StmtKind::kCallBlock, line);
  if (IsOp("(")) ParseParams(s.get());
  s->expr = ParseExpr(true);
  if (s->expr->kind != ExprKind::kCall) Error("expected a call after 'call'");
  ExpectBlockEnd();
  s->bodies.push_back(ParseBody({"endcall"}));
  ExpectEndTag("endcall");
  return s;
}

StmtPtr Parser::ParseFilterBlock(int line) {
  auto s = MakeStmt(StmtKind::kFilterBlock, line);
  s->expr = ParseFilterChain(nullptr, /*first_has_pipe=*/false);
  ExpectBlockEnd();
  s->bodies.push_back(ParseBody({"endfilter"}));
  ExpectEndTag("endfilter");
  return s;
}

StmtPtr Parser::ParseWith(int line) {
  auto s = MakeStmt(StmtKind::kWith, line);
  while (Peek().type != TokenType::kBlockEnd) {
    s->params.push_back(ExpectIdentifier());
    ExpectOp("=");
    s->defaults.push_back(ParseExpr(true));
    if (!SkipOp(",")) break;
  }
  ExpectBlockEnd();
  s->bodies.push_back(ParseBody({"endwith"}));
  ExpectEndTag("endwith");
  return s;
}

StmtPtr Parser::ParseSimpleBlock(StmtKind kind, std::string_view end, int line) {
  auto s = MakeStmt(kind, line);
  ExpectBlockEnd();
  s->bodies.push_back(ParseBody({end}));
  ExpectEndTag(end);
  return s;
}

}  // namespace shardlm::jinja
