// jinja::Template: parse/render entry points; the module boundary for JinjaError.
#include "chat/jinja_template.h"

#include <exception>
#include <new>

#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"

namespace shardlm::jinja {

Result<Template> Template::Parse(const std::string& source) {
  try {
    std::vector<Token> tokens = Tokenize(source);
    Body body = jinja::Parse(tokens);
    AnnotateFrameLocals(body);
    auto root = std::make_shared<const Body>(std::move(body));
    return Template(std::move(root));
  } catch (const JinjaError& e) {
    return Status(StatusCode::kInvalidData, e.message);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfRange, "template too large to parse");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("template parse failed: ") + e.what());
  }
}

Result<std::string> Template::Render(const Context& context, const RenderLimits& limits,
                                     bool* raised) const {
  if (raised) *raised = false;
  try {
    Evaluator evaluator(limits);
    return evaluator.Render(*root_, context);
  } catch (const JinjaError& e) {
    if (raised) *raised = e.from_template;
    return Status(StatusCode::kInvalidArgument, e.message);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfRange, "template rendering ran out of memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("template render failed: ") + e.what());
  }
}

}  // namespace shardlm::jinja
