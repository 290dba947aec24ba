// Jinja builtins: filters, tests, Python str/dict/list methods and global functions.
//
// Owns: the builtin tables the evaluator consults by name. Filters and tests are plain
// functions over Values; methods are bound on attribute lookup (x.split → a callable).
// Goals: jinja2 + transformers semantics for what chat templates use (tojson is
// transformers' json.dumps override; raise_exception throws the template's message).
// Non-goals: HTML autoescape/Markup, i18n, groupby/batch/slice/urlize/wordwrap filters,
// mutating methods (the immutable sandbox forbids append/pop/update too).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace shardlm::jinja {

class Evaluator;

// range, namespace, dict, raise_exception, cycler-free jinja2 globals.
std::vector<std::pair<std::string, Value>> BuiltinGlobals();
// A bound method of obj (str, dict or list), or undefined if there is none.
Value GetMethod(const Value& obj, const std::string& name);

using FilterFn = Value (*)(Evaluator& ev, const Value& input, const CallArgs& args);
using TestFn = bool (*)(Evaluator& ev, const Value& value, const CallArgs& args);
FilterFn FindFilter(const std::string& name);
TestFn FindTest(const std::string& name);

// Python's `fmt % args` (%s %r %d %i %f %e %g %x %X %c %%, flags, width, precision).
// `allow_unused`: extra arguments are not an error (Python's mapping-style right operand).
std::string PercentFormat(const std::string& fmt, const ValueList& args, size_t max_bytes,
                          bool allow_unused = false);

// Argument helpers for builtins: Python-like type checks with clear messages.
int64_t IntArg(const CallArgs& args, size_t index, const char* name, int64_t fallback);
std::string StringArg(const CallArgs& args, size_t index, const char* name,
                      const std::string& fallback);

}  // namespace shardlm::jinja
