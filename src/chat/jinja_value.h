// jinja::Value: the dynamic value the Jinja engine computes with, and how it prints.
//
// Owns: the value model (undefined, none, bool, int, float, string, list, dict with
// insertion order, namespace, callable), Python-like truthiness, equality and ordering,
// Python str()/repr() printing, json.dumps-compatible serialization (transformers' tojson),
// and the internal error type the engine throws.
// Goals: byte-exact agreement with what Python + jinja2 print for the values chat templates
// handle. Lists and dicts have reference semantics like Python objects (copies share).
// Non-goals: big integers (int64 only), sets, lazy generators (map/select/... return lists),
// non-string dict keys (keys are strings; other keys are converted with Str()). Tuples are
// lists flagged to print as tuples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardlm::jinja {

// Thrown inside the engine only; Template::Parse/Render convert it to a Status.
// `from_template` marks raise_exception(msg): its message is the template's own text.
struct JinjaError {
  std::string message;
  bool from_template = false;
  bool located = false;  // message already starts with "line N: "
};
[[noreturn]] void Fail(std::string message);

class Value;
struct CallArgs;
using ValueList = std::vector<Value>;
using NativeFn = std::function<Value(CallArgs&)>;

struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // namespace(): the only object `{% set ns.x %}` may assign to

  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);
};

struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value Undefined(std::string hint = "") {
    Value v;
    v.s_ = std::move(hint);
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.i_ = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.i_ = i;
    return v;
  }
  static Value Float(double f) {
    Value v(Kind::kFloat);
    v.f_ = f;
    return v;
  }
  static Value String(std::string s) {
    Value v(Kind::kString);
    v.s_ = std::move(s);
    return v;
  }
  static Value List(ValueList items = {});
  // A list that prints like a Python tuple: (1, 2), (1,).
  static Value Tuple(ValueList items);
  static Value Dict(std::shared_ptr<ValueDict> dict = nullptr);
  static Value Function(std::string name, NativeFn fn);
  // Converts a JSON value; fails (JinjaError) past kMaxFromJsonDepth nested containers, so
  // the conversion and everything that walks the result later stay off deep recursion, and,
  // when `values_left` is given, once more values than it holds were made (it counts down).
  static Value FromJson(const nlohmann::ordered_json& j, size_t* values_left = nullptr);
  static constexpr int kMaxFromJsonDepth = 128;
  // Lists and dicts nest at most this deep: List, Tuple and Dict fail (JinjaError) beyond
  // it, so printing, comparing, serializing and destroying a value, which all recurse, stay
  // within a few hundred frames whatever a template builds. Namespaces are the only mutable
  // containers; one may not hold another (ExecSet, namespace()), so no chain of them can
  // grow a structure past the bound after its parts were built.
  static constexpr int kMaxNesting = 512;

  Kind kind() const { return kind_; }
  bool IsUndefined() const { return kind_ == Kind::kUndefined; }
  bool IsNone() const { return kind_ == Kind::kNone; }
  bool IsString() const { return kind_ == Kind::kString; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsTuple() const { return kind_ == Kind::kList && tuple_; }
  bool IsDict() const { return kind_ == Kind::kDict; }
  bool IsMapping() const { return IsDict() && !dict_->is_namespace; }
  bool IsNumber() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool IsCallable() const { return kind_ == Kind::kCallable; }
  // Containers inside this value, itself included (0 for a scalar).
  int nesting() const { return nesting_; }
  // Whether this value is, or contains, a namespace.
  bool holds_namespace() const { return holds_namespace_; }

  // Accessors; the caller checks the kind first.
  bool AsBool() const { return i_ != 0; }
  int64_t AsInt() const { return kind_ == Kind::kFloat ? static_cast<int64_t>(f_) : i_; }
  double AsDouble() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& AsString() const { return s_; }
  const std::string& UndefinedHint() const { return s_; }
  ValueList& AsList() const { return *list_; }
  ValueDict& AsDict() const { return *dict_; }
  const Callable& AsCallable() const { return *fn_; }

  bool Truthy() const;
  // Python len(): strings count code points. Fails for values without a length.
  int64_t Length() const;
  // Python iteration: list items, dict keys, string characters; undefined is empty.
  ValueList Iterate() const;

  std::string Str() const;   // Python str(); undefined prints ""
  std::string Repr() const;  // Python repr()
  std::string TypeName() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  // Sets nesting_ and holds_namespace_ from the children; fails past kMaxNesting.
  void MeasureChildren();

  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;  // kList printed as a tuple
  bool holds_namespace_ = false;
  uint16_t nesting_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;  // string value, or the undefined value's hint
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Callable> fn_;
};

// Python ==.
bool Equals(const Value& a, const Value& b);
// Python <; fails for unorderable types.
bool Less(const Value& a, const Value& b);
// Python repr() of a float ("1.0", "0.1", "1e+16").
std::string FormatFloat(double f);

struct JsonOptions {
  bool ensure_ascii = false;
  std::string indent;  // empty with has_indent=false: one line
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  // The output may not grow past this (checked as it is written): a template can ask for
  // any indent and separators, and tojson of a large value would multiply it.
  size_t max_bytes = SIZE_MAX;
};
// Python json.dumps(value, ...); fails for undefined or callables.
std::string ToJson(const Value& v, const JsonOptions& options);

// Call arguments: positional then keyword.
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> named;

  // The argument at `index` or named `name`, else `fallback`.
  Value Get(size_t index, std::string_view name, Value fallback = Value()) const;
};

}  // namespace shardlm::jinja
