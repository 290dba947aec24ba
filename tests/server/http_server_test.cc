// HTTP tests of the OpenAI server over the MockEngine (no model): routes, errors, auth,
// streaming shape, disconnect → cancel, tokenize/detokenize, metrics.
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "server/mock_engine.h"
#include "server/server_harness.h"

namespace shardlm::server {
namespace http_server_test {

using nlohmann::json;

const char* kChat = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";

TEST_F(ServerTest, ChatCompletionNonStream) {
  StartServer();
  engine_->SetReply("Hello there");
  auto r = Post("/v1/chat/completions", kChat);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "mock-model");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello there");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], 11);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), j["usage"]["prompt_tokens"].get<int>() + 11);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_TRUE(j["timings"].contains("prompt_ms"));
  EXPECT_TRUE(j["timings"].contains("predicted_ms"));
}

TEST_F(ServerTest, ChatMaxTokensAndStop) {
  StartServer();
  engine_->SetReply("one two three");
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"x"}],"max_tokens":3})");
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "one");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  r = Post("/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"x"}],"stop":[" three"]})");
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "one two");
}

TEST_F(ServerTest, ReasoningAndToolCalls) {
  StartServer();
  engine_->SetReply(
      "<think>\nLet me look.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  const char* body = R"({"messages":[{"role":"user","content":"weather?"}],
    "tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}}]})";
  auto r = Post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  json msg = j["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "Let me look.");
  EXPECT_TRUE(msg["content"].is_null());
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_FALSE(msg["tool_calls"][0]["id"].get<std::string>().empty());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(ServerTest, ChatStreamShape) {
  StartServer();
  engine_->SetReply("<think>hmm</think>Hi!");
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"x"}],"stream":true,
                    "stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::vector<std::string> data = SseData(r->body);
  ASSERT_GE(data.size(), 4u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string content, reasoning, finish;
  bool usage_seen = false;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json c = json::parse(data[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) {
      usage_seen = true;
      EXPECT_EQ(c["usage"]["completion_tokens"], 8);  // <think> tags are one token each
      continue;
    }
    json d = c["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "Hi!");
  EXPECT_EQ(reasoning, "hmm");
  EXPECT_EQ(finish, "stop");
  EXPECT_TRUE(usage_seen);
}

TEST_F(ServerTest, CompletionsStreamAndNot) {
  StartServer();
  engine_->SetReply("abc");
  auto r = Post("/v1/completions", R"({"prompt":"hello","max_tokens":8})");
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  r = Post("/v1/completions", R"({"prompt":[104,105],"stream":true})");
  ASSERT_TRUE(r);
  std::vector<std::string> data = SseData(r->body);
  std::string text;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    text += json::parse(data[i])["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "abc");
  EXPECT_EQ(data.back(), "[DONE]");
  r = Post("/v1/completions", R"({"prompt":"hi ","echo":true,"stream":true})");
  ASSERT_TRUE(r);
  text.clear();
  data = SseData(r->body);
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    text += json::parse(data[i])["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "hi abc");
  r = Post("/v1/completions", R"({"prompt":"hi ","echo":true})");
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "hi abc");
}

TEST_F(ServerTest, Logprobs) {
  StartServer();
  engine_->SetReply("ab");
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2})");
  json j = json::parse(r->body);
  json lp = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 2u);
  EXPECT_EQ(lp[0]["token"], "a");
  EXPECT_EQ(lp[0]["bytes"], json({97}));
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
  r = Post("/v1/completions", R"({"prompt":"x","logprobs":1})");
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 2u);
}

TEST_F(ServerTest, BadRequests) {
  StartServer();
  ExpectError(Post("/v1/chat/completions", "{not json"), 400);
  ExpectError(Post("/v1/chat/completions", "[1,2]"), 400);
  json e = ExpectError(Post("/v1/chat/completions",
                            R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})"),
                       400);
  EXPECT_EQ(e["param"], "temperature");
  e = ExpectError(
      Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"n":2})"), 400);
  EXPECT_EQ(e["param"], "n");
  e = ExpectError(Post("/v1/chat/completions", R"({"messages":[]})"), 400);
  EXPECT_EQ(e["param"], "messages");
  e = ExpectError(Post("/v1/chat/completions", R"({"messages":[{"role":"robot","content":"x"}]})"),
                  400);
  ExpectError(Post("/v1/completions", R"({"prompt":[999999]})"), 400);
  ExpectError(Post("/v1/completions", R"({"prompt":""})"), 400);
  e = ExpectError(Post("/v1/completions", R"({"prompt":"x","top_p":1.5})"), 400);
  EXPECT_EQ(e["param"], "top_p");
}

TEST_F(ServerTest, ContextLengthExceeded) {
  StartServer();
  std::string prompt(300, 'x');
  json e = ExpectError(Post("/v1/completions", json({{"prompt", prompt}}).dump()), 400);
  EXPECT_EQ(e["code"], "context_length_exceeded");
  e = ExpectError(
      Post(
          "/v1/chat/completions",
          json({{"messages", {{{"role", "user"}, {"content", prompt}}}}, {"stream", true}}).dump()),
      400);
  EXPECT_EQ(e["code"], "context_length_exceeded");
}

TEST_F(ServerTest, QueueFull503) {
  MockEngineOptions eo;
  eo.max_queue = 1;
  StartServer({}, eo);
  engine_->Pause(true);
  // One request waits in the queue (its client times out: that is fine).
  std::thread waiter([this] {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(5, 0);
    c.Post("/v1/completions", R"({"prompt":"x"})", "application/json");
  });
  for (int i = 0; i < 200 && engine_->Stats().queue_length == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto r = Post("/v1/completions", R"({"prompt":"y"})");
  ExpectError(r, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  engine_->Pause(false);
  waiter.join();
}

TEST_F(ServerTest, ApiKey) {
  ServerOptions o;
  o.api_key = "sekrit";
  StartServer(o);
  auto r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ExpectError(client_->Get("/v1/models"), 401);
  ExpectError(Post("/v1/chat/completions", kChat), 401);
  httplib::Headers wrong = {{"Authorization", "Bearer nope"}};
  ExpectError(client_->Get("/metrics", wrong), 401);
  httplib::Headers good = {{"Authorization", "Bearer sekrit"}};
  r = client_->Get("/v1/models", good);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(ServerTest, RoutesAndMethods) {
  StartServer();
  json e = ExpectError(client_->Get("/nope"), 404);
  ExpectError(client_->Get("/v1/chat/completions"), 405);
  ExpectError(client_->Delete("/v1/models"), 405);
  std::string big((1 << 20) + 10, ' ');
  ExpectError(Post("/v1/chat/completions", big), 413);
  auto r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "mock-model");
  r = client_->Get("/health");
  EXPECT_EQ(json::parse(r->body)["status"], "ok");
}

TEST_F(ServerTest, TokenizeRoundTrip) {
  StartServer();
  auto r = Post("/tokenize", R"({"content":"hi<|im_end|>"})");
  ASSERT_TRUE(r);
  json tokens = json::parse(r->body)["tokens"];
  EXPECT_EQ(tokens, json({104, 105, MockTokenizer::kImEnd}));
  r = Post("/tokenize", R"({"content":"hi<|im_end|>","parse_special":false})");
  EXPECT_EQ(json::parse(r->body)["tokens"].size(), 12u);
  r = Post("/detokenize", R"({"tokens":[104,105]})");
  EXPECT_EQ(json::parse(r->body)["content"], "hi");
  ExpectError(Post("/detokenize", R"({"tokens":[-1]})"), 400);
  ExpectError(Post("/detokenize", R"({"tokens":"x"})"), 400);
  ExpectError(Post("/tokenize", R"({})"), 400);
}

TEST_F(ServerTest, Metrics) {
  StartServer();
  engine_->SetReply("ok");
  Post("/v1/completions", R"({"prompt":"x"})");
  auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  for (const char* name :
       {"shardlm_requests_total 1", "shardlm_generated_tokens_total 2", "shardlm_queue_length",
        "shardlm_slots_total", "shardlm_kv_pages_used", "shardlm_prompt_tokens_cached_total 0",
        "shardlm_prompt_tokens_computed_total", "shardlm_prefix_cache_hit_blocks_total",
        "shardlm_prefix_cache_evicted_pages_total",
        "shardlm_http_responses_total{status=\"200\"}"}) {
    EXPECT_NE(r->body.find(name), std::string::npos) << name << "\n" << r->body;
  }
}

// /metrics carries histograms of the time to first token, the time between tokens and the
// request time, per endpoint: a reply of n tokens with 20 ms before each gives 1, n − 1 and 1
// observations, none of them under 20 ms.
TEST_F(ServerTest, MetricsHaveLatencyHistogramsPerEndpoint) {
  StartServer();
  engine_->SetReply("abcd");
  engine_->SetTokenDelayMs(20);
  auto chat = Post("/v1/chat/completions", kChat);
  ASSERT_TRUE(chat);
  const int n = json::parse(chat->body)["usage"]["completion_tokens"].get<int>();
  ASSERT_GE(n, 3);
  Post("/v1/completions", R"({"prompt":"x"})");
  auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  const std::string itl = "shardlm_inter_token_latency_seconds";
  for (const std::string& line : std::vector<std::string>{
           "# TYPE shardlm_time_to_first_token_seconds histogram",
           "shardlm_time_to_first_token_seconds_count{endpoint=\"chat\"} 1",
           "shardlm_time_to_first_token_seconds_bucket{endpoint=\"chat\",le=\"0.01\"} 0",
           itl + "_count{endpoint=\"chat\"} " + std::to_string(n - 1),
           itl + "_bucket{endpoint=\"chat\",le=\"0.015\"} 0",
           itl + "_bucket{endpoint=\"chat\",le=\"+Inf\"} " + std::to_string(n - 1),
           "shardlm_request_duration_seconds_count{endpoint=\"chat\"} 1",
           "shardlm_request_duration_seconds_count{endpoint=\"completions\"} 1"}) {
    EXPECT_NE(r->body.find(line + "\n"), std::string::npos) << line << "\n" << r->body;
  }
}

// A server that stops and is destroyed while the engine still runs its requests: the engine
// finishes them afterwards (cancelled), and what they report (the log line, the latency
// histograms) must still be alive, not the stopped server's memory.
TEST_F(ServerTest, TheEngineFinishesRequestsAfterTheServerIsGone) {
  StartServer();
  engine_->SetReply(std::string(400, 'z'));
  engine_->SetTokenDelayMs(10);
  std::atomic<int> received{0};
  std::thread client([this, &received] {
    httplib::Client c("127.0.0.1", server_->port());
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt":"x","stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      ++received;
      return true;
    };
    (void)c.send(req);
  });
  for (int i = 0; i < 500 && received < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(received.load(), 3);
  server_->Stop();
  thread_.join();
  server_.reset();
  client.join();
  // The engine notices the cancellation at its next token and finishes the request now.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(engine_->cancelled_count(), 1);
}

TEST_F(ServerTest, DisconnectMidStreamCancels) {
  StartServer();
  engine_->SetReply(std::string(200, 'z'));
  engine_->SetTokenDelayMs(5);
  {
    httplib::Client c("127.0.0.1", server_->port());
    int received = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt":"x","stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++received < 3; };
    c.send(req);
  }
  for (int i = 0; i < 400 && engine_->cancelled_count() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_->cancelled_count(), 1);
  // And the server still serves.
  engine_->SetTokenDelayMs(0);
  engine_->SetReply("fine");
  auto r = Post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "fine");
}

TEST_F(ServerTest, ConcurrentStreamsGetTheSameText) {
  MockEngineOptions eo;
  eo.max_queue = 64;
  StartServer({}, eo);
  engine_->SetReply("same text for everyone");
  std::vector<std::thread> clients;
  std::vector<std::string> texts(8);
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(10, 0);
      auto r = c.Post("/v1/chat/completions",
                      R"({"messages":[{"role":"user","content":"x"}],"stream":true})",
                      "application/json");
      if (!r) return;
      for (const std::string& d : SseData(r->body)) {
        if (d == "[DONE]") break;
        json c = json::parse(d);
        json delta = c["choices"][0]["delta"];
        if (delta.contains("content")) texts[i] += delta["content"].get<std::string>();
      }
    });
  }
  for (auto& t : clients) t.join();
  for (const std::string& t : texts) EXPECT_EQ(t, "same text for everyone");
}

}  // namespace http_server_test
}  // namespace shardlm::server

namespace shardlm::server {
namespace http_server_test {

TEST_F(ServerTest, ModelByIdAndLegacyDefaults) {
  StartServer();
  auto r = client_->Get("/v1/models/mock-model");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["id"], "mock-model");
  EXPECT_EQ(json::parse(r->body)["object"], "model");
  json e = ExpectError(client_->Get("/v1/models/other%2Fmodel"), 404);
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_NE(e["message"].get<std::string>().find("'other/model'"), std::string::npos);
  ExpectError(client_->Post("/v1/models/mock-model", "", "application/json"), 405);
  // Legacy completions stop at 16 tokens when max_tokens is not given.
  engine_->SetReply(std::string(40, 'y'));
  r = Post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], std::string(16, 'y'));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  e = ExpectError(Post("/v1/completions", R"({"prompt":["a","b"]})"), 400);
  EXPECT_EQ(e["param"], "prompt");
}

}  // namespace http_server_test
}  // namespace shardlm::server
