// Jinja parser: expressions, with jinja2's precedence (see jinja_parser.h).
#include <cerrno>
#include <cstdlib>

#include "chat/jinja_builtins.h"
#include "chat/jinja_parser_impl.h"

namespace shardlm::jinja {

// An expression, or an unparenthesized tuple `a, b`.
ExprPtr Parser::ParseTupleOrExpr() {
  int line = Peek().line;
  ExprPtr first = ParseExpr(true);
  if (!IsOp(",")) return first;
  auto list = MakeExpr(ExprKind::kTuple, line);
  list->args.push_back(std::move(first));
  while (SkipOp(",")) {
    if (Peek().type == TokenType::kBlockEnd || Peek().type == TokenType::kVarEnd) break;
    list->args.push_back(ParseExpr(true));
  }
  return list;
}

ExprPtr Parser::ParseExpr(bool with_condition) {
  DepthGuard guard(this);
  return with_condition ? ParseCondition() : ParseOr();
}

ExprPtr Parser::ParseCondition() {
  size_t unknown_mark = unknown_.size();
  ExprPtr expr = ParseOr();
  if (IsName("if")) {
    ParseConditionTail(expr);
    unknown_.resize(unknown_mark);  // checked at run time, like jinja2
  }
  return expr;
}

void Parser::ParseConditionTail(ExprPtr& expr) {
  while (IsName("if")) {
    int line = Next().line;
    auto cond = MakeExpr(ExprKind::kCondition, line);
    cond->args.push_back(ParseOr());
    cond->args.push_back(std::move(expr));
    cond->args.push_back(SkipName("else") ? ParseCondition() : nullptr);
    expr = std::move(cond);
  }
}

ExprPtr Parser::Binary(ExprKind kind, ExprPtr left, ExprPtr right, int line, std::string op) {
  auto e = MakeExpr(kind, line);
  e->name = std::move(op);
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

ExprPtr Parser::ParseOr() {
  ExprPtr left = ParseAnd();
  while (IsName("or")) {
    int line = Next().line;
    left = Binary(ExprKind::kOr, std::move(left), ParseAnd(), line);
  }
  return left;
}

ExprPtr Parser::ParseAnd() {
  ExprPtr left = ParseNot();
  while (IsName("and")) {
    int line = Next().line;
    left = Binary(ExprKind::kAnd, std::move(left), ParseNot(), line);
  }
  return left;
}

ExprPtr Parser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(this);
    auto e = MakeExpr(ExprKind::kNot, Next().line);
    e->args.push_back(ParseNot());
    return e;
  }
  return ParseCompare();
}

std::string Parser::PeekCompareOp() const {
  static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">="};
  for (const char* op : kOps) {
    if (IsOp(op)) return op;
  }
  if (IsName("in")) return "in";
  if (IsName("not") && IsName("in", 1)) return "notin";
  return "";
}

ExprPtr Parser::ParseCompare() {
  int line = Peek().line;
  ExprPtr left = ParseMath1();
  std::string op = PeekCompareOp();
  if (op.empty()) return left;
  auto cmp = MakeExpr(ExprKind::kCompare, line);
  cmp->args.push_back(std::move(left));
  while (!op.empty()) {
    Next();
    if (op == "notin") Next();
    cmp->ops.push_back(op);
    cmp->args.push_back(ParseMath1());
    op = PeekCompareOp();
  }
  return cmp;
}

ExprPtr Parser::ParseMath1() {
  ExprPtr left = ParseConcat();
  while (IsOp("+") || IsOp("-")) {
    const Token& op = Next();
    left = Binary(ExprKind::kBinary, std::move(left), ParseConcat(), op.line, op.text);
  }
  return left;
}

ExprPtr Parser::ParseConcat() {
  ExprPtr left = ParseMath2();
  while (IsOp("~")) {
    int line = Next().line;
    left = Binary(ExprKind::kBinary, std::move(left), ParseMath2(), line, "~");
  }
  return left;
}

ExprPtr Parser::ParseMath2() {
  ExprPtr left = ParsePow();
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const Token& op = Next();
    left = Binary(ExprKind::kBinary, std::move(left), ParsePow(), op.line, op.text);
  }
  return left;
}

ExprPtr Parser::ParsePow() {
  ExprPtr left = ParseUnary(true);
  while (IsOp("**")) {
    int line = Next().line;
    left = Binary(ExprKind::kBinary, std::move(left), ParseUnary(true), line, "**");
  }
  return left;
}

ExprPtr Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(this);
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Token& op = Next();
    node = MakeExpr(op.text == "-" ? ExprKind::kNeg : ExprKind::kPos, op.line);
    node->args.push_back(ParseUnary(false));
  } else {
    node = ParsePostfix(ParsePrimary());
  }
  return with_filter ? ParseFilterExpr(std::move(node)) : std::move(node);
}

ExprPtr Parser::ParsePrimary() {
  const Token& tok = Peek();
  int line = tok.line;
  switch (tok.type) {
    case TokenType::kName:
      return ParseNameOrConstant();
    case TokenType::kString: {
      std::string text;
      while (Peek().type == TokenType::kString) text += Next().text;  // 'a' 'b' concatenate
      auto e = MakeExpr(ExprKind::kLiteral, line);
      e->value = Value::String(std::move(text));
      return e;
    }
    case TokenType::kInt:
    case TokenType::kFloat:
      return ParseNumber();
    case TokenType::kOp:
      if (SkipOp("(")) return ParseParenthesized(line);
      if (SkipOp("[")) return ParseCollection(ExprKind::kList, "]", line);
      if (SkipOp("{")) return ParseCollection(ExprKind::kDict, "}", line);
      break;
    default:
      break;
  }
  Error("unexpected " + Describe(tok));
}

ExprPtr Parser::ParseNameOrConstant() {
  const Token& tok = Next();
  auto e = MakeExpr(ExprKind::kLiteral, tok.line);
  if (tok.text == "true" || tok.text == "True") {
    e->value = Value::Bool(true);
  } else if (tok.text == "false" || tok.text == "False") {
    e->value = Value::Bool(false);
  } else if (tok.text == "none" || tok.text == "None") {
    e->value = Value::None();
  } else {
    e->kind = ExprKind::kName;
    e->name = tok.text;
    if (tok.text == "loop") ++loop_refs_;
  }
  return e;
}

ExprPtr Parser::ParseNumber() {
  const Token& tok = Next();
  auto e = MakeExpr(ExprKind::kLiteral, tok.line);
  errno = 0;
  if (tok.type == TokenType::kInt) {
    long long v = std::strtoll(tok.text.c_str(), nullptr, 10);
    if (errno == ERANGE) Error("integer literal out of range");
    e->value = Value::Int(v);
  } else {
    e->value = Value::Float(std::strtod(tok.text.c_str(), nullptr));
  }
  return e;
}

// After '(': a parenthesized expression, or a tuple `()`, `(a,)`, `(a, b)`.
ExprPtr Parser::ParseParenthesized(int line) {
  if (SkipOp(")")) return MakeExpr(ExprKind::kTuple, line);
  ExprPtr first = ParseExpr(true);
  if (SkipOp(")")) return first;
  auto tuple = MakeExpr(ExprKind::kTuple, line);
  tuple->args.push_back(std::move(first));
  while (SkipOp(",")) {
    if (IsOp(")")) break;
    tuple->args.push_back(ParseExpr(true));
  }
  ExpectOp(")");
  return tuple;
}

ExprPtr Parser::ParseCollection(ExprKind kind, std::string_view close, int line) {
  auto e = MakeExpr(kind, line);
  while (!IsOp(close)) {
    e->args.push_back(ParseExpr(true));
    if (kind == ExprKind::kDict) {
      ExpectOp(":");
      e->args.push_back(ParseExpr(true));
    }
    if (!SkipOp(",")) break;
  }
  ExpectOp(close);
  return e;
}

ExprPtr Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    int line = Peek().line;
    if (SkipOp(".")) {
      if (Peek().type == TokenType::kInt) {
        auto e = MakeExpr(ExprKind::kGetItem, line);
        e->args.push_back(std::move(node));
        auto index = MakeExpr(ExprKind::kLiteral, line);
        index->value = Value::Int(std::strtoll(Next().text.c_str(), nullptr, 10));
        e->args.push_back(std::move(index));
        node = std::move(e);
        continue;
      }
      auto e = MakeExpr(ExprKind::kGetAttr, line);
      e->name = ExpectIdentifier();
      e->args.push_back(std::move(node));
      node = std::move(e);
    } else if (SkipOp("[")) {
      node = ParseSubscript(std::move(node), line);
    } else if (IsOp("(")) {
      auto call = MakeExpr(ExprKind::kCall, line);
      call->args.push_back(std::move(node));
      ParseCallArgs(call.get());
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::ParseSubscript(ExprPtr node, int line) {
  ExprPtr parts[3];
  bool is_slice = false;
  for (int k = 0; k < 3; ++k) {
    if (!IsOp(":") && !IsOp("]")) parts[k] = ParseExpr(true);
    if (k == 0 && IsOp(",")) {  // x[a, b]: a tuple key
      auto key = MakeExpr(ExprKind::kTuple, line);
      key->args.push_back(std::move(parts[0]));
      while (SkipOp(",") && !IsOp("]")) key->args.push_back(ParseExpr(true));
      parts[0] = std::move(key);
      break;
    }
    if (k == 2 || !SkipOp(":")) break;
    is_slice = true;
  }
  ExpectOp("]");
  auto e = MakeExpr(is_slice ? ExprKind::kSlice : ExprKind::kGetItem, line);
  e->args.push_back(std::move(node));
  if (!is_slice && !parts[0]) Error("expected an index");
  for (int k = 0; k < (is_slice ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
  return e;
}

void Parser::ParseCallArgs(Expr* call) {
  ExpectOp("(");
  while (!IsOp(")")) {
    if (IsOp("*") || IsOp("**")) Error("*args and **kwargs in calls are not supported");
    if (Peek().type == TokenType::kName && IsOp("=", 1)) {
      std::string name = Next().text;
      Next();
      call->kwargs.emplace_back(std::move(name), ParseExpr(true));
    } else {
      if (!call->kwargs.empty()) Error("positional argument after keyword argument");
      call->args.push_back(ParseExpr(true));
    }
    if (!SkipOp(",")) break;
  }
  ExpectOp(")");
}

std::string Parser::ParseDottedName() {
  std::string name = ExpectIdentifier();
  while (IsOp(".") && Peek(1).type == TokenType::kName) {
    Next();
    name += "." + Next().text;
  }
  return name;
}

ExprPtr Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      node = ParseFilterChain(std::move(node));
    } else if (IsName("is")) {
      node = ParseTest(std::move(node));
    } else if (IsOp("(")) {
      auto call = MakeExpr(ExprKind::kCall, Peek().line);
      call->args.push_back(std::move(node));
      ParseCallArgs(call.get());
      node = std::move(call);
    } else {
      return node;
    }
  }
}

// `| f(args) | g ...` applied to `base` (null inside {% filter %} and block set).
ExprPtr Parser::ParseFilterChain(ExprPtr base, bool first_has_pipe) {
  bool first = true;
  while ((first && !first_has_pipe) || SkipOp("|")) {
    first = false;
    DepthGuard guard(this);
    auto f = MakeExpr(ExprKind::kFilter, Peek().line);
    f->name = ParseDottedName();
    if (!FindFilter(f->name)) NoteUnknown("no filter named '" + f->name + "'");
    f->args.push_back(std::move(base));
    if (IsOp("(")) ParseCallArgs(f.get());
    base = std::move(f);
  }
  return base;
}

ExprPtr Parser::ParseTest(ExprPtr node) {
  int line = Next().line;  // is
  auto test = MakeExpr(ExprKind::kTest, line);
  test->negated = SkipName("not");
  test->name = ParseDottedName();
  if (!FindTest(test->name)) NoteUnknown("no test named '" + test->name + "'");
  test->args.push_back(std::move(node));
  const Token& tok = Peek();
  bool arg_start = tok.type == TokenType::kName || tok.type == TokenType::kString ||
                   tok.type == TokenType::kInt || tok.type == TokenType::kFloat || IsOp("[") ||
                   IsOp("{");
  if (IsOp("(")) {
    ParseCallArgs(test.get());
  } else if (arg_start && !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) Error("cannot chain multiple tests with 'is'");
    test->args.push_back(ParsePostfix(ParsePrimary()));
  }
  return test;
}

}  // namespace shardlm::jinja
