// jinja::Value: construction, truthiness, comparison and Python-compatible printing.
#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja_strings.h"

namespace shardlm::jinja {

void Fail(std::string message) { throw JinjaError{std::move(message), false}; }

const Value* ValueDict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

void Value::MeasureChildren() {
  int deepest = 0;
  auto add = [&](const Value& child) {
    deepest = std::max(deepest, int(child.nesting_));
    holds_namespace_ = holds_namespace_ || child.holds_namespace_;
  };
  if (kind_ == Kind::kList) {
    for (const Value& e : *list_) add(e);
  } else if (dict_->is_namespace) {
    holds_namespace_ = true;  // its members may change later: they are not counted
  } else {
    for (const auto& [k, e] : dict_->items) add(e);
  }
  if (deepest + 1 > kMaxNesting) {
    Fail("lists and dicts nest deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  nesting_ = static_cast<uint16_t>(deepest + 1);
}

Value Value::List(ValueList items) {
  Value v(Kind::kList);
  v.list_ = std::make_shared<ValueList>(std::move(items));
  v.MeasureChildren();
  return v;
}

Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::Dict(std::shared_ptr<ValueDict> dict) {
  Value v(Kind::kDict);
  v.dict_ = dict ? std::move(dict) : std::make_shared<ValueDict>();
  v.MeasureChildren();
  return v;
}

Value Value::Function(std::string name, NativeFn fn) {
  Value v(Kind::kCallable);
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

namespace {

Value FromJsonAt(const nlohmann::ordered_json& j, int depth, size_t* values_left) {
  using T = nlohmann::ordered_json::value_t;
  if (values_left) {
    if (*values_left == 0) Fail("the JSON values are more than a template may take");
    --*values_left;
  }
  switch (j.type()) {
    case T::null:
      return Value::None();
    case T::boolean:
      return Value::Bool(j.get<bool>());
    case T::number_integer:
      return Value::Int(j.get<int64_t>());
    case T::number_unsigned:
      return Value::Int(static_cast<int64_t>(j.get<uint64_t>()));
    case T::number_float:
      return Value::Float(j.get<double>());
    case T::string:
      return Value::String(j.get<std::string>());
    case T::array:
    case T::object:
      if (depth >= Value::kMaxFromJsonDepth) {
        Fail("a JSON value nests deeper than " + std::to_string(Value::kMaxFromJsonDepth) +
             " levels");
      }
      break;
    default:
      return Value::None();  // binary/discarded: never produced by a JSON parse
  }
  if (j.is_array()) {
    ValueList items;
    items.reserve(j.size());
    for (const auto& e : j) items.push_back(FromJsonAt(e, depth + 1, values_left));
    return Value::List(std::move(items));
  }
  auto dict = std::make_shared<ValueDict>();
  for (const auto& [k, e] : j.items())
    dict->items.emplace_back(k, FromJsonAt(e, depth + 1, values_left));
  return Value::Dict(std::move(dict));
}

}  // namespace

Value Value::FromJson(const nlohmann::ordered_json& j, size_t* values_left) {
  return FromJsonAt(j, 0, values_left);
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

int64_t Value::Length() const {
  switch (kind_) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(Utf8Length(s_));
    case Kind::kList:
      return static_cast<int64_t>(list_->size());
    case Kind::kDict:
      if (!dict_->is_namespace) return static_cast<int64_t>(dict_->items.size());
      break;
    default:
      break;
  }
  Fail("object of type '" + TypeName() + "' has no len()");
}

ValueList Value::Iterate() const {
  switch (kind_) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
      return *list_;
    case Kind::kDict: {
      if (dict_->is_namespace) break;
      ValueList keys;
      for (const auto& [k, v] : dict_->items) keys.push_back(String(k));
      return keys;
    }
    case Kind::kString: {
      ValueList chars;
      for (auto& c : Utf8Chars(s_)) chars.push_back(String(std::move(c)));
      return chars;
    }
    default:
      break;
  }
  Fail("'" + TypeName() + "' object is not iterable");
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string FormatFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  int exponent = std::stoi(sci.substr(e_pos + 1));
  bool negative = mantissa[0] == '-';
  std::string digits;
  for (char c : mantissa) {
    if (c >= '0' && c <= '9') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0) return out + "0." + std::string(-exponent - 1, '0') + digits;
  int int_digits = exponent + 1;
  if (static_cast<int>(digits.size()) <= int_digits) {
    return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

namespace {

std::string ReprString(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string ReprContainer(const Value& v) {
  std::string out;
  if (v.IsList()) {
    out = v.IsTuple() ? "(" : "[";
    bool first = true;
    for (const auto& e : v.AsList()) {
      if (!first) out += ", ";
      first = false;
      out += e.Repr();
    }
    if (v.IsTuple()) return out + (v.AsList().size() == 1 ? ",)" : ")");
    return out + "]";
  }
  if (v.AsDict().is_namespace) return "<Namespace>";
  out = "{";
  bool first = true;
  for (const auto& [k, e] : v.AsDict().items) {
    if (!first) out += ", ";
    first = false;
    out += ReprString(k) + ": " + e.Repr();
  }
  return out + "}";
}

}  // namespace

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return s_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return i_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return FormatFloat(f_);
    case Kind::kString:
      return ReprString(s_);
    case Kind::kList:
    case Kind::kDict:
      return ReprContainer(*this);
    case Kind::kCallable:
      return "<function " + fn_->name + ">";
  }
  return "";
}

bool Equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.IsNumber() && b.IsNumber()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.AsDouble() == b.AsDouble();
    return a.AsInt() == b.AsInt();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.AsString() == b.AsString();
    case K::kList: {
      if (a.IsTuple() != b.IsTuple()) return false;
      const auto& x = a.AsList();
      const auto& y = b.AsList();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      const auto& x = a.AsDict();
      const auto& y = b.AsDict();
      if (x.is_namespace || y.is_namespace) return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.Find(k);
        if (!other || !Equals(v, *other)) return false;
      }
      return true;
    }
    case K::kCallable:
      return &a.AsCallable() == &b.AsCallable();
    default:
      return false;
  }
}

bool Less(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) return a.AsDouble() < b.AsDouble();
  if (a.IsString() && b.IsString()) return a.AsString() < b.AsString();
  if (a.IsList() && b.IsList()) {
    const auto& x = a.AsList();
    const auto& y = b.AsList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Less(x[i], y[i])) return true;
      if (Less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  Fail("'<' not supported between instances of '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

Value CallArgs::Get(size_t index, std::string_view name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : named) {
    if (k == name) return v;
  }
  return fallback;
}

}  // namespace shardlm::jinja
