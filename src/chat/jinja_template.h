// jinja::Template: the public face of the Jinja engine (parse once, render many times).
//
// Owns: turning the engine's internal errors into Status, so no exception leaves the
// module. Parse errors → kInvalidData "template syntax error at line N: ...";
// raise_exception(msg) → kInvalidArgument with exactly `msg` (see RenderError below);
// other render errors → kInvalidArgument with a Python-like message.
// Goals: jinja2 semantics with trim_blocks + lstrip_blocks, as transformers configures it.
// Non-goals: autoescape, loaders/inheritance, sandbox attribute policies beyond what
// chat templates need.
// Thread safety: a Template is immutable after Parse; concurrent Render calls are safe.
// Lifetime: copies share the parsed AST.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_value.h"

namespace shardlm::jinja {

using Context = std::vector<std::pair<std::string, Value>>;

class Template {
 public:
  static Result<Template> Parse(const std::string& source);

  // Renders with `context` as the template's variables (plus the builtin globals).
  // On a raise_exception(), *raised (if given) is set true and the status message is the
  // template's own text.
  Result<std::string> Render(const Context& context, const RenderLimits& limits = {},
                             bool* raised = nullptr) const;

 private:
  explicit Template(std::shared_ptr<const Body> root) : root_(std::move(root)) {}
  std::shared_ptr<const Body> root_;
};

}  // namespace shardlm::jinja
