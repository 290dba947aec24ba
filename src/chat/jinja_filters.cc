// Jinja builtin filters (see jinja_builtins.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_strings.h"

namespace shardlm::jinja {

int64_t IntArg(const CallArgs& args, size_t index, const char* name, int64_t fallback) {
  Value v = args.Get(index, name);
  if (v.IsUndefined() || v.IsNone()) return fallback;
  if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
    Fail(std::string("argument '") + name + "' must be an integer, not " + v.TypeName());
  }
  return v.AsInt();
}

std::string StringArg(const CallArgs& args, size_t index, const char* name,
                      const std::string& fallback) {
  Value v = args.Get(index, name);
  if (v.IsUndefined()) return fallback;
  if (!v.IsString()) Fail(std::string("argument '") + name + "' must be a string");
  return v.AsString();
}

namespace {

bool BoolArg(const CallArgs& args, size_t index, const char* name, bool fallback) {
  Value v = args.Get(index, name);
  return v.IsUndefined() ? fallback : v.Truthy();
}

// Drops the first `n` positional arguments (filters that forward the rest to a test).
CallArgs Shift(const CallArgs& args, size_t n) {
  CallArgs out;
  for (size_t i = n; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  out.named = args.named;
  return out;
}

Value FLength(Evaluator&, const Value& v, const CallArgs&) { return Value::Int(v.Length()); }

Value FFirst(Evaluator&, const Value& v, const CallArgs&) {
  ValueList items = v.Iterate();
  return items.empty() ? Value::Undefined("first item of an empty sequence") : items.front();
}

Value FLast(Evaluator&, const Value& v, const CallArgs&) {
  ValueList items = v.Iterate();
  return items.empty() ? Value::Undefined("last item of an empty sequence") : items.back();
}

Value FJoin(Evaluator& ev, const Value& v, const CallArgs& args) {
  std::string sep = StringArg(args, 0, "d", "");
  std::string attribute = StringArg(args, 1, "attribute", "");
  std::string out;
  bool first = true;
  for (const Value& item : v.Iterate()) {
    if (!first) out += sep;
    first = false;
    out += (attribute.empty() ? item : ev.GetPath(item, attribute)).Str();
    ev.CheckSize(out.size());
  }
  return Value::String(std::move(out));
}

Value FTrim(Evaluator&, const Value& v, const CallArgs& args) {
  Value chars = args.Get(0, "chars");
  std::optional<std::string> set;
  if (chars.IsString()) set = chars.AsString();
  return Value::String(PyStrip(v.Str(), set, StripSide::kBoth));
}

Value FUpper(Evaluator&, const Value& v, const CallArgs&) {
  return Value::String(PyUpper(v.Str()));
}
Value FLower(Evaluator&, const Value& v, const CallArgs&) {
  return Value::String(PyLower(v.Str()));
}
Value FTitle(Evaluator&, const Value& v, const CallArgs&) {
  return Value::String(JinjaTitle(v.Str()));
}
Value FCapitalize(Evaluator&, const Value& v, const CallArgs&) {
  return Value::String(PyCapitalize(v.Str()));
}

Value FReplace(Evaluator& ev, const Value& v, const CallArgs& args) {
  std::string out = PyReplace(v.Str(), args.Get(0, "old").Str(), args.Get(1, "new").Str(),
                              IntArg(args, 2, "count", -1));
  ev.CheckSize(out.size());
  return Value::String(std::move(out));
}

Value FDefault(Evaluator&, const Value& v, const CallArgs& args) {
  bool boolean = BoolArg(args, 1, "boolean", false);
  if (v.IsUndefined() || (boolean && !v.Truthy()))
    return args.Get(0, "default_value", Value::String(""));
  return v;
}

Value FToJson(Evaluator& ev, const Value& v, const CallArgs& args) {
  JsonOptions options;
  options.max_bytes = ev.MaxOutputBytes();
  options.ensure_ascii = BoolArg(args, 0, "ensure_ascii", false);
  Value indent = args.Get(1, "indent");
  if (indent.IsString()) {
    options.has_indent = true;
    options.indent = indent.AsString();
  } else if (indent.kind() == Value::Kind::kInt) {
    options.has_indent = true;
    options.indent = std::string(std::max<int64_t>(0, std::min<int64_t>(indent.AsInt(), 64)), ' ');
  }
  if (options.has_indent) options.item_separator = ",";
  Value separators = args.Get(2, "separators");
  if (separators.IsList() && separators.AsList().size() == 2) {
    options.item_separator = separators.AsList()[0].Str();
    options.key_separator = separators.AsList()[1].Str();
  }
  options.sort_keys = BoolArg(args, 3, "sort_keys", false);
  return Value::String(ToJson(v, options));
}

Value FItems(Evaluator&, const Value& v, const CallArgs&) {
  if (v.IsUndefined()) return Value::List();
  if (!v.IsMapping()) Fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, e] : v.AsDict().items) out.push_back(Value::Tuple({Value::String(k), e}));
  return Value::List(std::move(out));
}

Value FList(Evaluator&, const Value& v, const CallArgs&) { return Value::List(v.Iterate()); }
Value FString(Evaluator&, const Value& v, const CallArgs&) { return Value::String(v.Str()); }
// Markup(str(value)): a string from then on.
Value FSafe(Evaluator&, const Value& v, const CallArgs&) { return Value::String(v.Str()); }

Value FInt(Evaluator&, const Value& v, const CallArgs& args) {
  Value fallback = args.Get(0, "default", Value::Int(0));
  int base = static_cast<int>(IntArg(args, 1, "base", 10));
  if (v.IsUndefined()) FailUndefined(v);
  if (v.IsNumber()) return Value::Int(v.AsInt());
  if (!v.IsString() || base < 2 || base > 36) return fallback;
  std::string s = PyStrip(v.AsString(), std::nullopt, StripSide::kBoth);
  std::string digits;
  for (char c : s) {
    if (c != '_') digits += c;
  }
  char* end = nullptr;
  errno = 0;
  long long i = std::strtoll(digits.c_str(), &end, base);
  if (!digits.empty() && *end == '\0' && errno == 0) return Value::Int(i);
  double d = std::strtod(digits.c_str(), &end);
  if (!digits.empty() && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9e18) {
    return Value::Int(static_cast<int64_t>(d));
  }
  return fallback;
}

Value FFloat(Evaluator&, const Value& v, const CallArgs& args) {
  Value fallback = args.Get(0, "default", Value::Float(0.0));
  if (v.IsUndefined()) FailUndefined(v);
  if (v.IsNumber()) return Value::Float(v.AsDouble());
  if (!v.IsString()) return fallback;
  std::string s = PyStrip(v.AsString(), std::nullopt, StripSide::kBoth);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0' ? Value::Float(d) : fallback;
}

Value FAbs(Evaluator&, const Value& v, const CallArgs&) {
  if (v.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(v.AsDouble()));
  if (v.IsNumber()) return Value::Int(std::llabs(v.AsInt()));
  Fail("bad operand type for abs(): '" + v.TypeName() + "'");
}

Value FRound(Evaluator&, const Value& v, const CallArgs& args) {
  if (!v.IsNumber()) Fail("round() needs a number, not " + v.TypeName());
  if (v.kind() != Value::Kind::kFloat) return Value::Int(v.AsInt());  // Python: round(int) is int
  int64_t precision = std::clamp<int64_t>(IntArg(args, 0, "precision", 0), -20, 20);
  std::string method = StringArg(args, 1, "method", "common");
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.AsDouble() * scale;
  if (method == "ceil") {
    x = std::ceil(x);
  } else if (method == "floor") {
    x = std::floor(x);
  } else if (method == "common") {
    x = std::nearbyint(x);  // Python round(): ties to even
  } else {
    Fail("method must be common, ceil or floor");
  }
  return Value::Float(x / scale);
}

Value FMap(Evaluator& ev, const Value& v, const CallArgs& args) {
  ValueList out;
  Value attribute = args.Get(99, "attribute");
  if (attribute.IsString()) {
    Value fallback = args.Get(99, "default");
    for (const Value& item : v.Iterate()) {
      Value got = ev.GetPath(item, attribute.AsString());
      out.push_back(got.IsUndefined() && !fallback.IsUndefined() ? fallback : got);
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty()) return Value::List(v.Iterate());
  std::string filter = args.positional[0].Str();
  CallArgs rest = Shift(args, 1);
  for (const Value& item : v.Iterate()) out.push_back(ev.RunFilter(filter, item, rest));
  return Value::List(std::move(out));
}

// select/reject/selectattr/rejectattr share one body.
Value SelectImpl(Evaluator& ev, const Value& v, const CallArgs& args, bool by_attr, bool keep) {
  size_t shift = by_attr ? 1 : 0;
  std::string attribute = by_attr ? StringArg(args, 0, "attribute", "") : "";
  bool has_test = args.positional.size() > shift;
  std::string test = has_test ? args.positional[shift].Str() : "";
  CallArgs test_args = Shift(args, shift + 1);
  test_args.named.clear();
  ValueList out;
  for (const Value& item : v.Iterate()) {
    Value subject = by_attr ? ev.GetPath(item, attribute) : item;
    bool pass = has_test ? ev.RunTest(test, subject, test_args) : subject.Truthy();
    if (pass == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value FSelect(Evaluator& ev, const Value& v, const CallArgs& a) {
  return SelectImpl(ev, v, a, false, true);
}
Value FReject(Evaluator& ev, const Value& v, const CallArgs& a) {
  return SelectImpl(ev, v, a, false, false);
}
Value FSelectAttr(Evaluator& ev, const Value& v, const CallArgs& a) {
  return SelectImpl(ev, v, a, true, true);
}
Value FRejectAttr(Evaluator& ev, const Value& v, const CallArgs& a) {
  return SelectImpl(ev, v, a, true, false);
}

// The comparison key of sort/unique/min/max: attribute lookup, then case folding.
Value SortKey(Evaluator& ev, const Value& item, const std::string& attribute, bool case_sensitive) {
  Value key = attribute.empty() ? item : ev.GetPath(item, attribute);
  if (!case_sensitive && key.IsString()) return Value::String(PyLower(key.AsString()));
  return key;
}

Value FSort(Evaluator& ev, const Value& v, const CallArgs& args) {
  bool reverse = BoolArg(args, 0, "reverse", false);
  bool case_sensitive = BoolArg(args, 1, "case_sensitive", false);
  std::string attribute = StringArg(args, 2, "attribute", "");
  ValueList items = v.Iterate();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items)
    keyed.emplace_back(SortKey(ev, item, attribute, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? Less(b.first, a.first) : Less(a.first, b.first);
  });
  ValueList out;
  for (auto& [k, item] : keyed) out.push_back(item);
  return Value::List(std::move(out));
}

Value FUnique(Evaluator& ev, const Value& v, const CallArgs& args) {
  bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
  std::string attribute = StringArg(args, 1, "attribute", "");
  ValueList out;
  ValueList seen;
  for (const Value& item : v.Iterate()) {
    Value key = SortKey(ev, item, attribute, case_sensitive);
    if (Contains(Value::List(seen), key)) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value MinMax(Evaluator& ev, const Value& v, const CallArgs& args, bool want_max) {
  bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
  std::string attribute = StringArg(args, 1, "attribute", "");
  ValueList items = v.Iterate();
  if (items.empty()) return Value::Undefined("min/max of an empty sequence");
  size_t best = 0;
  Value best_key = SortKey(ev, items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = SortKey(ev, items[i], attribute, case_sensitive);
    if (want_max ? Less(best_key, key) : Less(key, best_key)) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Value FMin(Evaluator& ev, const Value& v, const CallArgs& a) { return MinMax(ev, v, a, false); }
Value FMax(Evaluator& ev, const Value& v, const CallArgs& a) { return MinMax(ev, v, a, true); }

Value FReverse(Evaluator&, const Value& v, const CallArgs&) {
  if (v.IsString()) {
    std::vector<std::string> chars = Utf8Chars(v.AsString());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value::String(std::move(out));
  }
  ValueList items = v.Iterate();
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

Value FSum(Evaluator& ev, const Value& v, const CallArgs& args) {
  std::string attribute = StringArg(args, 0, "attribute", "");
  Value total = args.Get(1, "start", Value::Int(0));
  for (const Value& item : v.Iterate()) {
    total = BinaryOp("+", total, attribute.empty() ? item : ev.GetPath(item, attribute), 1 << 30);
  }
  return total;
}

Value FIndent(Evaluator&, const Value& v, const CallArgs& args) {
  if (v.IsUndefined()) FailUndefined(v);
  if (!v.IsString()) Fail("indent expects a string, not " + v.TypeName());
  Value width = args.Get(0, "width", Value::Int(4));
  std::string pad = width.IsString() ? width.AsString()
                                     : std::string(std::clamp<int64_t>(width.AsInt(), 0, 256), ' ');
  bool first = BoolArg(args, 1, "first", false);
  bool blank = BoolArg(args, 2, "blank", false);
  std::vector<std::string> lines = PySplit(v.Str() + "\n", std::string("\n"), -1, false);
  lines.pop_back();  // the piece after the appended newline
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    bool indent = i > 0 && (blank || !lines[i].empty());
    out += (indent ? pad : "") + lines[i];
  }
  return Value::String(first ? pad + out : out);
}

Value FWordCount(Evaluator&, const Value& v, const CallArgs&) {
  int64_t count = 0;
  bool in_word = false;
  for (unsigned char c : v.Str()) {
    bool word = c >= 0x80 || std::isalnum(c) || c == '_';
    if (word && !in_word) ++count;
    in_word = word;
  }
  return Value::Int(count);
}

Value FEscape(Evaluator&, const Value& v, const CallArgs&) {
  std::string out;
  for (char c : v.Str()) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value::String(std::move(out));
}

Value FAttr(Evaluator& ev, const Value& v, const CallArgs& args) {
  return ev.GetAttr(v, args.Get(0, "name").Str());
}

Value FDictSort(Evaluator&, const Value& v, const CallArgs& args) {
  if (!v.IsMapping()) Fail("dictsort expects a mapping");
  bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
  bool by_value = StringArg(args, 1, "by", "key") == "value";
  bool reverse = BoolArg(args, 2, "reverse", false);
  auto items = v.AsDict().items;
  auto key = [&](const std::pair<std::string, Value>& e) {
    Value k = by_value ? e.second : Value::String(e.first);
    return !case_sensitive && k.IsString() ? Value::String(PyLower(k.AsString())) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
    return reverse ? Less(key(b), key(a)) : Less(key(a), key(b));
  });
  ValueList out;
  for (auto& [k, e] : items) out.push_back(Value::Tuple({Value::String(k), e}));
  return Value::List(std::move(out));
}

// Python's `fmt % args` for %s %r %d %i %f %e %g %x %X %c %% with flags/width/precision.
std::string PercentFormatImpl(const std::string& fmt, const ValueList& args, size_t max_bytes,
                              bool allow_unused) {
  std::string out;
  size_t next_arg = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    while (j < fmt.size() && std::strchr("-+ 0#", fmt[j])) ++j;
    while (j < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[j])) || fmt[j] == '.'))
      ++j;
    if (j >= fmt.size()) Fail("incomplete format");
    char conv = fmt[j];
    std::string spec = fmt.substr(i, j - i);
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next_arg >= args.size()) Fail("not enough arguments for format string");
    const Value& arg = args[next_arg++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string text = conv == 's' ? arg.Str() : arg.Repr();
      std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), "");
      if (spec.size() == 1) {
        out += text;
        continue;
      }
      std::string pad(std::strlen(buf) > text.size() ? std::strlen(buf) - text.size() : 0, ' ');
      out += spec.find('-') != std::string::npos ? text + pad : pad + text;
      continue;
    }
    if (!arg.IsNumber())
      Fail("%" + std::string(1, conv) + " format: a number is required, not " + arg.TypeName());
    if (std::strchr("dixXc", conv)) {
      std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(),
                    static_cast<long long>(arg.AsInt()));
    } else if (std::strchr("feEgG", conv) || conv == 'F') {
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), arg.AsDouble());
    } else {
      Fail(std::string("unsupported format character '") + conv + "'");
    }
    out += buf;
    if (out.size() > max_bytes) Fail("formatted string exceeds the output limit");
  }
  if (next_arg < args.size() && !allow_unused) {
    Fail("not all arguments converted during string formatting");
  }
  return out;
}

Value FFormat(Evaluator& ev, const Value& v, const CallArgs& args) {
  return Value::String(PercentFormat(v.Str(), args.positional, ev.MaxOutputBytes()));
}

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string, FilterFn>{
      {"length", FLength},
      {"count", FLength},
      {"first", FFirst},
      {"last", FLast},
      {"join", FJoin},
      {"trim", FTrim},
      {"upper", FUpper},
      {"lower", FLower},
      {"title", FTitle},
      {"capitalize", FCapitalize},
      {"replace", FReplace},
      {"default", FDefault},
      {"d", FDefault},
      {"tojson", FToJson},
      {"items", FItems},
      {"list", FList},
      {"string", FString},
      {"int", FInt},
      {"float", FFloat},
      {"abs", FAbs},
      {"round", FRound},
      {"map", FMap},
      {"select", FSelect},
      {"reject", FReject},
      {"selectattr", FSelectAttr},
      {"rejectattr", FRejectAttr},
      {"unique", FUnique},
      {"sort", FSort},
      {"reverse", FReverse},
      {"min", FMin},
      {"max", FMax},
      {"sum", FSum},
      {"safe", FSafe},
      {"indent", FIndent},
      {"wordcount", FWordCount},
      {"e", FEscape},
      {"escape", FEscape},
      {"forceescape", FEscape},
      {"attr", FAttr},
      {"dictsort", FDictSort},
      {"format", FFormat},
  };
  return *filters;
}

}  // namespace

std::string PercentFormat(const std::string& fmt, const ValueList& args, size_t max_bytes,
                          bool allow_unused) {
  return PercentFormatImpl(fmt, args, max_bytes, allow_unused);
}

FilterFn FindFilter(const std::string& name) {
  auto it = Filters().find(name);
  return it == Filters().end() ? nullptr : it->second;
}

Value Evaluator::RunFilter(const std::string& name, const Value& value, const CallArgs& args) {
  FilterFn fn = FindFilter(name);
  if (!fn) Fail("no filter named '" + name + "'");
  Tick();
  return fn(*this, value, args);
}

}  // namespace shardlm::jinja
