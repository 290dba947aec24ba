// Jinja evaluator: expressions, lookup rules and operators (see jinja_eval.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "chat/jinja_builtins.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_strings.h"

namespace shardlm::jinja {

void FailUndefined(const Value& undefined) {
  const std::string& hint = undefined.UndefinedHint();
  Fail(hint.empty() ? "value is undefined" : hint + " is undefined");
}

namespace {

int64_t NormalizeIndex(int64_t index, int64_t size) { return index < 0 ? index + size : index; }

[[noreturn]] void FailOperands(const std::string& op, const Value& a, const Value& b) {
  if (a.IsUndefined()) FailUndefined(a);
  if (b.IsUndefined()) FailUndefined(b);
  if (op == "+" && a.IsString()) {
    Fail("can only concatenate str (not \"" + b.TypeName() + "\") to str");
  }
  Fail("unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() +
       "'");
}

Value Repeat(const Value& seq, int64_t times, size_t max_bytes) {
  if (times <= 0) {
    if (seq.IsString()) return Value::String("");
    return seq.IsTuple() ? Value::Tuple({}) : Value::List();
  }
  if (seq.IsString()) {
    if (seq.AsString().size() * static_cast<size_t>(times) > max_bytes) {
      Fail("string repetition exceeds the output limit");
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.AsString();
    return Value::String(std::move(out));
  }
  if (seq.AsList().size() * static_cast<size_t>(times) > max_bytes / 16) {
    Fail("list repetition exceeds the output limit");
  }
  ValueList out;
  for (int64_t i = 0; i < times; ++i) {
    out.insert(out.end(), seq.AsList().begin(), seq.AsList().end());
  }
  return seq.IsTuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value Arithmetic(const std::string& op, const Value& a, const Value& b) {
  bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
  if (op == "/") {
    if (b.AsDouble() == 0) Fail("division by zero");
    return Value::Float(a.AsDouble() / b.AsDouble());
  }
  if (op == "**") {
    if (ints && b.AsInt() >= 0) {
      double approx = std::pow(a.AsDouble(), b.AsDouble());
      if (std::fabs(approx) > 9.0e18) Fail("integer power too large");
      int64_t r = 1;
      for (int64_t i = 0; i < b.AsInt(); ++i) r *= a.AsInt();
      return Value::Int(r);
    }
    return Value::Float(std::pow(a.AsDouble(), b.AsDouble()));
  }
  if (ints) {
    int64_t x = a.AsInt();
    int64_t y = b.AsInt();
    int64_t r = 0;
    if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value::Int(r);
    if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value::Int(r);
    if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value::Int(r);
    if (op == "//" || op == "%") {
      if (y == 0) Fail("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) Fail("integer overflow");
      int64_t q = FloorDiv(x, y);
      return Value::Int(op == "//" ? q : x - q * y);
    }
    Fail("integer overflow in '" + op + "'");
  }
  double x = a.AsDouble();
  double y = b.AsDouble();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (y == 0) Fail("float division by zero");
  // CPython's float_divmod: fmod-based, so 1.0 % 0.1 == 0.09999999999999995.
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv = std::copysign(0.0, x / y);
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  }
  return Value::Float(op == "//" ? floordiv : mod);
}

}  // namespace

Value BinaryOp(const std::string& op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == "~") {
    std::string s = a.Str() + b.Str();
    if (s.size() > max_bytes) Fail("string exceeds the output limit");
    return Value::String(std::move(s));
  }
  if (a.IsNumber() && b.IsNumber()) return Arithmetic(op, a, b);
  if (op == "%" && a.IsString()) {
    // Python treats a non-tuple with __getitem__ (list, dict, Undefined) as a mapping:
    // unused, it raises nothing.
    bool mapping_like = !b.IsTuple() && (b.IsList() || b.IsDict() || b.IsUndefined());
    ValueList args = b.IsTuple() ? b.AsList() : ValueList{b};
    return Value::String(PercentFormat(a.AsString(), args, max_bytes, mapping_like));
  }
  if (op == "+" && a.IsString() && b.IsString()) {
    if (a.AsString().size() + b.AsString().size() > max_bytes) Fail("string too long");
    return Value::String(a.AsString() + b.AsString());
  }
  if (op == "+" && a.IsList() && b.IsList()) {
    ValueList out = a.AsList();
    out.insert(out.end(), b.AsList().begin(), b.AsList().end());
    return Value::List(std::move(out));
  }
  // bool is an int in Python: 'x' * True == 'x'.
  bool a_int = a.kind() == Value::Kind::kInt || a.kind() == Value::Kind::kBool;
  bool b_int = b.kind() == Value::Kind::kInt || b.kind() == Value::Kind::kBool;
  if (op == "*" && (a.IsString() || a.IsList()) && b_int) return Repeat(a, b.AsInt(), max_bytes);
  if (op == "*" && (b.IsString() || b.IsList()) && a_int) return Repeat(b, a.AsInt(), max_bytes);
  FailOperands(op, a, b);
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.IsString()) {
        Fail("'in <string>' requires string as left operand, not " + item.TypeName());
      }
      return container.AsString().find(item.AsString()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& e : container.AsList()) {
        if (Equals(e, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (!container.AsDict().is_namespace) {
        return item.IsString() && container.AsDict().Find(item.AsString()) != nullptr;
      }
      break;
    case Value::Kind::kUndefined:
      return false;
    default:
      break;
  }
  Fail("argument of type '" + container.TypeName() + "' is not iterable");
}

Value Evaluator::GetAttr(const Value& obj, const std::string& name) {
  if (obj.IsUndefined()) FailUndefined(obj);
  if (obj.IsDict() && obj.AsDict().is_namespace) {
    const Value* v = obj.AsDict().Find(name);
    return v ? *v : Value::Undefined("'Namespace' object has no attribute '" + name + "'");
  }
  Value method = GetMethod(obj, name);
  if (!method.IsUndefined()) return method;
  if (obj.IsDict()) {
    const Value* v = obj.AsDict().Find(name);
    if (v) return *v;
  }
  return Value::Undefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
}

Value Evaluator::GetItem(const Value& obj, const Value& key) {
  if (obj.IsUndefined()) FailUndefined(obj);
  if (obj.IsDict() && key.IsString()) {
    const Value* v = obj.AsDict().Find(key.AsString());
    if (v) return *v;
  }
  bool int_key = key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool;
  if (int_key && obj.IsList()) {
    int64_t size = static_cast<int64_t>(obj.AsList().size());
    int64_t i = NormalizeIndex(key.AsInt(), size);
    if (i >= 0 && i < size) return obj.AsList()[i];
  }
  if (int_key && obj.IsString()) {
    std::vector<size_t> offsets = Utf8Offsets(obj.AsString());
    int64_t size = static_cast<int64_t>(offsets.size()) - 1;
    int64_t i = NormalizeIndex(key.AsInt(), size);
    if (i >= 0 && i < size) {
      return Value::String(obj.AsString().substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
  }
  if (key.IsString()) {
    Value method = GetMethod(obj, key.AsString());
    if (!method.IsUndefined()) return method;
  }
  return Value::Undefined("'" + obj.TypeName() + " object' has no attribute '" + key.Str() + "'");
}

Value Evaluator::GetPath(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    cur = GetItem(cur, numeric ? Value::Int(std::stoll(part)) : Value::String(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value Evaluator::Call(const Value& fn, CallArgs& args) {
  if (fn.IsUndefined()) FailUndefined(fn);
  if (!fn.IsCallable()) Fail("'" + fn.TypeName() + "' object is not callable");
  DepthGuard guard(this);
  return fn.AsCallable().fn(args);
}

CallArgs Evaluator::EvalArgs(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i], scope));
  for (const auto& [k, v] : e.kwargs) args.named.emplace_back(k, Eval(*v, scope));
  return args;
}

Value Evaluator::Eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Tick();
  DepthGuard guard(this);
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName: {
      const Value* v = scope->Lookup(e.name);
      return v ? *v : Value::Undefined("'" + e.name + "'");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const auto& a : e.args) items.push_back(Eval(*a, scope));
      if (e.kind == ExprKind::kTuple) return Value::Tuple(std::move(items));
      return Value::List(std::move(items));
    }
    case ExprKind::kDict:
      return EvalDict(e, scope);
    case ExprKind::kGetAttr:
      return GetAttr(Eval(*e.args[0], scope), e.name);
    case ExprKind::kGetItem: {
      Value obj = Eval(*e.args[0], scope);
      return GetItem(obj, Eval(*e.args[1], scope));
    }
    case ExprKind::kSlice:
      return EvalSlice(e, scope);
    case ExprKind::kCall:
      return EvalCall(e, scope);
    case ExprKind::kFilter:
      return EvalFilter(e, scope, nullptr);
    case ExprKind::kTest: {
      Value value = Eval(*e.args[0], scope);
      CallArgs args = EvalArgs(e, 1, scope);
      return Value::Bool(RunTest(e.name, value, args) != e.negated);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos:
      return EvalUnary(e, scope);
    case ExprKind::kNot:
      return Value::Bool(!Eval(*e.args[0], scope).Truthy());
    case ExprKind::kAnd: {
      Value left = Eval(*e.args[0], scope);
      return left.Truthy() ? Eval(*e.args[1], scope) : left;
    }
    case ExprKind::kOr: {
      Value left = Eval(*e.args[0], scope);
      return left.Truthy() ? left : Eval(*e.args[1], scope);
    }
    case ExprKind::kBinary: {
      Value left = Eval(*e.args[0], scope);
      Value right = Eval(*e.args[1], scope);
      return BinaryOp(e.name, left, right, limits_.max_output_bytes);
    }
    case ExprKind::kCompare:
      return EvalCompare(e, scope);
    case ExprKind::kCondition:
      if (Eval(*e.args[0], scope).Truthy()) return Eval(*e.args[1], scope);
      return e.args[2] ? Eval(*e.args[2], scope) : Value::Undefined("conditional expression");
  }
  return Value();
}

Value Evaluator::EvalDict(const Expr& e, const std::shared_ptr<Scope>& scope) {
  auto dict = std::make_shared<ValueDict>();
  for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
    Value key = Eval(*e.args[i], scope);
    dict->Set(key.Str(), Eval(*e.args[i + 1], scope));
  }
  return Value::Dict(std::move(dict));
}

Value Evaluator::EvalUnary(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value v = Eval(*e.args[0], scope);
  bool neg = e.kind == ExprKind::kNeg;
  if (v.IsUndefined()) FailUndefined(v);
  if (!v.IsNumber()) {
    Fail(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + v.TypeName() +
         "'");
  }
  if (v.kind() == Value::Kind::kFloat) return neg ? Value::Float(-v.AsDouble()) : v;
  if (!neg) return Value::Int(v.AsInt());
  if (v.AsInt() == std::numeric_limits<int64_t>::min()) Fail("integer overflow");
  return Value::Int(-v.AsInt());
}

Value Evaluator::EvalCall(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value fn = Eval(*e.args[0], scope);
  CallArgs args = EvalArgs(e, 1, scope);
  return Call(fn, args);
}

Value Evaluator::EvalFilter(const Expr& e, const std::shared_ptr<Scope>& scope,
                            const Value* input) {
  // A filter chain over null (block filters) takes `input` at its innermost link.
  Value value;
  if (!e.args[0]) {
    if (input) value = *input;
  } else if (e.args[0]->kind == ExprKind::kFilter) {
    value = EvalFilter(*e.args[0], scope, input);
  } else {
    value = Eval(*e.args[0], scope);
  }
  CallArgs args = EvalArgs(e, 1, scope);
  return RunFilter(e.name, value, args);
}

Value Evaluator::EvalCompare(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value left = Eval(*e.args[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.args[i + 1], scope);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") {
      ok = Equals(left, right);
    } else if (op == "!=") {
      ok = !Equals(left, right);
    } else if (op == "in" || op == "notin") {
      ok = Contains(right, left) == (op == "in");
    } else {
      if (left.IsUndefined()) FailUndefined(left);
      if (right.IsUndefined()) FailUndefined(right);
      if (op == "<")
        ok = Less(left, right);
      else if (op == ">")
        ok = Less(right, left);
      else if (op == "<=")
        ok = !Less(right, left);
      else
        ok = !Less(left, right);
    }
    if (!ok) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

namespace {

// Python slice bounds for a sequence of `size` items.
std::vector<int64_t> SliceIndices(const Value& start, const Value& stop, const Value& step,
                                  int64_t size) {
  auto as_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.IsUndefined() || v.IsNone()) return std::nullopt;
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
      Fail(std::string("slice ") + what + " must be an integer or None");
    }
    return v.AsInt();
  };
  int64_t st = as_int(step, "step").value_or(1);
  if (st == 0) Fail("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v < 0 ? *v + size : *v;
    if (st > 0) return std::clamp<int64_t>(i, 0, size);
    return std::clamp<int64_t>(i, -1, size - 1);
  };
  int64_t b = clamp(as_int(start, "start"), st > 0 ? 0 : size - 1);
  int64_t e = clamp(as_int(stop, "stop"), st > 0 ? size : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  return idx;
}

}  // namespace

Value Evaluator::EvalSlice(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value obj = Eval(*e.args[0], scope);
  Value bounds[3];
  for (int k = 0; k < 3; ++k) {
    if (e.args[k + 1]) bounds[k] = Eval(*e.args[k + 1], scope);
  }
  if (obj.IsUndefined()) FailUndefined(obj);
  if (obj.IsList()) {
    const ValueList& items = obj.AsList();
    ValueList out;
    for (int64_t i : SliceIndices(bounds[0], bounds[1], bounds[2], items.size())) {
      out.push_back(items[i]);
    }
    return Value::List(std::move(out));
  }
  if (obj.IsString()) {
    std::vector<std::string> chars = Utf8Chars(obj.AsString());
    std::string out;
    for (int64_t i : SliceIndices(bounds[0], bounds[1], bounds[2], chars.size())) out += chars[i];
    return Value::String(std::move(out));
  }
  Fail("'" + obj.TypeName() + "' object is not subscriptable");
}

}  // namespace shardlm::jinja
