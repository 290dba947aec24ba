// The parse context the API request parsers share (openai_types.cc, responses_api.cc,
// anthropic_api.cc): typed reads of one JSON object's fields, each failure naming the
// parameter, and the generation options every API maps to the same fields.
//
// Goals: one place that decides what a wrong type or range says, so every API's errors read
// alike; nothing thrown past GuardParse.
// Non-goals: the shapes of any one API (their own files).
//
// Thread safety: a Parser belongs to one request's parse; the functions are pure.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/json_limits.h"
#include "server/openai_types.h"

namespace shardlm::server {

// The parse context: remembers the parameter an error is about.
struct Parser {
  const Json& body;
  std::string* param;
  // Values of the JSON texts inside the request (tool-call arguments) read so far.
  std::shared_ptr<JsonBudget> budget = std::make_shared<JsonBudget>();

  Status Fail(const std::string& name, const std::string& what) const {
    if (param) *param = name;
    return InvalidArgument("invalid '{}': {}", name, what);
  }
  // The field, or nullptr when absent or null (null means "default" to OpenAI clients).
  const Json* Find(const char* name) const {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
  }
  Status Bool(const char* name, bool* out) const {
    const Json* v = Find(name);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return Fail(name, "expected a boolean");
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status Float(const char* name, double lo, double hi, float* out) const {
    const Json* v = Find(name);
    if (!v) return Status::Ok();
    if (!v->is_number()) return Fail(name, "expected a number");
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      return Fail(name, fmt::format("{} is outside [{}, {}]", x, lo, hi));
    }
    *out = static_cast<float>(x);
    return Status::Ok();
  }
  Status Int(const char* name, int64_t lo, int64_t hi, int64_t* out) const {
    const Json* v = Find(name);
    if (!v) return Status::Ok();
    return IntValue(name, *v, lo, hi, out);
  }
  Status IntValue(const std::string& name, const Json& v, int64_t lo, int64_t hi,
                  int64_t* out) const {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) return Fail(name, fmt::format("{} is too large", u));
      *out = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      *out = v.get<int64_t>();
    } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
               std::fabs(v.get<double>()) < 9e15) {
      *out = static_cast<int64_t>(v.get<double>());
    } else {
      return Fail(name, "expected an integer");
    }
    if (*out < lo || *out > hi) {
      return Fail(name, fmt::format("{} is outside [{}, {}]", *out, lo, hi));
    }
    return Status::Ok();
  }
  Status String(const char* name, std::string* out) const {
    const Json* v = Find(name);
    if (!v) return Status::Ok();
    if (!v->is_string()) return Fail(name, "expected a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
};

// The fields shared with /v1/chat/completions, under their OpenAI names: model, stream,
// stream_options, max_tokens, max_completion_tokens, n, stop, ignore_eos, logit_bias,
// pin (shardlm's extension), response_format and the sampling parameters (temperature, top_p,
// top_k, min_p, seed, penalties).
Status ParseCommon(const Parser& p, GenerationOptions* o);

// Where a response format object sits and how its errors are named.
struct FormatShape {
  std::string where;  // "response_format", "text.format"
  // The json_schema fields (name, schema, strict) are in the format's "json_schema" object
  // (chat), not in the format itself (Responses).
  bool nested = false;
  // Errors name the field (where.type, where.schema, ...), not just `where`.
  bool name_fields = false;
};

// A response format object: {"type":"text"} | {"type":"json_object"} |
// {"type":"json_schema", name, schema, strict} (the json_schema fields as shape says).
Status ParseFormat(const Parser& p, const FormatShape& shape, const Json& format,
                   ResponseFormat* rf);

// tool_choice as chat and the Responses API give it: "auto" | "none" | "required", or an
// object naming one function, its name found by `function_name` (nullptr when the object
// names none). `object_shape` shows the object in errors.
Status ParseToolChoiceValue(const Parser& p, const Json& choice,
                            const Json* (*function_name)(const Json& object),
                            const char* object_shape, ToolChoice* tc);

// How another API's "tools" entries read, to convert them to chat's function tools.
struct ToolShape {
  std::string type;          // the one tool "type" this server runs ("custom", "function")
  std::string default_type;  // the type of a tool that gives none ("" when it must)
  std::string schema_key;    // "input_schema", "parameters"
  bool schema_required = false;
  std::string kinds;  // what the refusal of another type says this server runs
};

// The request's "tools" as chat's [{"type":"function","function":{name, description,
// parameters, strict}}] (an empty array when absent). Errors name the tool's field.
Result<Json> ConvertTools(const Parser& p, const ToolShape& shape);

// The body is a JSON object (else an error with no parameter).
Status CheckObject(const Json& body, std::string* param);

// A required or named tool_choice (r.tool_choice) needs r.tools, and a named one must be one of
// them; a failure names `name`.
Status CheckToolChoice(const Parser& p, const std::string& name, const ChatCompletionRequest& r);

// Runs a parse, turning any exception (a nlohmann type error the checks missed) into an
// InvalidArgument: no exception leaves the parse boundary.
template <typename F>
auto GuardParse(F&& f, std::string* param) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    if (param) *param = "";
    return InvalidArgument("invalid request: {}", e.what());
  }
}

}  // namespace shardlm::server
