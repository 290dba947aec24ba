// Request messages in the shapes clients send (data/message_shapes.json: an assistant turn
// echoed with "content": null, tool results as parts or as JSON, content parts, the developer
// role, null optional fields) are normalized so every fixture chat template renders them, and
// byte-for-byte as Python jinja2 renders them after the same normalization
// (render_reference.py, which applies the documented rules on its own). The Qwen3 template
// once failed a tool loop's second turn on `'</think>' in message.content` with None.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/chat_template.h"
#include "server/openai_types.h"
#include "support/fixtures.h"

namespace shardlm::server {
namespace message_shapes_test {

using nlohmann::ordered_json;

// The first of `python3`, `/usr/bin/python3` that has jinja2, or "".
std::string PythonWithJinja() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(python) + " -c 'import jinja2' 2>/dev/null";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return "";
}

std::string RunCommand(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  std::string out;
  std::array<char, 65536> buf;
  while (pipe && !std::feof(pipe.get())) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), pipe.get());
    out.append(buf.data(), n);
  }
  return out;
}

TEST(MessageShapes, EveryTemplateRendersThemLikeJinja2) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string python = PythonWithJinja();
  if (python.empty()) {
    if (testing::UnderCi()) FAIL() << "CI=true but no python3 with jinja2 (python3-jinja2)";
    GTEST_SKIP() << "no python3 with jinja2: install python3-jinja2 to compare the renderings";
  }
  const std::string templates_dir = testing::FixturePath("templates");
  const std::string shapes_path =
      std::string(SHARDLM_SOURCE_DIR) + "/tests/server/data/message_shapes.json";
  std::map<std::pair<std::string, std::string>, ordered_json> reference;
  const std::string lines =
      RunCommand(python + " " + SHARDLM_SOURCE_DIR + "/tests/server/render_reference.py '" +
                 templates_dir + "' '" + shapes_path + "'");
  size_t start = 0;
  for (size_t end; (end = lines.find('\n', start)) != std::string::npos; start = end + 1) {
    ordered_json line = ordered_json::parse(lines.substr(start, end - start));
    reference[{line["template"], line["shape"]}] = line;
  }
  const ordered_json shapes = ordered_json::parse(testing::ReadTextFile(shapes_path));
  const ordered_json table =
      ordered_json::parse(testing::ReadTextFile(templates_dir + "/templates.json"))["templates"];
  ASSERT_EQ(reference.size(), table.size() * shapes["shapes"].size()) << lines.substr(0, 2000);
  ChatTemplateOptions options;
  options.clock = testing::FixtureClock;
  int rendered = 0;
  int qwen3_rendered = 0;
  for (const ordered_json& entry : table) {
    auto tmpl = ChatTemplate::Create(
        testing::ReadTextFile(templates_dir + "/" + entry["file"].get<std::string>()),
        testing::OptionalToken(entry["bos_token"]), testing::OptionalToken(entry["eos_token"]),
        options);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
    for (const ordered_json& shape : shapes["shapes"]) {
      const std::string file = entry["file"], id = shape["id"];
      SCOPED_TRACE(file + " × " + id);
      ordered_json body = {{"messages", shape["messages"]}};
      if (shape["with_tools"]) body["tools"] = shapes["tools"];
      auto request = ChatCompletionRequestFromJSON(body);
      ASSERT_TRUE(request.ok()) << request.status().message();
      Result<std::string> got = tmpl->Render(request->messages, request->tools, true);
      const ordered_json& want = reference[{file, id}];
      if (want.contains("error")) {
        EXPECT_FALSE(got.ok()) << "jinja2 failed with: " << want["error"];
        continue;
      }
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_EQ(*got, want["rendered"].get<std::string>());
      ++rendered;
      if (file == "Qwen-Qwen3-0.6B.jinja") ++qwen3_rendered;
    }
  }
  // The Qwen3 template takes every shape (a tool loop's turn 2 above all); others refuse some
  // on their own terms (Gemma's alternation, Mistral's tool-call ids), exactly as jinja2 does.
  EXPECT_EQ(qwen3_rendered, int(shapes["shapes"].size()));
  EXPECT_GT(rendered, int(table.size() * shapes["shapes"].size()) / 2);
}

}  // namespace message_shapes_test
}  // namespace shardlm::server
