// What /v1/chat/completions and /v1/completions write, byte for byte: whole responses and SSE
// streams (reasoning, tool calls, logprobs, echo with and without the prompt's logprobs, usage
// chunk, a length finish, an error mid-stream) for fixed ids and times over the MockEngine,
// whose usage and timings are deterministic. Clients parse these bytes; any change to them
// must be deliberate.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <variant>

#include "server/completion_session.h"
#include "server/mock_engine.h"
#include "server/openai_output.h"

namespace shardlm::server {
namespace completion_output_test {

const ResponseMeta kChatMeta{"chatcmpl-golden", 1700000000, "mock-model"};
const ResponseMeta kCompletionMeta{"cmpl-golden", 1700000000, "mock-model"};

PreparedRequest Prepared(MockEngine& engine, Endpoint endpoint, const std::string& prompt) {
  PreparedRequest prep;
  prep.endpoint = endpoint;
  prep.prompt = engine.tokenizer().Encode(prompt, true, true);
  return prep;
}

// The formatter the endpoint's handler gives its session.
std::unique_ptr<OutputFormatter> FormatterFor(const PreparedRequest& prep, const ResponseMeta& meta,
                                              const std::string& echo) {
  if (prep.endpoint == Endpoint::kCompletion) {
    return std::make_unique<TextCompletionFormatter>(meta, prep.options, echo);
  }
  return std::make_unique<ChatCompletionFormatter>(meta, prep.options);
}

std::shared_ptr<CompletionSession> Start(MockEngine& engine, PreparedRequest prep,
                                         const ResponseMeta& meta, const std::string& echo) {
  ApiError error;
  auto output = FormatterFor(prep, meta, echo);
  auto session = CompletionSession::Start(engine, std::move(prep), std::move(output), nullptr,
                                          nullptr, &error);
  EXPECT_NE(session, nullptr) << error.message;
  return session;
}

std::string Streamed(MockEngine& engine, PreparedRequest prep, const ResponseMeta& meta,
                     const std::string& echo = "") {
  prep.options.stream = true;
  auto session = Start(engine, std::move(prep), meta, echo);
  if (!session) return "";
  std::string sse;
  while (session->NextEvents(std::chrono::milliseconds(100), &sse) !=
         CompletionSession::Poll::kDone) {
  }
  return sse;
}

std::string Whole(MockEngine& engine, PreparedRequest prep, const ResponseMeta& meta,
                  const std::string& echo = "") {
  auto session = Start(engine, std::move(prep), meta, echo);
  if (!session) return "";
  auto result = session->Wait();
  EXPECT_TRUE(result.has_value());
  if (!result) return "";
  if (auto* e = std::get_if<ApiError>(&*result)) return "error: " + e->message;
  return std::get<Json>(*result).dump();
}

TEST(CompletionOutput, ChatWholeWithReasoningToolCallAndLogprobs) {
  MockEngine engine;
  engine.SetReply(
      "<think>\nhm\n</think>ok<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1}}"
      "</tool_call>");
  PreparedRequest prep = Prepared(engine, Endpoint::kChat, "hi");
  prep.parse_tools = true;
  EXPECT_EQ(
      Whole(engine, prep, kChatMeta),
      R"({"id":"chatcmpl-golden","object":"chat.completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":"hm","tool_calls":[{"id":"call_l-golden_0","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":2,"completion_tokens":42,"total_tokens":44,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":2,"prompt_ms":1.0,"prompt_per_second":2000.0,"predicted_n":42,"predicted_ms":43.0,"predicted_per_second":976.7441860465116,"queue_ms":0.0}})");

  engine.SetReply("Hi");
  prep.parse_tools = false;
  prep.options.logprobs = true;
  prep.options.top_logprobs = 1;
  EXPECT_EQ(
      Whole(engine, prep, kChatMeta),
      R"({"id":"chatcmpl-golden","object":"chat.completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":{"content":[{"token":"H","logprob":-0.5,"bytes":[72],"top_logprobs":[{"token":"H","logprob":-0.5,"bytes":[72]}]},{"token":"i","logprob":-0.5,"bytes":[105],"top_logprobs":[{"token":"i","logprob":-0.5,"bytes":[105]}]}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":2,"prompt_ms":1.0,"prompt_per_second":2000.0,"predicted_n":2,"predicted_ms":3.0,"predicted_per_second":666.6666666666666,"queue_ms":0.0}})");
}

TEST(CompletionOutput, ChatStreamWithReasoningToolCallUsageAndLogprobs) {
  MockEngine engine;
  engine.SetReply("<think>a</think>b<tool_call>{\"name\":\"f\"}</tool_call>");
  PreparedRequest prep = Prepared(engine, Endpoint::kChat, "hi");
  prep.parse_tools = true;
  prep.options.include_usage = true;
  EXPECT_EQ(
      Streamed(engine, prep, kChatMeta),
      R"(data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"reasoning_content":"a"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"content":"b"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_l-golden_0","type":"function","function":{"name":"f","arguments":"{}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":18,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":2,"prompt_ms":1.0,"prompt_per_second":2000.0,"predicted_n":18,"predicted_ms":19.0,"predicted_per_second":947.3684210526316,"queue_ms":0.0}}

data: [DONE]

)");

  engine.SetReply("Yo");
  prep.parse_tools = false;
  prep.options.include_usage = false;
  prep.options.logprobs = true;
  EXPECT_EQ(
      Streamed(engine, prep, kChatMeta),
      R"(data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"content":"Y"},"logprobs":{"content":[{"token":"Y","logprob":-0.5,"bytes":[89],"top_logprobs":[]}]},"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"content":"o"},"logprobs":{"content":[{"token":"o","logprob":-0.5,"bytes":[111],"top_logprobs":[]}]},"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}

data: [DONE]

)");
}

TEST(CompletionOutput, ChatStreamLengthAndErrorMidStream) {
  MockEngine engine;
  engine.SetReply("abc");
  PreparedRequest prep = Prepared(engine, Endpoint::kChat, "hi");
  prep.options.max_tokens = 1;
  EXPECT_EQ(
      Streamed(engine, prep, kChatMeta),
      R"(data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}

data: [DONE]

)");

  prep.options.max_tokens = -1;
  engine.FailAfterTokens(2, Status(StatusCode::kInternal, "the stage failed"));
  EXPECT_EQ(
      Streamed(engine, prep, kChatMeta),
      R"(data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-golden","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","choices":[{"index":0,"delta":{"content":"b"},"logprobs":null,"finish_reason":null}]}

data: {"error":{"message":"the stage failed","type":"server_error","param":null,"code":null}}

)");
  EXPECT_EQ(Whole(engine, prep, kChatMeta), "error: the stage failed");
}

TEST(CompletionOutput, CompletionsWholeAndStreamWithEchoAndLogprobs) {
  MockEngine engine;
  engine.SetReply("xy");
  PreparedRequest prep = Prepared(engine, Endpoint::kCompletion, "say");
  prep.options.logprobs = true;
  prep.options.top_logprobs = 2;
  EXPECT_EQ(
      Whole(engine, prep, kCompletionMeta, "say"),
      R"({"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"sayxy","logprobs":{"tokens":["x","y"],"token_logprobs":[-0.5,-0.5],"top_logprobs":[{"x":-0.5,"y":-1.5},{"y":-0.5,"z":-1.5}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":3,"prompt_ms":1.0,"prompt_per_second":3000.0,"predicted_n":2,"predicted_ms":3.0,"predicted_per_second":666.6666666666666,"queue_ms":0.0}})");

  prep.options.include_usage = true;
  prep.options.top_logprobs = 0;
  EXPECT_EQ(
      Streamed(engine, prep, kCompletionMeta, "say"),
      R"(data: {"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"say","logprobs":null,"finish_reason":null}]}

data: {"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"x","logprobs":{"tokens":["x"],"token_logprobs":[-0.5],"top_logprobs":[{}]},"finish_reason":null}]}

data: {"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"y","logprobs":{"tokens":["y"],"token_logprobs":[-0.5],"top_logprobs":[{}]},"finish_reason":null}]}

data: {"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}]}

data: {"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":3,"prompt_ms":1.0,"prompt_per_second":3000.0,"predicted_n":2,"predicted_ms":3.0,"predicted_per_second":666.6666666666666,"queue_ms":0.0}}

data: [DONE]

)");
}

// With the prompt's logprobs (the handler asks for them for echo with logprobs): they lead
// the logprobs object, the first prompt token's null; streamed, in the echoed prompt's chunk.
TEST(CompletionOutput, CompletionsWithThePromptsLogprobs) {
  MockEngine engine;
  engine.SetReply("x");
  PreparedRequest prep = Prepared(engine, Endpoint::kCompletion, "say");
  prep.options.logprobs = true;
  prep.options.top_logprobs = 1;
  prep.prompt_logprobs = true;
  EXPECT_EQ(
      Whole(engine, prep, kCompletionMeta, "say"),
      R"({"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"sayx","logprobs":{"tokens":["s","a","y","x"],"token_logprobs":[null,-0.25,-0.5,-0.5],"top_logprobs":[null,{"a":-0.25},{"y":-0.5},{"x":-0.5}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":3,"prompt_ms":1.0,"prompt_per_second":3000.0,"predicted_n":1,"predicted_ms":2.0,"predicted_per_second":500.0,"queue_ms":0.0}})");

  EXPECT_EQ(
      Streamed(engine, prep, kCompletionMeta, "say"),
      R"(data: {"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"say","logprobs":{"tokens":["s","a","y"],"token_logprobs":[null,-0.25,-0.5],"top_logprobs":[null,{"a":-0.25},{"y":-0.5}]},"finish_reason":null}]}

data: {"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"x","logprobs":{"tokens":["x"],"token_logprobs":[-0.5],"top_logprobs":[{"x":-0.5}]},"finish_reason":null}]}

data: {"id":"cmpl-golden","object":"text_completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}]}

data: [DONE]

)");
}

}  // namespace completion_output_test
}  // namespace shardlm::server
