// Jinja AST: the expression and statement nodes the parser builds and the evaluator walks.
//
// Owns: node shapes only (plain structs, no behaviour). Nodes are immutable after parsing
// and owned by their parent through unique_ptr; a parsed Template owns the root.
// Non-goals: template inheritance nodes (extends/block/include/import are rejected).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace shardlm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // args = items
  kTuple,     // args = items (a list that prints as a tuple)
  kDict,      // args = key0, value0, key1, value1, ...
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null args are omitted bounds)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // name(args[0] (null inside {% filter %}), args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..]); negated
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kNot,       // not args[0]
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kBinary,    // args[0] op args[1]: + - * / // % ** ~
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained like Python)
  kCondition  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                   // kLiteral
  std::string name;              // kName, kGetAttr, kFilter, kTest; op for kBinary
  std::vector<std::string> ops;  // kCompare: ==, !=, <, <=, >, >=, in, notin
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conds[i] → bodies[i]; bodies.back() is else when bodies > conds
  kFor,          // for targets in expr [if cond] body=bodies[0] else=bodies[1]
  kSet,          // set targets = expr  |  set targets[0].attr = expr
  kSetBlock,     // set targets[0] [| filter] body=bodies[0] {% endset %}
  kMacro,        // macro name(params) body=bodies[0]
  kCallBlock,    // call(params) expr body=bodies[0]
  kFilterBlock,  // filter expr (a filter chain over null) body=bodies[0]
  kWith,         // with params (name = defaults) body=bodies[0]
  kBreak,
  kContinue,
  kDo,          // do expr
  kGeneration,  // {% generation %} body=bodies[0]: rendered as is
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                  // kText; kMacro: name; kSet: attribute when set ns.attr
  ExprPtr expr;                      // main expression
  ExprPtr cond;                      // kFor: `if` filter; kSetBlock: filter chain
  std::vector<ExprPtr> conds;        // kIf
  std::vector<Body> bodies;          // see kinds
  std::vector<std::string> targets;  // kFor / kSet names
  std::vector<std::string> params;   // kMacro / kCallBlock / kWith names
  std::vector<ExprPtr> defaults;     // same size as params (null: no default)
  bool uses_loop = false;            // kFor: the body names `loop` (else it is not built)
  // kFor/kMacro/kCallBlock/kWith: names the body stores before reading them; they start
  // out undefined in the body's scope (jinja2's frame-local rule, see jinja_eval.cc).
  std::vector<std::string> frame_locals;
};

}  // namespace shardlm::jinja
