// Jinja parser internals shared by jinja_parser.cc (statements) and jinja_parser_expr.cc
// (expressions). Not part of the module's interface: include jinja_parser.h instead.
//
// Thread safety: a Parser is used by one Parse call. Lifetime: borrows the token vector.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace shardlm::jinja {

// Deeper nesting than any real template; keeps recursion far from the stack limit.
constexpr int kMaxNesting = 200;

// Recursive-descent parser over one token vector; throws JinjaError on bad syntax.
class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body ParseTemplate() {
    Body body = ParseBody({});
    if (Peek().type != TokenType::kEof) Error("unexpected '" + PeekBlockName() + "'");
    if (!unknown_.empty()) Fail(unknown_.front());
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& Next() {
    const Token& tok = Peek();
    if (pos_ < t_.size() - 1) ++pos_;
    return tok;
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kName && Peek(ahead).text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& tok) {
    switch (tok.type) {
      case TokenType::kEof:
        return "end of template";
      case TokenType::kVarEnd:
        return "'}}'";
      case TokenType::kBlockEnd:
        return "'%}'";
      case TokenType::kText:
        return "template text";
      case TokenType::kString:
        return "string";
      default:
        return "'" + tok.text + "'";
    }
  }
  [[noreturn]] void Error(const std::string& what) const {
    Fail("template syntax error at line " + std::to_string(Peek().line) + ": " + what);
  }
  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Error("expected '" + std::string(op) + "', got " + Describe(Peek()));
  }
  void ExpectName(std::string_view name) {
    if (!SkipName(name)) Error("expected '" + std::string(name) + "', got " + Describe(Peek()));
  }
  std::string ExpectIdentifier() {
    if (Peek().type != TokenType::kName) Error("expected a name, got " + Describe(Peek()));
    return Next().text;
  }
  void NoteUnknown(const std::string& what) {
    unknown_.push_back("template syntax error at line " + std::to_string(Peek().line) + ": " +
                       what);
  }
  void ExpectBlockEnd() {
    if (Peek().type != TokenType::kBlockEnd) Error("expected '%}', got " + Describe(Peek()));
    Next();
  }
  std::string PeekBlockName() const {
    return Peek().type == TokenType::kBlockBegin ? Peek(1).text : Describe(Peek());
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : parser(p) {
      if (++parser->depth_ > kMaxNesting) parser->Error("template nested too deeply");
    }
    ~DepthGuard() { --parser->depth_; }
    Parser* parser;
  };

  ExprPtr MakeExpr(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  StmtPtr MakeStmt(StmtKind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  // ---- statements (jinja_parser.cc) ----
  // Parses until EOF or a {% tag %} whose name is in `ends` (left unconsumed).
  Body ParseBody(std::initializer_list<std::string_view> ends);
  // Consumes `{% name %}` closing a block.
  void ExpectEndTag(std::string_view name);
  StmtPtr ParseStatement();
  StmtPtr ParseIf(int line);
  StmtPtr ParseIfChain(int line);
  std::vector<std::string> ParseTargets();
  StmtPtr ParseFor(int line);
  StmtPtr ParseSet(int line);
  void ParseParams(Stmt* s);
  StmtPtr ParseMacro(int line);
  StmtPtr ParseCallBlock(int line);
  StmtPtr ParseFilterBlock(int line);
  StmtPtr ParseWith(int line);
  StmtPtr ParseSimpleBlock(StmtKind kind, std::string_view end, int line);

  // ---- expressions (jinja_parser_expr.cc) ----
  // An expression, or an unparenthesized tuple `a, b`.
  ExprPtr ParseTupleOrExpr();
  ExprPtr ParseExpr(bool with_condition);
  ExprPtr ParseCondition();
  void ParseConditionTail(ExprPtr& expr);
  ExprPtr Binary(ExprKind kind, ExprPtr left, ExprPtr right, int line, std::string op = "");
  ExprPtr ParseOr();
  ExprPtr ParseAnd();
  ExprPtr ParseNot();
  std::string PeekCompareOp() const;
  ExprPtr ParseCompare();
  ExprPtr ParseMath1();
  ExprPtr ParseConcat();
  ExprPtr ParseMath2();
  ExprPtr ParsePow();
  ExprPtr ParseUnary(bool with_filter);
  ExprPtr ParsePrimary();
  ExprPtr ParseNameOrConstant();
  ExprPtr ParseNumber();
  ExprPtr ParseParenthesized(int line);
  ExprPtr ParseCollection(ExprKind kind, std::string_view close, int line);
  ExprPtr ParsePostfix(ExprPtr node);
  ExprPtr ParseSubscript(ExprPtr node, int line);
  void ParseCallArgs(Expr* call);
  ExprPtr ParseFilterExpr(ExprPtr node);
  ExprPtr ParseFilterChain(ExprPtr base, bool first_has_pipe = true);
  ExprPtr ParseTest(ExprPtr node);
  std::string ParseDottedName();

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int64_t loop_refs_ = 0;  // `loop` names parsed so far (for Stmt::uses_loop)
  // Unknown filter/test names seen outside if-statements and conditional expressions:
  // jinja2 rejects those at compile time, but defers the ones inside conditionals to
  // run time (when the branch is taken). Each entry is a complete error message.
  std::vector<std::string> unknown_;
};

}  // namespace shardlm::jinja
