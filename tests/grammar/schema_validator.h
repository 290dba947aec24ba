// Test helpers for constrained output: a validator of JSON values against the schema subset
// the grammar compiler takes (written from the JSON Schema rules, not from the compiler, so
// the two check each other), and a generator of random schemas of that subset.
//
// Goals: small and obviously right; a reason string that says where a value fails.
// Non-goals: the keywords the compiler refuses, formats, remote refs.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace shardlm::grammar::testing {

using OJson = nlohmann::ordered_json;

// Code points of a UTF-8 string (its continuation bytes do not count).
inline size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

inline bool HasType(const OJson& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") return value.is_number_integer();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  return false;
}

// "" when `value` is valid against `schema` (refs resolve in `root`), else why not.
inline std::string Violation(const OJson& value, const OJson& schema, const OJson& root,
                             const std::string& at = "$") {
  if (schema.is_boolean()) return schema.get<bool>() ? "" : at + ": schema false";
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    const std::string target = ref->get<std::string>();
    const OJson& resolved = target == "#" ? root : root.at(OJson::json_pointer(target.substr(1)));
    return Violation(value, resolved, root, at);
  }
  if (auto all = schema.find("allOf"); all != schema.end()) {
    for (const OJson& sub : *all) {
      if (std::string why = Violation(value, sub, root, at); !why.empty()) return why;
    }
  }
  if (auto any = schema.find("anyOf"); any != schema.end()) {
    bool ok = false;
    for (const OJson& sub : *any) ok = ok || Violation(value, sub, root, at).empty();
    if (!ok) return at + ": matches no anyOf";
  }
  if (auto c = schema.find("const"); c != schema.end() && value != *c) return at + ": not const";
  if (auto e = schema.find("enum"); e != schema.end()) {
    if (std::find(e->begin(), e->end(), value) == e->end()) return at + ": not in enum";
  }
  if (auto t = schema.find("type"); t != schema.end()) {
    const OJson types = t->is_array() ? *t : OJson::array({*t});
    bool ok = false;
    for (const OJson& type : types) ok = ok || HasType(value, type.get<std::string>());
    if (!ok) return at + ": wrong type " + std::string(value.type_name());
  }
  if (value.is_string()) {
    const size_t n = CodePoints(value.get<std::string>());
    if (schema.contains("minLength") && n < schema["minLength"].get<size_t>()) {
      return at + ": too short";
    }
    if (schema.contains("maxLength") && n > schema["maxLength"].get<size_t>()) {
      return at + ": too long";
    }
  }
  if (value.is_array()) {
    if (schema.contains("minItems") && value.size() < schema["minItems"].get<size_t>()) {
      return at + ": too few items";
    }
    if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<size_t>()) {
      return at + ": too many items";
    }
    if (auto items = schema.find("items"); items != schema.end()) {
      for (size_t i = 0; i < value.size(); ++i) {
        std::string why = Violation(value[i], *items, root, at + "[" + std::to_string(i) + "]");
        if (!why.empty()) return why;
      }
    }
  }
  if (value.is_object()) {
    const OJson empty = OJson::object();
    const OJson& props = schema.contains("properties") ? schema["properties"] : empty;
    if (auto req = schema.find("required"); req != schema.end()) {
      for (const OJson& name : *req) {
        if (!value.contains(name.get<std::string>())) return at + ": missing " + name.dump();
      }
    }
    for (const auto& [key, member] : value.items()) {
      const std::string where = at + "." + key;
      if (props.contains(key)) {
        if (std::string why = Violation(member, props[key], root, where); !why.empty()) {
          return why;
        }
      } else if (auto add = schema.find("additionalProperties"); add != schema.end()) {
        if (std::string why = Violation(member, *add, root, where); !why.empty()) return why;
      }
    }
  }
  return "";
}

// A random schema of the supported subset; `defs` collects $defs the schema refers to.
// Strings and arrays are mostly bounded so that a random model's output ends soon.
class RandomSchemas {
 public:
  explicit RandomSchemas(uint64_t seed) : rng_(seed) {}

  // `unbounded`: also strings with no maxLength and objects of any members, which a random
  // model may extend forever unless it is nudged to close them.
  OJson Document(bool unbounded = false) {
    unbounded_ = unbounded;
    OJson defs = OJson::object();
    OJson schema = Object(0, defs, /*root=*/true);
    if (!defs.empty()) schema["$defs"] = defs;
    return schema;
  }

 private:
  int Pick(int n) { return int(rng_() % uint64_t(n)); }

  OJson Any(int depth, OJson& defs) {
    const int kinds = depth >= 3 ? 7 : unbounded_ ? 13 : 11;
    switch (Pick(kinds)) {
      case 11:
        return {{"type", "string"}};  // unbounded
      case 12:
        return Pick(2) ? OJson::object() : OJson{{"type", "object"}};  // any value, any object
      case 0: {
        const int max = Pick(6);
        OJson s = {{"type", "string"}, {"maxLength", max}};
        if (Pick(2)) s["minLength"] = std::min(max, Pick(2));
        return s;
      }
      case 1:
        return {{"type", "integer"}};
      case 2:
        return {{"type", "number"}};
      case 3:
        return {{"type", Pick(2) ? "boolean" : "null"}};
      case 4:
        return {{"enum", OJson::array({"red", "green", 7, nullptr, "é \"q\""})}};
      case 5:
        return {{"const", Pick(2) ? OJson("fixed") : OJson(42)}};
      case 6:
        return {{"type", OJson::array({"string", "null"})}, {"maxLength", 3}};
      case 7:
        return Object(depth + 1, defs, false);
      case 8:
        return {{"type", "array"}, {"items", Any(depth + 1, defs)}, {"maxItems", Pick(3)}};
      case 9:
        return {{"anyOf", OJson::array({Any(depth + 1, defs), Any(depth + 1, defs)})}};
      default: {
        const std::string name = "d" + std::to_string(defs.size());
        defs[name] = OJson::object();  // reserve the name before recursing
        defs[name] = Any(depth + 1, defs);
        return {{"$ref", "#/$defs/" + name}};
      }
    }
  }

  OJson Object(int depth, OJson& defs, bool root) {
    OJson props = OJson::object();
    OJson required = OJson::array();
    const int n = 1 + Pick(3);
    for (int i = 0; i < n; ++i) {
      const std::string name = "p" + std::to_string(i) + (Pick(4) == 0 ? "\u00e9" : "");
      props[name] = Any(depth, defs);
      if (Pick(3) != 0) required.push_back(name);
    }
    OJson schema = {{"type", "object"}, {"properties", props}, {"required", required}};
    if (Pick(2)) schema["additionalProperties"] = false;
    // Now and then a recursive link back to the whole document, optional so it can end.
    if (root && Pick(4) == 0) {
      schema["properties"]["next"] = {
          {"anyOf", OJson::array({{{"$ref", "#"}}, {{"type", "null"}}})}};
    }
    return schema;
  }

  std::mt19937_64 rng_;
  bool unbounded_ = false;
};

}  // namespace shardlm::grammar::testing
