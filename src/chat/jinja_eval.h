// Jinja evaluator: walks a parsed AST over jinja::Values and writes the output text.
//
// Owns: scopes (each for-loop iteration and macro call gets its own scope, like jinja2;
// if-blocks do not; a name a frame stores before reading it starts out undefined there
// unless an enclosing frame knows it, jinja2's frame-local rule), the loop object, macros and call
// blocks, attribute/item lookup rules (x.y tries the attribute then the key; x["y"] the key first),
// operators, jinja2's default Undefined semantics, and the resource bounds that keep hostile
// templates safe. Goals: jinja2 (ImmutableSandboxedEnvironment) behaviour for chat templates.
// Non-goals: autoescaping, template inheritance, mutating list/dict methods (the immutable
// sandbox forbids them too).
// Thread safety: an Evaluator is used by one render on one thread; the AST it walks is
// read-only and may be shared by concurrent renders.
// Lifetime: the AST must outlive the Evaluator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace shardlm::jinja {

struct RenderLimits {
  // Python's default recursion limit is 1000; each level here is one Eval/Exec frame, so
  // this also bounds the C++ stack (a few hundred bytes per frame).
  int max_depth = 1000;
  // Far above any chat prompt; stops `'x' * 10**9` and runaway loops from eating memory.
  size_t max_output_bytes = size_t{64} << 20;
  // Expression/statement evaluations per render; real templates use a few thousand per
  // message, so this bounds a hostile template's time to about a second.
  int64_t max_steps = 20'000'000;
  // JSON values a render's variables may hold (messages, tools, extra variables): each
  // becomes a Value of about a hundred bytes. A long agent conversation with its tool
  // schemas holds tens of thousands.
  size_t max_input_values = size_t{1} << 18;
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* Lookup(const std::string& name) const;
};

class Evaluator {
 public:
  explicit Evaluator(const RenderLimits& limits) : limits_(limits) {}

  // Renders `root` with `vars` as the template's context. Throws JinjaError.
  std::string Render(const Body& root, const std::vector<std::pair<std::string, Value>>& vars);

  // Lookup rules shared with the builtins.
  Value GetAttr(const Value& obj, const std::string& name);
  Value GetItem(const Value& obj, const Value& key);
  // jinja2's attribute getter for filters: "a.b.0" looks up each part item-first.
  Value GetPath(const Value& obj, const std::string& path);
  Value Call(const Value& fn, CallArgs& args);
  bool RunTest(const std::string& name, const Value& value, const CallArgs& args);
  Value RunFilter(const std::string& name, const Value& value, const CallArgs& args);
  // Fails once a string grows past the output limit.
  void CheckSize(size_t bytes) const;
  size_t MaxOutputBytes() const { return limits_.max_output_bytes; }
  void Tick();

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard {
    explicit DepthGuard(Evaluator* e);
    ~DepthGuard() { --ev->depth_; }
    Evaluator* ev;
  };

  Flow Exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow ExecStmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow ExecStmtUnlocated(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void ExecIf(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out, Flow* flow);
  void ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void Assign(const std::vector<std::string>& targets, const Value& value, Scope& scope);
  Value MakeMacro(const Stmt& s, const std::shared_ptr<Scope>& scope, const Body* body);
  Value CallMacro(const Stmt& s, const Body& body, const std::shared_ptr<Scope>& closure,
                  CallArgs& args);
  std::string Capture(const Body& body, const std::shared_ptr<Scope>& scope);
  void Append(std::string& out, const std::string& text) const;

  Value Eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalCall(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalDict(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalUnary(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalFilter(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* input);
  Value EvalCompare(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalSlice(const Expr& e, const std::shared_ptr<Scope>& scope);
  CallArgs EvalArgs(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope);

  RenderLimits limits_;
  int depth_ = 0;
  int64_t steps_ = 0;
};

// Fills Stmt::frame_locals of every loop/macro/call/with body (run once after parsing).
void AnnotateFrameLocals(Body& body);
std::vector<std::string> FrameLocals(const Body& body);

// Operators, shared with the builtins (sum, etc.).
Value BinaryOp(const std::string& op, const Value& a, const Value& b, size_t max_bytes);
bool Contains(const Value& container, const Value& item);
[[noreturn]] void FailUndefined(const Value& undefined);

}  // namespace shardlm::jinja
