// Jinja parser (see jinja_parser.h).
#include "chat/jinja_parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "chat/jinja_builtins.h"

namespace shardlm::jinja {
namespace {

// Deeper nesting than any real template; keeps recursion far from the stack limit.
constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body ParseTemplate() {
    Body body = ParseBody({});
    if (Peek().type != TokenType::kEof) Error("unexpected '" + PeekBlockName() + "'");
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

  // ---- statements ----
  // Parses until EOF or a {% tag %} whose name is in `ends` (left unconsumed).
  Body ParseBody(std::initializer_list<std::string_view> ends) {
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
  void ExpectEndTag(std::string_view name) {
    if (Peek().type != TokenType::kBlockBegin) Error("expected '" + std::string(name) + "'");
    Next();
    ExpectName(name);
    ExpectBlockEnd();
  }

  StmtPtr ParseStatement() {
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

  StmtPtr ParseIf(int line) {
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

  std::vector<std::string> ParseTargets() {
    std::vector<std::string> names;
    bool paren = SkipOp("(");
    do {
      names.push_back(ExpectIdentifier());
    } while (SkipOp(","));
    if (paren) ExpectOp(")");
    return names;
  }

  StmtPtr ParseFor(int line) {
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

  StmtPtr ParseSet(int line) {
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

  void ParseParams(Stmt* s) {
    ExpectOp("(");
    while (!IsOp(")")) {
      s->params.push_back(ExpectIdentifier());
      s->defaults.push_back(SkipOp("=") ? ParseExpr(true) : nullptr);
      if (!SkipOp(",")) break;
    }
    ExpectOp(")");
  }

  StmtPtr ParseMacro(int line) {
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

  StmtPtr ParseCallBlock(int line) {
    auto s = MakeStmt(StmtKind::kCallBlock, line);
    if (IsOp("(")) ParseParams(s.get());
    s->expr = ParseExpr(true);
    if (s->expr->kind != ExprKind::kCall) Error("expected a call after 'call'");
    ExpectBlockEnd();
    s->bodies.push_back(ParseBody({"endcall"}));
    ExpectEndTag("endcall");
    return s;
  }

  StmtPtr ParseFilterBlock(int line) {
    auto s = MakeStmt(StmtKind::kFilterBlock, line);
    s->expr = ParseFilterChain(nullptr, /*first_has_pipe=*/false);
    ExpectBlockEnd();
    s->bodies.push_back(ParseBody({"endfilter"}));
    ExpectEndTag("endfilter");
    return s;
  }

  StmtPtr ParseWith(int line) {
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

  StmtPtr ParseSimpleBlock(StmtKind kind, std::string_view end, int line) {
    auto s = MakeStmt(kind, line);
    ExpectBlockEnd();
    s->bodies.push_back(ParseBody({end}));
    ExpectEndTag(end);
    return s;
  }

  // ---- expressions ----
  // An expression, or an unparenthesized tuple `a, b` (becomes a list).
  ExprPtr ParseTupleOrExpr() {
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

  ExprPtr ParseExpr(bool with_condition) {
    DepthGuard guard(this);
    return with_condition ? ParseCondition() : ParseOr();
  }

  ExprPtr ParseCondition() {
    ExprPtr expr = ParseOr();
    while (IsName("if")) {
      int line = Next().line;
      auto cond = MakeExpr(ExprKind::kCondition, line);
      cond->args.push_back(ParseOr());
      cond->args.push_back(std::move(expr));
      cond->args.push_back(SkipName("else") ? ParseCondition() : nullptr);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr Binary(ExprKind kind, ExprPtr left, ExprPtr right, int line, std::string op = "") {
    auto e = MakeExpr(kind, line);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      int line = Next().line;
      left = Binary(ExprKind::kOr, std::move(left), ParseAnd(), line);
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      int line = Next().line;
      left = Binary(ExprKind::kAnd, std::move(left), ParseNot(), line);
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      auto e = MakeExpr(ExprKind::kNot, Next().line);
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  std::string PeekCompareOp() const {
    static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">="};
    for (const char* op : kOps) {
      if (IsOp(op)) return op;
    }
    if (IsName("in")) return "in";
    if (IsName("not") && IsName("in", 1)) return "notin";
    return "";
  }

  ExprPtr ParseCompare() {
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

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& op = Next();
      left = Binary(ExprKind::kBinary, std::move(left), ParseConcat(), op.line, op.text);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOp("~")) {
      int line = Next().line;
      left = Binary(ExprKind::kBinary, std::move(left), ParseMath2(), line, "~");
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& op = Next();
      left = Binary(ExprKind::kBinary, std::move(left), ParsePow(), op.line, op.text);
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      int line = Next().line;
      left = Binary(ExprKind::kBinary, std::move(left), ParseUnary(true), line, "**");
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
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

  ExprPtr ParsePrimary();
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
};

ExprPtr Parser::ParsePrimary() {
  const Token& tok = Peek();
  int line = tok.line;
  switch (tok.type) {
    case TokenType::kName: {
      Next();
      auto e = MakeExpr(ExprKind::kLiteral, line);
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
    case TokenType::kString: {
      std::string text;
      while (Peek().type == TokenType::kString) text += Next().text;
      auto e = MakeExpr(ExprKind::kLiteral, line);
      e->value = Value::String(std::move(text));
      return e;
    }
    case TokenType::kInt:
    case TokenType::kFloat: {
      Next();
      auto e = MakeExpr(ExprKind::kLiteral, line);
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
    case TokenType::kOp:
      if (tok.text == "(") {
        Next();
        if (SkipOp(")")) return MakeExpr(ExprKind::kTuple, line);
        ExprPtr first = ParseExpr(true);
        if (SkipOp(")")) return first;
        auto list = MakeExpr(ExprKind::kTuple, line);
        list->args.push_back(std::move(first));
        while (SkipOp(",")) {
          if (IsOp(")")) break;
          list->args.push_back(ParseExpr(true));
        }
        ExpectOp(")");
        return list;
      }
      if (tok.text == "[") {
        Next();
        return ParseCollection(ExprKind::kList, "]", line);
      }
      if (tok.text == "{") {
        Next();
        return ParseCollection(ExprKind::kDict, "}", line);
      }
      break;
    default:
      break;
  }
  Error("unexpected " + Describe(tok));
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
    if (!FindFilter(f->name)) Error("no filter named '" + f->name + "'");
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
  if (!FindTest(test->name)) Error("no test named '" + test->name + "'");
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

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace shardlm::jinja
