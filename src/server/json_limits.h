// JSON read under limits: every JSON text a client or the model hands the server (a request
// body, the arguments string of a tool call in a request, a tool call in the model's output)
// is parsed here, with its nesting depth and its number of values bounded while it is read.
//
// Why: whatever walks a value recursively later (copies, the chat template's conversion,
// tojson, dump) would overflow a handler thread's stack on deep nesting, and each value
// becomes a Jinja value of about a hundred bytes, so a body of small values is worth ten
// times its size in memory. The parse stops at the first value past a limit, before it
// builds the rest, and the error names the field (`messages[3].tool_calls[0].function`).
//
// Goals: the same values nlohmann's own parser builds (insertion order, last duplicate key
// wins, invalid UTF-8 refused); errors that say where and what.
// Non-goals: streaming, comments or other JSON extensions.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/status.h"
#include "server/openai_types.h"

namespace shardlm::server {

struct JsonLimits {
  // Containers inside containers. Tool schemas need a dozen levels; 64 is far above any
  // real request, and a few kilobytes of stack when walked recursively.
  int max_depth = kMaxJsonDepth;
  // Values (scalars and containers) in all the texts read against one budget: a body of
  // 8 MiB could otherwise hold four million.
  size_t max_values = kMaxJsonValues;
};

// Counts values across the texts of one request (its body, then each tool call's arguments).
struct JsonBudget {
  size_t values = 0;
};

// Parses `text`. `where` is the field path of the text inside the request, to which errors
// append the path inside it ("messages[0].tool_calls[1].function.arguments"), or "" for the
// request body itself. Errors: InvalidData "<where>: not valid JSON at byte N (...)" for a
// text that is not JSON; InvalidArgument "<field>: nests deeper than N levels" or "<where>:
// more than N JSON values in one request" for one past a limit.
Result<Json> ParseJsonWithLimits(std::string_view text, std::string_view where,
                                 const JsonLimits& limits, JsonBudget* budget = nullptr);

}  // namespace shardlm::server
