// Jinja evaluator: statements, scopes, loops and macros (see jinja_eval.h).
#include "chat/jinja_eval.h"

#include <unordered_set>

#include "chat/jinja_builtins.h"

namespace shardlm::jinja {

const Value* Scope::Lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Evaluator::DepthGuard::DepthGuard(Evaluator* e) : ev(e) {
  if (++ev->depth_ > ev->limits_.max_depth) {
    --ev->depth_;
    Fail("maximum recursion depth exceeded");
  }
}

void Evaluator::Tick() {
  if (++steps_ > limits_.max_steps) Fail("template exceeded its evaluation step budget");
}

void Evaluator::CheckSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    Fail("template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

void Evaluator::Append(std::string& out, const std::string& text) const {
  CheckSize(out.size() + text.size());
  out += text;
}

namespace {

// Names read anywhere in `e` (first occurrences are what matter to RootLocals).
void CollectLoads(const Expr* e, std::unordered_set<std::string>& seen) {
  if (!e) return;
  if (e->kind == ExprKind::kName) seen.insert(e->name);
  for (const auto& a : e->args) CollectLoads(a.get(), seen);
  for (const auto& [k, v] : e->kwargs) CollectLoads(v.get(), seen);
}

void Store(const std::string& name, std::unordered_set<std::string>& seen,
           std::vector<std::string>& locals) {
  if (seen.insert(name).second) locals.push_back(name);
}

void DeclareLocals(const std::vector<std::string>& names, Scope& scope) {
  for (const auto& name : names) scope.vars[name] = Value::Undefined("'" + name + "'");
}

// Top-level statements in order, without entering scopes of their own (loop, macro and
// block bodies). `conditional`: inside an if-branch, where stores do not count.
void ScanRoot(const Body& body, bool conditional, std::unordered_set<std::string>& seen,
              std::vector<std::string>& locals) {
  for (const auto& s : body) {
    CollectLoads(s->expr.get(), seen);
    for (const auto& c : s->conds) CollectLoads(c.get(), seen);
    for (const auto& d : s->defaults) CollectLoads(d.get(), seen);
    bool stores = s->kind == StmtKind::kSet || s->kind == StmtKind::kSetBlock;
    if (s->kind == StmtKind::kSet && !s->text.empty()) stores = false;  // ns.attr: a load
    if (s->kind == StmtKind::kSet && !s->text.empty()) seen.insert(s->targets[0]);
    for (const auto& t : stores ? s->targets : std::vector<std::string>{}) {
      conditional ? void(seen.insert(t)) : Store(t, seen, locals);
    }
    if (s->kind == StmtKind::kMacro)
      conditional ? void(seen.insert(s->text)) : Store(s->text, seen, locals);
    if (s->kind == StmtKind::kIf) {
      for (const auto& b : s->bodies) ScanRoot(b, true, seen, locals);
    }
  }
}

}  // namespace

// jinja2 makes a name that a frame (the template, a loop body, a macro) stores
// unconditionally before ever reading it there a frame-local from the start: nested loops
// and macros that read it before the store runs see undefined, not the outer value.
std::vector<std::string> FrameLocals(const Body& body) {
  std::unordered_set<std::string> seen;
  std::vector<std::string> locals;
  ScanRoot(body, false, seen, locals);
  return locals;
}

namespace {

// Every name a frame reads or stores directly (if-branches included, nested frames not):
// jinja2's symbols of that frame.
void CollectDirectNames(const Body& body, std::unordered_set<std::string>& names) {
  std::vector<std::string> ignored;
  ScanRoot(body, true, names, ignored);
}

bool IsFrame(const Stmt& s) {
  return s.kind == StmtKind::kFor || s.kind == StmtKind::kMacro || s.kind == StmtKind::kCallBlock ||
         s.kind == StmtKind::kWith;
}

// `enclosing`: the symbols of every frame around `body` (its own frame included).
void Annotate(Body& body, const std::unordered_set<std::string>& enclosing) {
  for (auto& s : body) {
    if (!IsFrame(*s) || s->bodies.empty()) {
      for (auto& b : s->bodies) Annotate(b, enclosing);
      continue;
    }
    // A store in a nested frame aliases a name an enclosing frame knows; only unknown
    // names start out undefined.
    for (auto& name : FrameLocals(s->bodies[0])) {
      if (!enclosing.count(name)) s->frame_locals.push_back(name);
    }
    std::unordered_set<std::string> inner = enclosing;
    inner.insert(s->targets.begin(), s->targets.end());
    inner.insert(s->params.begin(), s->params.end());
    CollectDirectNames(s->bodies[0], inner);
    Annotate(s->bodies[0], inner);
    for (size_t b = 1; b < s->bodies.size(); ++b) Annotate(s->bodies[b], enclosing);
  }
}

}  // namespace

void AnnotateFrameLocals(Body& root) {
  std::unordered_set<std::string> names;
  CollectDirectNames(root, names);
  Annotate(root, names);
}

std::string Evaluator::Render(const Body& root,
                              const std::vector<std::pair<std::string, Value>>& vars) {
  auto globals = std::make_shared<Scope>();
  for (auto& [name, value] : BuiltinGlobals()) globals->vars[name] = value;
  auto context = std::make_shared<Scope>();
  context->parent = globals;
  for (const auto& [name, value] : vars) context->vars[name] = value;
  DeclareLocals(FrameLocals(root), *context);
  std::string out;
  Exec(root, context, out);
  return out;
}

Evaluator::Flow Evaluator::Exec(const Body& body, const std::shared_ptr<Scope>& scope,
                                std::string& out) {
  DepthGuard guard(this);
  for (const auto& stmt : body) {
    Flow flow = ExecStmt(*stmt, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::ExecStmt(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                    std::string& out) {
  try {
    return ExecStmtUnlocated(s, scope, out);
  } catch (JinjaError& e) {
    // Runtime errors name the innermost statement's line; raise_exception keeps the
    // template's own message untouched.
    if (!e.from_template && !e.located) {
      e.message = "line " + std::to_string(s.line) + ": " + e.message;
      e.located = true;
    }
    throw;
  }
}

Evaluator::Flow Evaluator::ExecStmtUnlocated(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                             std::string& out) {
  Tick();
  Flow flow = Flow::kNormal;
  switch (s.kind) {
    case StmtKind::kText:
      Append(out, s.text);
      break;
    case StmtKind::kOutput:
      Append(out, Eval(*s.expr, scope).Str());
      break;
    case StmtKind::kIf:
      ExecIf(s, scope, out, &flow);
      break;
    case StmtKind::kFor:
      ExecFor(s, scope, out);
      break;
    case StmtKind::kSet:
      ExecSet(s, scope);
      break;
    case StmtKind::kSetBlock: {
      Value text = Value::String(Capture(s.bodies[0], scope));
      if (s.cond) text = EvalFilter(*s.cond, scope, &text);
      scope->vars[s.targets[0]] = text;
      break;
    }
    case StmtKind::kMacro:
      scope->vars[s.text] = MakeMacro(s, scope, &s.bodies[0]);
      break;
    case StmtKind::kCallBlock: {
      auto caller = MakeMacro(s, scope, &s.bodies[0]);
      const Expr& call = *s.expr;
      Value fn = Eval(*call.args[0], scope);
      CallArgs args = EvalArgs(call, 1, scope);
      args.named.emplace_back("caller", caller);
      Append(out, Call(fn, args).Str());
      break;
    }
    case StmtKind::kFilterBlock: {
      Value text = Value::String(Capture(s.bodies[0], scope));
      Append(out, EvalFilter(*s.expr, scope, &text).Str());
      break;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      DeclareLocals(s.frame_locals, *inner);
      for (size_t i = 0; i < s.params.size(); ++i) {
        inner->vars[s.params[i]] = Eval(*s.defaults[i], scope);
      }
      flow = Exec(s.bodies[0], inner, out);
      break;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kDo:
      Eval(*s.expr, scope);
      break;
    case StmtKind::kGeneration:
      flow = Exec(s.bodies[0], scope, out);
      break;
  }
  return flow;
}

void Evaluator::ExecIf(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out,
                       Flow* flow) {
  for (size_t i = 0; i < s.conds.size(); ++i) {
    if (Eval(*s.conds[i], scope).Truthy()) {
      *flow = Exec(s.bodies[i], scope, out);
      return;
    }
  }
  if (s.bodies.size() > s.conds.size()) *flow = Exec(s.bodies.back(), scope, out);
}

namespace {

Value MakeLoop(const ValueList& items, size_t i) {
  auto loop = std::make_shared<ValueDict>();
  int64_t n = static_cast<int64_t>(items.size());
  int64_t idx = static_cast<int64_t>(i);
  loop->items = {
      {"index", Value::Int(idx + 1)},
      {"index0", Value::Int(idx)},
      {"revindex", Value::Int(n - idx)},
      {"revindex0", Value::Int(n - idx - 1)},
      {"first", Value::Bool(i == 0)},
      {"last", Value::Bool(idx == n - 1)},
      {"length", Value::Int(n)},
      {"depth", Value::Int(1)},
      {"depth0", Value::Int(0)},
      {"previtem", i > 0 ? items[i - 1] : Value::Undefined("loop.previtem")},
      {"nextitem", idx + 1 < n ? items[i + 1] : Value::Undefined("loop.nextitem")},
  };
  loop->Set("cycle", Value::Function("loop.cycle", [idx](CallArgs& args) {
              if (args.positional.empty()) Fail("no items for cycling given");
              return args.positional[idx % args.positional.size()];
            }));
  return Value::Dict(std::move(loop));
}

}  // namespace

void Evaluator::ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  Value iterable = Eval(*s.expr, scope);
  ValueList all = iterable.Iterate();
  auto inner = std::make_shared<Scope>();
  inner->parent = scope;
  ValueList items;
  if (s.cond) {
    // `for x in xs if cond`: the filter sees the loop target, and loop.* counts survivors.
    for (const Value& item : all) {
      Tick();
      Assign(s.targets, item, *inner);
      if (Eval(*s.cond, inner).Truthy()) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  if (items.empty()) {
    if (s.bodies.size() > 1) Exec(s.bodies[1], scope, out);
    return;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Tick();
    // Like jinja2, each iteration starts from a fresh scope: a variable set in one
    // iteration is not visible in the next.
    inner = std::make_shared<Scope>();
    inner->parent = scope;
    DeclareLocals(s.frame_locals, *inner);
    if (s.uses_loop) inner->vars["loop"] = MakeLoop(items, i);
    Assign(s.targets, items[i], *inner);
    if (Exec(s.bodies[0], inner, out) == Flow::kBreak) break;
  }
}

void Evaluator::Assign(const std::vector<std::string>& targets, const Value& value, Scope& scope) {
  if (targets.size() == 1) {
    scope.vars[targets[0]] = value;
    return;
  }
  ValueList parts = value.Iterate();
  if (parts.size() != targets.size()) {
    Fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
         std::to_string(targets.size()) + " names");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = parts[i];
}

void Evaluator::ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value value = Eval(*s.expr, scope);
  if (s.text.empty()) {
    Assign(s.targets, value, *scope);
    return;
  }
  const Value* ns = scope->Lookup(s.targets[0]);
  if (!ns || !ns->IsDict() || !ns->AsDict().is_namespace) {
    Fail("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
  }
  if (value.holds_namespace()) Fail("a namespace cannot hold another namespace");
  ns->AsDict().Set(s.text, value);
}

std::string Evaluator::Capture(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string text;
  Exec(body, scope, text);
  return text;
}

Value Evaluator::MakeMacro(const Stmt& s, const std::shared_ptr<Scope>& scope, const Body* body) {
  const Stmt* stmt = &s;
  std::weak_ptr<Scope> weak = scope;
  std::string name = s.kind == StmtKind::kMacro ? s.text : "caller";
  // The macro holds its defining scope weakly: a macro stored in that scope must not keep
  // the scope alive (a reference cycle); renders never outlive their scopes anyway.
  return Value::Function(name, [this, stmt, body, weak](CallArgs& args) {
    std::shared_ptr<Scope> closure = weak.lock();
    if (!closure) Fail("macro called after its scope ended");
    return CallMacro(*stmt, *body, closure, args);
  });
}

Value Evaluator::CallMacro(const Stmt& s, const Body& body, const std::shared_ptr<Scope>& closure,
                           CallArgs& args) {
  DepthGuard guard(this);
  auto frame = std::make_shared<Scope>();
  frame->parent = closure;
  DeclareLocals(s.frame_locals, *frame);
  auto kwargs = std::make_shared<ValueDict>();
  for (auto& [k, v] : args.named) {
    bool is_param = std::find(s.params.begin(), s.params.end(), k) != s.params.end();
    if (is_param || k == "caller") {
      frame->vars[k] = v;
    } else {
      kwargs->Set(k, v);
    }
  }
  ValueList varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < s.params.size()) {
      frame->vars[s.params[i]] = args.positional[i];
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (frame->vars.count(s.params[i])) continue;
    frame->vars[s.params[i]] =
        s.defaults[i] ? Eval(*s.defaults[i], frame) : Value::Undefined(s.params[i]);
  }
  frame->vars["varargs"] = Value::Tuple(std::move(varargs));
  frame->vars["kwargs"] = Value::Dict(std::move(kwargs));
  return Value::String(Capture(body, frame));
}

}  // namespace shardlm::jinja
