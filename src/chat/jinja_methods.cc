// Jinja builtin tests, Python str/dict/list methods and globals (see jinja_builtins.h).
#include <cmath>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_strings.h"

namespace shardlm::jinja {
namespace {

// ---- tests ----
Value Arg0(const CallArgs& args) { return args.Get(0, "value"); }

bool TDefined(Evaluator&, const Value& v, const CallArgs&) { return !v.IsUndefined(); }
bool TUndefined(Evaluator&, const Value& v, const CallArgs&) { return v.IsUndefined(); }
bool TNone(Evaluator&, const Value& v, const CallArgs&) { return v.IsNone(); }
bool TBoolean(Evaluator&, const Value& v, const CallArgs&) {
  return v.kind() == Value::Kind::kBool;
}
bool TTrue(Evaluator&, const Value& v, const CallArgs&) {
  return v.kind() == Value::Kind::kBool && v.AsBool();
}
bool TFalse(Evaluator&, const Value& v, const CallArgs&) {
  return v.kind() == Value::Kind::kBool && !v.AsBool();
}
bool TInteger(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == Value::Kind::kInt; }
bool TFloat(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == Value::Kind::kFloat; }
bool TNumber(Evaluator&, const Value& v, const CallArgs&) { return v.IsNumber(); }
bool TString(Evaluator&, const Value& v, const CallArgs&) { return v.IsString(); }
bool TMapping(Evaluator&, const Value& v, const CallArgs&) { return v.IsMapping(); }
bool TIterable(Evaluator&, const Value& v, const CallArgs&) {
  return v.IsUndefined() || v.IsString() || v.IsList() || v.IsMapping();
}
bool TSequence(Evaluator& ev, const Value& v, const CallArgs& a) { return TIterable(ev, v, a); }
bool TCallable(Evaluator&, const Value& v, const CallArgs&) { return v.IsCallable(); }

// `value % divisor` with Python semantics (floats included), as jinja2's tests compute it.
Value Mod(const Value& v, const Value& divisor) { return BinaryOp("%", v, divisor, 0); }
bool TOdd(Evaluator&, const Value& v, const CallArgs&) {
  return Equals(Mod(v, Value::Int(2)), Value::Int(1));
}
bool TEven(Evaluator&, const Value& v, const CallArgs&) {
  return Equals(Mod(v, Value::Int(2)), Value::Int(0));
}
bool TDivisibleBy(Evaluator&, const Value& v, const CallArgs& args) {
  return Equals(Mod(v, Arg0(args)), Value::Int(0));
}
bool TEq(Evaluator&, const Value& v, const CallArgs& args) { return Equals(v, Arg0(args)); }
bool TNe(Evaluator&, const Value& v, const CallArgs& args) { return !Equals(v, Arg0(args)); }
bool TLt(Evaluator&, const Value& v, const CallArgs& args) { return Less(v, Arg0(args)); }
bool TGt(Evaluator&, const Value& v, const CallArgs& args) { return Less(Arg0(args), v); }
bool TLe(Evaluator&, const Value& v, const CallArgs& args) { return !Less(Arg0(args), v); }
bool TGe(Evaluator&, const Value& v, const CallArgs& args) { return !Less(v, Arg0(args)); }
bool TIn(Evaluator&, const Value& v, const CallArgs& args) { return Contains(Arg0(args), v); }
// str(value).islower() / .isupper(): some cased character, none of the other case.
bool TLower(Evaluator&, const Value& v, const CallArgs&) {
  std::string s = v.Str();
  return PyLower(s) == s && PyUpper(s) != s;
}
bool TUpper(Evaluator&, const Value& v, const CallArgs&) {
  std::string s = v.Str();
  return PyUpper(s) == s && PyLower(s) != s;
}
bool TSameAs(Evaluator&, const Value& v, const CallArgs& args) {
  Value other = Arg0(args);
  if (v.IsList() && other.IsList()) return &v.AsList() == &other.AsList();
  if (v.IsDict() && other.IsDict()) return &v.AsDict() == &other.AsDict();
  if (v.kind() != other.kind()) return false;
  return v.IsNone() || v.IsUndefined() || Equals(v, other);
}
bool TEscaped(Evaluator&, const Value&, const CallArgs&) { return false; }

const std::unordered_map<std::string, TestFn>& Tests() {
  static const auto* tests = new std::unordered_map<std::string, TestFn>{
      {"defined", TDefined},
      {"undefined", TUndefined},
      {"none", TNone},
      {"boolean", TBoolean},
      {"true", TTrue},
      {"false", TFalse},
      {"integer", TInteger},
      {"float", TFloat},
      {"number", TNumber},
      {"string", TString},
      {"mapping", TMapping},
      {"iterable", TIterable},
      {"sequence", TSequence},
      {"callable", TCallable},
      {"odd", TOdd},
      {"even", TEven},
      {"divisibleby", TDivisibleBy},
      {"eq", TEq},
      {"equalto", TEq},
      {"==", TEq},
      {"ne", TNe},
      {"!=", TNe},
      {"lt", TLt},
      {"lessthan", TLt},
      {"<", TLt},
      {"le", TLe},
      {"<=", TLe},
      {"gt", TGt},
      {"greaterthan", TGt},
      {">", TGt},
      {"ge", TGe},
      {">=", TGe},
      {"in", TIn},
      {"lower", TLower},
      {"upper", TUpper},
      {"sameas", TSameAs},
      {"escaped", TEscaped},
  };
  return *tests;
}

// ---- str methods ----
std::optional<std::string> OptString(const CallArgs& args, size_t index, const char* name) {
  Value v = args.Get(index, name);
  if (v.IsUndefined() || v.IsNone()) return std::nullopt;
  if (!v.IsString()) Fail(std::string("argument '") + name + "' must be str or None");
  return v.AsString();
}

bool AffixMatch(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.IsString()) Fail("startswith/endswith argument must be str or a tuple of str");
    const std::string& x = a.AsString();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.IsList()) {
    for (const Value& a : affix.AsList()) {
      if (one(a)) return true;
    }
    return false;
  }
  return one(affix);
}

Value SplitResult(const std::vector<std::string>& parts) {
  ValueList out;
  for (const auto& p : parts) out.push_back(Value::String(p));
  return Value::List(std::move(out));
}

int64_t CodePointIndex(const std::string& s, size_t byte_pos) {
  if (byte_pos == std::string::npos) return -1;
  return static_cast<int64_t>(Utf8Length(std::string_view(s).substr(0, byte_pos)));
}

// str.format with {} / {0} / {name} fields (no format specs).
std::string PyFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) Fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    Value v;
    if (field.empty()) {
      v = args.Get(auto_index++, "");
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      v = args.Get(std::stoul(field), "");
    } else {
      v = args.Get(SIZE_MAX, field);
    }
    if (v.IsUndefined()) Fail("format: missing argument for field '{" + field + "}'");
    out += v.Str();
    i = close;
  }
  return out;
}

Value StrMethod(const std::string& s, const std::string& name, const CallArgs& args) {
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "strip")
    return Value::String(PyStrip(s, OptString(args, 0, "chars"), StripSide::kBoth));
  if (name == "lstrip")
    return Value::String(PyStrip(s, OptString(args, 0, "chars"), StripSide::kLeft));
  if (name == "rstrip")
    return Value::String(PyStrip(s, OptString(args, 0, "chars"), StripSide::kRight));
  if (name == "split" || name == "rsplit") {
    std::optional<std::string> sep = OptString(args, 0, "sep");
    if (sep && sep->empty()) Fail("empty separator");
    return SplitResult(PySplit(s, sep, IntArg(args, 1, "maxsplit", -1), name == "rsplit"));
  }
  if (name == "splitlines") return SplitResult(PySplit(s, std::string("\n"), -1, false));
  if (name == "startswith") return Value::Bool(AffixMatch(s, args.Get(0, "prefix"), true));
  if (name == "endswith") return Value::Bool(AffixMatch(s, args.Get(0, "suffix"), false));
  if (name == "replace") {
    std::string out = PyReplace(s, StringArg(args, 0, "old", ""), StringArg(args, 1, "new", ""),
                                IntArg(args, 2, "count", -1));
    if (out.size() > (size_t{64} << 20)) Fail("string too long");
    return Value::String(std::move(out));
  }
  if (name == "find") return Value::Int(CodePointIndex(s, s.find(StringArg(args, 0, "sub", ""))));
  if (name == "rfind") return Value::Int(CodePointIndex(s, s.rfind(StringArg(args, 0, "sub", ""))));
  if (name == "count") {
    std::string sub = StringArg(args, 0, "sub", "");
    if (sub.empty()) return Value::Int(static_cast<int64_t>(Utf8Length(s)) + 1);
    return Value::Int(static_cast<int64_t>(PySplit(s, sub, -1, false).size()) - 1);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& item : args.Get(0, "iterable").Iterate()) {
      if (!item.IsString())
        Fail("sequence item: expected str instance, " + item.TypeName() + " found");
      if (!first) out += s;
      first = false;
      out += item.AsString();
    }
    return Value::String(std::move(out));
  }
  if (name == "format") return Value::String(PyFormat(s, args));
  auto all = [&](auto pred) {
    if (s.empty()) return Value::Bool(false);
    for (unsigned char c : s) {
      if (!pred(c)) return Value::Bool(false);
    }
    return Value::Bool(true);
  };
  if (name == "isdigit") return all([](unsigned char c) { return std::isdigit(c) != 0; });
  if (name == "isalpha") return all([](unsigned char c) { return std::isalpha(c) != 0; });
  if (name == "isalnum") return all([](unsigned char c) { return std::isalnum(c) != 0; });
  if (name == "isspace") return all([](unsigned char c) { return IsPySpace(c); });
  if (name == "islower") return Value::Bool(PyLower(s) == s && PyUpper(s) != s);
  if (name == "isupper") return Value::Bool(PyUpper(s) == s && PyLower(s) != s);
  Fail("'str' object has no attribute '" + name + "'");
}

bool IsStrMethod(const std::string& name) {
  static const char* kNames[] = {"upper",      "lower",    "title",   "capitalize", "strip",
                                 "lstrip",     "rstrip",   "split",   "rsplit",     "splitlines",
                                 "startswith", "endswith", "replace", "find",       "rfind",
                                 "count",      "join",     "format",  "isdigit",    "isalpha",
                                 "isalnum",    "isspace",  "islower", "isupper"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

Value DictMethod(const Value& obj, const std::string& name, const CallArgs& args) {
  const ValueDict& dict = obj.AsDict();
  ValueList out;
  if (name == "get") {
    const Value* v = dict.Find(args.Get(0, "key").Str());
    return v ? *v : args.Get(1, "default", Value::None());
  }
  for (const auto& [k, v] : dict.items) {
    if (name == "keys") out.push_back(Value::String(k));
    if (name == "values") out.push_back(v);
    if (name == "items") out.push_back(Value::Tuple({Value::String(k), v}));
  }
  return Value::List(std::move(out));
}

Value ListMethod(const Value& obj, const std::string& name, const CallArgs& args) {
  Value needle = args.Get(0, "value");
  int64_t count = 0;
  const ValueList& items = obj.AsList();
  for (size_t i = 0; i < items.size(); ++i) {
    if (!Equals(items[i], needle)) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") Fail(needle.Repr() + " is not in list");
  return Value::Int(count);
}

}  // namespace

Value GetMethod(const Value& obj, const std::string& name) {
  if (obj.IsString() && IsStrMethod(name)) {
    std::string s = obj.AsString();
    return Value::Function("str." + name,
                           [s, name](CallArgs& args) { return StrMethod(s, name, args); });
  }
  if (obj.IsMapping() && (name == "get" || name == "keys" || name == "values" || name == "items")) {
    return Value::Function("dict." + name,
                           [obj, name](CallArgs& args) { return DictMethod(obj, name, args); });
  }
  if (obj.IsList() && (name == "index" || name == "count")) {
    return Value::Function("list." + name,
                           [obj, name](CallArgs& args) { return ListMethod(obj, name, args); });
  }
  return Value::Undefined();
}

TestFn FindTest(const std::string& name) {
  auto it = Tests().find(name);
  return it == Tests().end() ? nullptr : it->second;
}

bool Evaluator::RunTest(const std::string& name, const Value& value, const CallArgs& args) {
  TestFn fn = FindTest(name);
  if (!fn) Fail("no test named '" + name + "'");
  Tick();
  return fn(*this, value, args);
}

namespace {

// jinja2's sandbox caps range() at this many items.
constexpr int64_t kMaxRange = 100000;

Value Range(CallArgs& args) {
  if (args.positional.empty() || args.positional.size() > 3) Fail("range expects 1 to 3 arguments");
  int64_t start = 0;
  int64_t stop = IntArg(args, 0, "stop", 0);
  int64_t step = 1;
  if (args.positional.size() >= 2) {
    start = stop;
    stop = IntArg(args, 1, "stop", 0);
  }
  if (args.positional.size() == 3) step = IntArg(args, 2, "step", 1);
  if (step == 0) Fail("range() arg 3 must not be zero");
  double n = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                       static_cast<double>(step));
  if (n > kMaxRange)
    Fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::Int(i));
  return Value::List(std::move(out));
}

Value MakeDict(CallArgs& args, bool is_namespace) {
  auto dict = std::make_shared<ValueDict>();
  dict->is_namespace = is_namespace;
  for (const Value& p : args.positional) {
    if (!p.IsDict()) Fail("namespace()/dict() positional argument must be a mapping");
    for (const auto& [k, v] : p.AsDict().items) dict->Set(k, v);
  }
  for (const auto& [k, v] : args.named) dict->Set(k, v);
  if (is_namespace) {
    for (const auto& [k, v] : dict->items) {
      if (v.holds_namespace()) Fail("a namespace cannot hold another namespace");
    }
  }
  return Value::Dict(std::move(dict));
}

}  // namespace

std::vector<std::pair<std::string, Value>> BuiltinGlobals() {
  return {
      {"range", Value::Function("range", Range)},
      {"namespace", Value::Function("namespace", [](CallArgs& a) { return MakeDict(a, true); })},
      {"dict", Value::Function("dict", [](CallArgs& a) { return MakeDict(a, false); })},
      {"raise_exception", Value::Function("raise_exception",
                                          [](CallArgs& a) -> Value {
                                            throw JinjaError{a.Get(0, "message").Str(), true};
                                          })},
  };
}

}  // namespace shardlm::jinja
