// `echo` with `logprobs` on /v1/completions over the mock engine: the prompt's tokens lead
// the choice's logprobs (`tokens`, `token_logprobs`, `top_logprobs`), the first prompt token
// with a null logprob and null alternatives, streamed in the echo chunk; max_tokens 0 scores
// the prompt alone; without echo, or echo without logprobs, the prompt is not scored.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/server_harness.h"

namespace shardlm::server {
namespace echo_logprobs_test {

class EchoLogprobsTest : public ServerTest {};

TEST_F(EchoLogprobsTest, PromptThenCompletionInOneLogprobsObject) {
  StartServer();
  engine_->SetReply("xyz");
  auto r = Post("/v1/completions", R"({"prompt":"abc","echo":true,"logprobs":2,"max_tokens":3})");
  ASSERT_EQ(r->status, 200) << r->body;
  json choice = json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["text"], "abcxyz");
  const json& lp = choice["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c", "x", "y", "z"}));
  const json& logprobs = lp["token_logprobs"];
  ASSERT_EQ(logprobs.size(), 6u);
  EXPECT_TRUE(logprobs[0].is_null());
  EXPECT_EQ(logprobs[1], MockPromptLogprob(1));
  EXPECT_EQ(logprobs[2], MockPromptLogprob(2));
  EXPECT_EQ(logprobs[3], -0.5);  // the mock's generated tokens
  const json& top = lp["top_logprobs"];
  ASSERT_EQ(top.size(), 6u);
  EXPECT_TRUE(top[0].is_null());
  EXPECT_EQ(top[1], json({{"b", -0.25}, {"c", -0.375}}));  // the mock's alternatives
  EXPECT_EQ(top[4].size(), 2u);
}

TEST_F(EchoLogprobsTest, StreamedTheEchoChunkCarriesThePrompts) {
  StartServer();
  engine_->SetReply("xy");
  auto r =
      Post("/v1/completions", R"({"prompt":[104,105,106],"echo":true,"logprobs":0,"stream":true})");
  ASSERT_EQ(r->status, 200);
  std::vector<std::string> data = SseData(r->body);
  ASSERT_EQ(data.size(), 5u) << r->body;  // echo, x, y, finish, [DONE]
  json first = json::parse(data[0])["choices"][0];
  EXPECT_EQ(first["text"], "hij");
  EXPECT_EQ(first["logprobs"]["tokens"], json({"h", "i", "j"}));
  EXPECT_EQ(first["logprobs"]["token_logprobs"],
            json({nullptr, MockPromptLogprob(1), MockPromptLogprob(2)}));
  EXPECT_EQ(first["logprobs"]["top_logprobs"], json({nullptr, json::object(), json::object()}));
  std::string text;
  std::vector<std::string> tokens;
  for (size_t i = 1; i + 1 < data.size(); ++i) {
    json c = json::parse(data[i])["choices"][0];
    text += c["text"].get<std::string>();
    if (c["logprobs"].is_object()) tokens.push_back(c["logprobs"]["tokens"][0]);
  }
  EXPECT_EQ(text, "xy");
  EXPECT_EQ(tokens, (std::vector<std::string>{"x", "y"}));
}

TEST_F(EchoLogprobsTest, NoTokensScoresThePromptAlone) {
  StartServer();
  engine_->SetReply("xyz");
  const char* body = R"({"prompt":"abcd","echo":true,"logprobs":1,"max_tokens":0})";
  json choice = json::parse(Post("/v1/completions", body)->body)["choices"][0];
  EXPECT_EQ(choice["text"], "abcd");
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(choice["logprobs"]["tokens"], json({"a", "b", "c", "d"}));
  EXPECT_EQ(choice["logprobs"]["token_logprobs"][3], MockPromptLogprob(3));

  json streamed = json::parse(body);
  streamed["stream"] = true;
  std::vector<std::string> data = SseData(Post("/v1/completions", streamed.dump())->body);
  ASSERT_EQ(data.size(), 3u);  // echo, finish, [DONE]
  EXPECT_EQ(json::parse(data[0])["choices"][0]["logprobs"]["tokens"].size(), 4u);
  EXPECT_EQ(json::parse(data[1])["choices"][0]["finish_reason"], "length");
}

// Without echo the completion's own entries are all there is; echo without logprobs has no
// logprobs object.
TEST_F(EchoLogprobsTest, OnlyEchoWithLogprobsScoresThePrompt) {
  StartServer();
  engine_->SetReply("xyz");
  json lp = json::parse(
      Post("/v1/completions", R"({"prompt":"ab","logprobs":0})")->body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"x", "y", "z"}));
  json choice =
      json::parse(Post("/v1/completions", R"({"prompt":"ab","echo":true})")->body)["choices"][0];
  EXPECT_EQ(choice["text"], "abxyz");
  EXPECT_TRUE(choice["logprobs"].is_null());
}

}  // namespace echo_logprobs_test
}  // namespace shardlm::server
