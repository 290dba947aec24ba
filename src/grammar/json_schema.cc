// The schema compiler: one pass over a schema document that turns each subschema into rules
// over JsonRules (see json_schema.h for the subset).
#include "grammar/json_schema.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/check.h"

namespace shardlm::grammar {
namespace {

// Keywords whose meaning the grammar cannot (or does not yet) enforce: ignoring them would
// let the output fail validation, so a schema that has them is refused.
constexpr const char* kRefusedKeywords[] = {
    "pattern",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "unevaluatedProperties",
    "$dynamicRef",
    "$recursiveRef",
};

// Keywords that constrain the value (anything else is an annotation).
constexpr const char* kConstraintKeywords[] = {
    "type",      "properties", "required",    "additionalProperties",
    "items",     "minItems",   "maxItems",    "minLength",
    "maxLength", "enum",       "const",       "anyOf",
    "allOf",     "$ref",       "uniqueItems",
};

constexpr const char* kTypeNames[] = {"object",  "array",   "string", "number",
                                      "integer", "boolean", "null"};

// A JSON pointer token: '~' → "~0", '/' → "~1".
std::string PointerToken(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

bool MatchesType(const Json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") return value.is_number_integer();
  if (type == "boolean") return value.is_boolean();
  return value.is_null();
}

class SchemaCompiler {
 public:
  SchemaCompiler(JsonRules& rules, const Json& document) : rules_(rules), document_(document) {}

  Result<RuleId> Compile(const Json& schema, const std::string& path, int depth);

 private:
  GrammarBuilder& b() { return rules_.builder(); }
  Symbol Ws() { return GrammarBuilder::Ref(rules_.Whitespace()); }
  Status Refuse(const std::string& path, const std::string& what) const {
    return InvalidArgument("{} at {} is not supported", what, path);
  }
  Status CheckKeywords(const Json& schema, const std::string& path) const;
  Result<std::vector<std::string>> Types(const Json& schema, const std::string& path) const;
  Result<RuleId> CompileRef(const std::string& ref, const std::string& path, int depth);
  Result<RuleId> CompileAnyOf(const Json& schema, const std::string& path, int depth);
  Result<RuleId> CompileLiterals(const Json& values, const std::vector<std::string>& types,
                                 const std::string& path);
  Result<RuleId> CompileType(const Json& schema, const std::string& type, const std::string& path,
                             int depth);
  Result<RuleId> CompileObject(const Json& schema, const std::string& path, int depth);
  Result<RuleId> CompileMap(const Json& additional, const std::string& path, int depth);
  Result<RuleId> CompileArray(const Json& schema, const std::string& path, int depth);
  Result<RuleId> CompileString(const Json& schema, const std::string& path);
  Result<RuleId> CompileInteger(const Json& schema, const std::string& path);
  // A non-negative integer keyword, or `fallback` when absent.
  Result<int> Count(const Json& schema, const char* keyword, const std::string& path,
                    int fallback) const;
  RuleId EmptyRule();

  JsonRules& rules_;
  const Json& document_;
  std::map<std::pair<std::string, int>, RuleId> refs_;  // (ref, depth) → its rule
};

Status SchemaCompiler::CheckKeywords(const Json& schema, const std::string& path) const {
  for (const char* keyword : kRefusedKeywords) {
    if (schema.contains(keyword)) return Refuse(path, fmt::format("'{}'", keyword));
  }
  const bool bounded = schema.contains("minimum") || schema.contains("maximum");
  if (bounded && (schema.contains("enum") || schema.contains("const"))) {
    return Refuse(path, "'minimum' or 'maximum' beside 'enum' or 'const'");
  }
  auto unique = schema.find("uniqueItems");
  if (unique != schema.end() && !(unique->is_boolean() && !unique->get<bool>())) {
    return Refuse(path, "'uniqueItems' (only false)");
  }
  int constraints = 0;
  for (const char* keyword : kConstraintKeywords) constraints += schema.contains(keyword);
  const bool has_ref = schema.contains("$ref");
  const bool has_any = schema.contains("anyOf");
  const bool has_all = schema.contains("allOf");
  if ((has_ref || has_any || has_all) && constraints > 1) {
    return Refuse(path, "'$ref', 'anyOf' or 'allOf' beside other constraining keywords");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> SchemaCompiler::Types(const Json& schema,
                                                       const std::string& path) const {
  std::vector<std::string> types;
  auto type = schema.find("type");
  if (type != schema.end()) {
    const Json list = type->is_array() ? *type : Json::array({*type});
    for (const Json& t : list) {
      const bool known = t.is_string() && std::find(std::begin(kTypeNames), std::end(kTypeNames),
                                                    t.get<std::string>()) != std::end(kTypeNames);
      if (!known) {
        return InvalidArgument("'type' at {} must name JSON types ({}), got {}", path,
                               fmt::join(kTypeNames, ", "), t.dump());
      }
      if (std::find(types.begin(), types.end(), t.get<std::string>()) == types.end()) {
        types.push_back(t.get<std::string>());
      }
    }
    if (types.empty()) return InvalidArgument("'type' at {} is an empty list", path);
    return types;
  }
  for (const char* k : {"properties", "required", "additionalProperties"}) {
    if (schema.contains(k)) types = {"object"};
  }
  for (const char* k : {"items", "minItems", "maxItems"}) {
    if (schema.contains(k)) types.push_back("array");
  }
  for (const char* k : {"minLength", "maxLength"}) {
    if (schema.contains(k) && std::find(types.begin(), types.end(), "string") == types.end()) {
      types.push_back("string");
    }
  }
  if (types.empty()) types.assign(std::begin(kTypeNames), std::end(kTypeNames));
  return types;
}

Result<RuleId> SchemaCompiler::Compile(const Json& schema, const std::string& path, int depth) {
  if (b().too_big()) {
    return InvalidArgument("the schema is too large: more than {} grammar symbols at {}",
                           kMaxGrammarSymbols, path);
  }
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return rules_.AnyValue(depth);
    return InvalidArgument("the schema at {} is false: no value is valid", path);
  }
  if (!schema.is_object()) {
    return InvalidArgument("the schema at {} must be an object or a boolean", path);
  }
  SHARDLM_TRY(CheckKeywords(schema, path));
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    if (!ref->is_string()) return InvalidArgument("'$ref' at {} must be a string", path);
    return CompileRef(ref->get<std::string>(), path, depth);
  }
  if (auto all = schema.find("allOf"); all != schema.end()) {
    if (!all->is_array() || all->size() != 1) return Refuse(path, "'allOf' of several schemas");
    return Compile((*all)[0], path + "/allOf/0", depth);
  }
  if (schema.contains("anyOf")) return CompileAnyOf(schema, path, depth);
  SHARDLM_ASSIGN_OR_RETURN(std::vector<std::string> types, Types(schema, path));
  if (auto c = schema.find("const"); c != schema.end()) {
    return CompileLiterals(Json::array({*c}), types, path + "/const");
  }
  if (auto e = schema.find("enum"); e != schema.end()) {
    if (!e->is_array()) return InvalidArgument("'enum' at {} must be an array", path);
    return CompileLiterals(*e, types, path + "/enum");
  }
  if (types.size() == 1) return CompileType(schema, types[0], path, depth);
  const RuleId rule = b().AddRule("types");
  for (const std::string& type : types) {
    SHARDLM_ASSIGN_OR_RETURN(RuleId one, CompileType(schema, type, path, depth));
    b().AddAlternative(rule, {GrammarBuilder::Ref(one)});
  }
  return rule;
}

Result<RuleId> SchemaCompiler::CompileRef(const std::string& ref, const std::string& path,
                                          int depth) {
  if (ref.empty() || ref[0] != '#') {
    return Refuse(path,
                  fmt::format("'$ref' to '{}' (only refs into the same document, \"#…\")", ref));
  }
  auto known = refs_.find({ref, depth});
  if (known != refs_.end()) return known->second;
  const Json* target = &document_;
  if (ref.size() > 1) {
    try {
      target = &document_.at(Json::json_pointer(ref.substr(1)));
    } catch (const Json::exception&) {
      return InvalidArgument("'$ref' at {} points at '{}', which is not in the schema", path, ref);
    }
  }
  // The rule exists before its body, so a recursive ref finds it.
  const RuleId rule = b().AddRule("ref " + ref);
  refs_[{ref, depth}] = rule;
  SHARDLM_ASSIGN_OR_RETURN(RuleId body, Compile(*target, ref, depth));
  b().AddAlternative(rule, {GrammarBuilder::Ref(body)});
  return rule;
}

Result<RuleId> SchemaCompiler::CompileAnyOf(const Json& schema, const std::string& path,
                                            int depth) {
  const Json& any = schema["anyOf"];
  if (!any.is_array() || any.empty()) {
    return InvalidArgument("'anyOf' at {} must be a non-empty array", path);
  }
  const RuleId rule = b().AddRule("any-of");
  for (size_t i = 0; i < any.size(); ++i) {
    SHARDLM_ASSIGN_OR_RETURN(RuleId one,
                             Compile(any[i], fmt::format("{}/anyOf/{}", path, i), depth));
    b().AddAlternative(rule, {GrammarBuilder::Ref(one)});
  }
  return rule;
}

Result<RuleId> SchemaCompiler::CompileLiterals(const Json& values,
                                               const std::vector<std::string>& types,
                                               const std::string& path) {
  const RuleId rule = b().AddRule("literal");
  std::set<std::string> seen;
  for (const Json& value : values) {
    const bool typed = std::any_of(types.begin(), types.end(),
                                   [&](const std::string& t) { return MatchesType(value, t); });
    if (!typed || !seen.insert(value.dump()).second) continue;
    b().AddAlternative(rule, rules_.Literal(value));
  }
  if (seen.empty()) {
    return InvalidArgument("the schema at {} allows no value: none of its values has its 'type'",
                           path);
  }
  return rule;
}

Result<RuleId> SchemaCompiler::CompileType(const Json& schema, const std::string& type,
                                           const std::string& path, int depth) {
  if (type == "object") return CompileObject(schema, path, depth);
  if (type == "array") return CompileArray(schema, path, depth);
  if (type == "string") return CompileString(schema, path);
  if (type == "number") {
    if (schema.contains("minimum")) return Refuse(path, "'minimum' of a number");
    if (schema.contains("maximum")) return Refuse(path, "'maximum' of a number");
    return rules_.Number();
  }
  if (type == "integer") return CompileInteger(schema, path);
  if (type == "boolean") return rules_.Boolean();
  return rules_.Null();
}

// minimum / maximum of an integer, as far as digits and sign can hold them: a range that
// contains 0 becomes "at most D digits" (D the most for which every D-digit value is within
// both bounds) and no minus sign when the minimum is 0. That is all clients send in practice
// (zod's int() bounds to the safe-integer range, nonnegative() to 0), and the output always
// validates; a range that excludes 0 is refused.
Result<RuleId> SchemaCompiler::CompileInteger(const Json& schema, const std::string& path) {
  double lo = -1e300;
  double hi = 1e300;
  for (const auto& [keyword, bound] : {std::pair{"minimum", &lo}, std::pair{"maximum", &hi}}) {
    auto it = schema.find(keyword);
    if (it == schema.end()) continue;
    if (!it->is_number()) return InvalidArgument("'{}' at {} must be a number", keyword, path);
    *bound = it->get<double>();
  }
  if (lo == -1e300 && hi == 1e300) return rules_.Integer();
  if (lo > 0 || hi < 0) return Refuse(path, "an integer range without 0");
  const double reach = lo < 0 ? std::min(-lo, hi) : hi;
  int digits = 0;
  double largest = 9;  // the largest value of digits + 1 digits
  while (digits < JsonRules::kMaxIntegerDigits && largest <= reach) {
    ++digits;
    largest = largest * 10 + 9;
  }
  return rules_.BoundedInteger(digits, /*negative=*/lo < 0);
}

Result<int> SchemaCompiler::Count(const Json& schema, const char* keyword, const std::string& path,
                                  int fallback) const {
  auto it = schema.find(keyword);
  if (it == schema.end()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return InvalidArgument("'{}' at {} must be a non-negative integer", keyword, path);
  }
  return int(std::min<int64_t>(it->get<int64_t>(), int64_t{1} << 30));
}

RuleId SchemaCompiler::EmptyRule() {
  if (std::optional<RuleId> known = b().Find("json:empty")) return *known;
  const RuleId rule = b().AddRule("empty");
  b().Remember("json:empty", rule);
  b().AddAlternative(rule, {});
  return rule;
}

// Members in the schema's order. first[i]: no member written yet, members i.. to go;
// rest[i]: some written (the next needs a comma). An optional member may be skipped.
Result<RuleId> SchemaCompiler::CompileObject(const Json& schema, const std::string& path,
                                             int depth) {
  const RuleId object = b().AddRule("object");
  if (depth >= rules_.options().max_depth) return object;  // no alternative: dropped
  const Json empty = Json::object();
  auto props_it = schema.find("properties");
  const Json& props = props_it == schema.end() ? empty : *props_it;
  if (!props.is_object()) return InvalidArgument("'properties' at {} must be an object", path);
  std::vector<std::string> required;
  if (auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) return InvalidArgument("'required' at {} must be an array", path);
    for (const Json& name : *it) {
      if (!name.is_string()) return InvalidArgument("'required' at {} must list strings", path);
      required.push_back(name.get<std::string>());
    }
  }
  auto add_it = schema.find("additionalProperties");
  const Json additional = add_it == schema.end() ? Json(true) : *add_it;
  const bool closed = additional.is_boolean() && !additional.get<bool>();
  if (props.empty() && required.empty()) {
    if (closed) {
      b().AddAlternative(object, {b().Byte('{'), Ws(), b().Byte('}')});
      return object;
    }
    const bool any = additional.is_boolean() || (additional.is_object() && additional.empty());
    if (any) return rules_.AnyObject(depth);
    return CompileMap(additional, path + "/additionalProperties", depth);
  }

  struct Member {
    std::string name;
    RuleId value;
    bool required;
  };
  std::vector<Member> members;
  for (const auto& [name, sub] : props.items()) {
    const bool req = std::find(required.begin(), required.end(), name) != required.end();
    SHARDLM_ASSIGN_OR_RETURN(RuleId value,
                             Compile(sub, path + "/properties/" + PointerToken(name), depth + 1));
    members.push_back({name, value, req});
  }
  for (const std::string& name : required) {
    if (props.contains(name)) continue;
    if (closed) {
      return InvalidArgument(
          "the schema at {} requires '{}', which is not in its properties while "
          "additionalProperties is false: no object is valid",
          path, name);
    }
    SHARDLM_ASSIGN_OR_RETURN(RuleId value,
                             Compile(additional, path + "/additionalProperties", depth + 1));
    members.push_back({name, value, true});
  }

  std::vector<std::string> names;
  for (const Member& member : members) names.push_back(member.name);
  std::vector<Member> ordered;
  for (size_t i : rules_.MemberOrder(names)) ordered.push_back(members[i]);
  members = std::move(ordered);
  const size_t n = members.size();
  std::vector<RuleId> first(n + 1), rest(n + 1);
  first[n] = rest[n] = EmptyRule();
  for (size_t i = n; i-- > 0;) {
    first[i] = b().AddRule("members");
    rest[i] = b().AddRule("more-members");
    Sequence kv = rules_.Key(members[i].name);
    kv.insert(kv.end(), {Ws(), b().Byte(':'), Ws(), GrammarBuilder::Ref(members[i].value)});
    Sequence with_first = kv;
    with_first.push_back(GrammarBuilder::Ref(rest[i + 1]));
    Sequence with_rest = {Ws(), b().Byte(','), Ws()};
    with_rest.insert(with_rest.end(), kv.begin(), kv.end());
    with_rest.push_back(GrammarBuilder::Ref(rest[i + 1]));
    b().AddAlternative(first[i], std::move(with_first));
    b().AddAlternative(rest[i], std::move(with_rest));
    if (!members[i].required) {
      b().AddAlternative(first[i], {GrammarBuilder::Ref(first[i + 1])});
      b().AddAlternative(rest[i], {GrammarBuilder::Ref(rest[i + 1])});
    }
  }
  b().AddAlternative(object,
                     {b().Byte('{'), Ws(), GrammarBuilder::Ref(first[0]), Ws(), b().Byte('}')});
  return object;
}

// An object of any string keys, each value valid against `additional`.
Result<RuleId> SchemaCompiler::CompileMap(const Json& additional, const std::string& path,
                                          int depth) {
  SHARDLM_ASSIGN_OR_RETURN(RuleId value, Compile(additional, path, depth + 1));
  const Sequence member = {GrammarBuilder::Ref(rules_.AnyKey()), Ws(), b().Byte(':'), Ws(),
                           GrammarBuilder::Ref(value)};
  const RuleId members = b().Repeat(member, {Ws(), b().Byte(','), Ws()}, 1, -1);
  const RuleId object = b().AddRule("map");
  b().AddAlternative(object, rules_.Wrap('{', members, '}'));
  return object;
}

Result<RuleId> SchemaCompiler::CompileArray(const Json& schema, const std::string& path,
                                            int depth) {
  const RuleId array = b().AddRule("array");
  SHARDLM_ASSIGN_OR_RETURN(int min, Count(schema, "minItems", path, 0));
  SHARDLM_ASSIGN_OR_RETURN(int max, Count(schema, "maxItems", path, -1));
  if (max >= 0 && max < min) {
    return InvalidArgument("the schema at {} has maxItems {} < minItems {}: no array is valid",
                           path, max, min);
  }
  if (min > kMaxExpandedCount) {
    return Refuse(path, fmt::format("'minItems' above {}", kMaxExpandedCount));
  }
  max = std::min(max, kMaxExpandedCount);
  if (depth >= rules_.options().max_depth) return array;  // no alternative: dropped
  auto items_it = schema.find("items");
  const Json items = items_it == schema.end() ? Json(true) : *items_it;
  if (items.is_array()) return Refuse(path, "'items' as a list of schemas");
  if (items.is_boolean() && !items.get<bool>()) max = 0;
  if (max == 0) {
    if (min > 0) return InvalidArgument("the schema at {} allows no item but needs {}", path, min);
    b().AddAlternative(array, {b().Byte('['), Ws(), b().Byte(']')});
    return array;
  }
  SHARDLM_ASSIGN_OR_RETURN(RuleId item, Compile(items, path + "/items", depth + 1));
  const RuleId list =
      b().Repeat({GrammarBuilder::Ref(item)}, {Ws(), b().Byte(','), Ws()}, std::max(min, 1), max);
  if (min == 0) {
    b().AddAlternative(array, rules_.Wrap('[', list, ']'));
  } else {
    b().AddAlternative(array,
                       {b().Byte('['), Ws(), GrammarBuilder::Ref(list), Ws(), b().Byte(']')});
  }
  return array;
}

Result<RuleId> SchemaCompiler::CompileString(const Json& schema, const std::string& path) {
  SHARDLM_ASSIGN_OR_RETURN(int min, Count(schema, "minLength", path, 0));
  SHARDLM_ASSIGN_OR_RETURN(int max, Count(schema, "maxLength", path, -1));
  if (max >= 0 && max < min) {
    return InvalidArgument("the schema at {} has maxLength {} < minLength {}: no string is valid",
                           path, max, min);
  }
  if (min > kMaxExpandedCount) {
    return Refuse(path, fmt::format("'minLength' above {}", kMaxExpandedCount));
  }
  return rules_.String(min, std::min(max, kMaxExpandedCount));
}

}  // namespace

Result<RuleId> AddJsonSchema(JsonRules& rules, const Json& schema, int depth) {
  SchemaCompiler compiler(rules, schema);
  return compiler.Compile(schema, "#", depth);
}

Result<Grammar> JsonSchemaGrammar(const Json& schema, const JsonGrammarOptions& options) {
  SHARDLM_TRY(options.Validate());
  GrammarBuilder builder;
  JsonRules rules(builder, options);
  SHARDLM_ASSIGN_OR_RETURN(RuleId root, AddJsonSchema(rules, schema));
  Result<Grammar> grammar = builder.Build(root);
  if (!grammar.ok()) {
    return InvalidArgument(
        "the schema cannot be matched: {} (a recursion with no way out, or "
        "one needing more than {} levels of nesting?)",
        grammar.status().message(), options.max_depth);
  }
  return grammar;
}

Result<Grammar> JsonObjectGrammar(const JsonGrammarOptions& options) {
  SHARDLM_TRY(options.Validate());
  GrammarBuilder builder;
  JsonRules rules(builder, options);
  return builder.Build(rules.AnyObject(0));
}

}  // namespace shardlm::grammar
