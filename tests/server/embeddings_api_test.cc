// POST /v1/embeddings over the mock engine: OpenAI's request shapes (a string, strings, token
// ids, arrays of token ids), float and base64 encodings, L2-normalised vectors in input
// order, usage; the checks (dimensions, empty or mixed input, ids outside the vocabulary,
// inputs longer than the context, unknown encodings) as 400s naming the parameter; a server
// without embeddings answers 400 saying how to enable them; more inputs than the engine's
// queue all get their vectors; an engine failure is a 5xx, a client that leaves cancels
// every input.
#include "server/embeddings_api.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "server/server_harness.h"

namespace shardlm::server {
namespace embeddings_api_test {

std::vector<float> Expected(const std::string& text, int32_t n_embd = 4) {
  std::vector<TokenId> tokens(text.begin(), text.end());
  return L2Normalized(MockEmbedding(tokens, n_embd));
}

std::vector<float> Floats(const json& values) { return values.get<std::vector<float>>(); }

// Standard base64 of little-endian float32 values, decoded.
std::vector<float> DecodeBase64Floats(const std::string& text) {
  auto value = [](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return uint32_t(c - 'A');
    if (c >= 'a' && c <= 'z') return uint32_t(c - 'a' + 26);
    if (c >= '0' && c <= '9') return uint32_t(c - '0' + 52);
    return c == '+' ? 62u : 63u;
  };
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 3 < text.size(); i += 4) {
    uint32_t group = 0;
    int n = 0;
    for (int k = 0; k < 4; ++k) {
      group = group << 6 | (text[i + k] == '=' ? 0 : value(text[i + k]));
      n += text[i + k] == '=' ? 0 : 1;
    }
    for (int k = 0; k < n - 1; ++k) bytes.push_back(uint8_t(group >> (16 - 8 * k)));
  }
  std::vector<float> out;
  for (size_t i = 0; i + 3 < bytes.size(); i += 4) {
    out.push_back(std::bit_cast<float>(uint32_t(bytes[i]) | uint32_t(bytes[i + 1]) << 8 |
                                       uint32_t(bytes[i + 2]) << 16 |
                                       uint32_t(bytes[i + 3]) << 24));
  }
  return out;
}

class EmbeddingsTest : public ServerTest {
 protected:
  void Start(bool embeddings = true) {
    MockEngineOptions engine;
    engine.embeddings = embeddings;
    engine.max_queue = 2;
    StartServer({}, engine);
  }
};

TEST(EmbeddingsEncoding, Base64AndNormalisation) {
  EXPECT_EQ(Base64Floats(std::vector<float>{1.0f}), "AACAPw==");
  EXPECT_EQ(Base64Floats(std::vector<float>{1.0f, -2.0f}), "AACAPwAAAMA=");
  EXPECT_EQ(Base64Floats(std::vector<float>{}), "");
  const std::vector<float> v = {0.5f, -3.25f, 1e-20f, 7.0f, 0.0f};
  EXPECT_EQ(DecodeBase64Floats(Base64Floats(v)), v);
  EXPECT_EQ(L2Normalized(std::vector<float>{3.0f, 4.0f}), (std::vector<float>{0.6f, 0.8f}));
  EXPECT_EQ(L2Normalized(std::vector<float>{0.0f, 0.0f}), (std::vector<float>{0.0f, 0.0f}));
}

TEST_F(EmbeddingsTest, WithoutEmbeddingsTheRouteSaysHowToEnableThem) {
  Start(/*embeddings=*/false);
  json e = ExpectError(Post("/v1/embeddings", R"({"input":"hello"})"), 400);
  EXPECT_NE(e["message"].get<std::string>().find("--embeddings"), std::string::npos) << e;
  EXPECT_EQ(e["code"], "embeddings_disabled");
}

TEST_F(EmbeddingsTest, OneStringGivesOneNormalisedVector) {
  Start();
  auto r = Post("/v1/embeddings", R"({"input":"hello","model":"whatever"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "mock-model");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["object"], "embedding");
  EXPECT_EQ(j["data"][0]["index"], 0);
  EXPECT_EQ(Floats(j["data"][0]["embedding"]), Expected("hello"));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  double norm = 0;
  for (float v : Floats(j["data"][0]["embedding"])) norm += double(v) * v;
  EXPECT_NEAR(norm, 1.0, 1e-6);
}

TEST_F(EmbeddingsTest, EveryInputShapeInOrderAndBase64) {
  Start();
  json j = json::parse(Post("/v1/embeddings", R"({"input":["ab","cde","f"]})")->body);
  ASSERT_EQ(j["data"].size(), 3u);
  const char* texts[] = {"ab", "cde", "f"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["data"][i]["index"], i);
    EXPECT_EQ(Floats(j["data"][i]["embedding"]), Expected(texts[i])) << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 6);
  j = json::parse(Post("/v1/embeddings", R"({"input":[104,105]})")->body);
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(Floats(j["data"][0]["embedding"]), Expected("hi"));
  j = json::parse(Post("/v1/embeddings", R"({"input":[[104,105],[97]]})")->body);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(Floats(j["data"][1]["embedding"]), Expected("a"));
  j = json::parse(
      Post("/v1/embeddings", R"({"input":["hi","a"],"encoding_format":"base64"})")->body);
  ASSERT_EQ(j["data"].size(), 2u);
  ASSERT_TRUE(j["data"][0]["embedding"].is_string());
  EXPECT_EQ(DecodeBase64Floats(j["data"][0]["embedding"]), Expected("hi"));
  EXPECT_EQ(DecodeBase64Floats(j["data"][1]["embedding"]), Expected("a"));
  auto r = Post("/v1/embeddings", R"({"input":"hi","dimensions":null,"encoding_format":"float"})");
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Post("/embeddings", R"({"input":"hi"})")->status, 200);
}

TEST_F(EmbeddingsTest, BadRequestsName400sAndTheParameter) {
  Start();
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({})", "input"},
      {R"({"input":""})", "input"},
      {R"({"input":[]})", "input"},
      {R"({"input":[1,"a"]})", "input"},
      {R"({"input":["a",[1]]})", "input[1]"},
      {R"({"input":[[1],[]]})", "input[1]"},
      {R"({"input":[-1]})", "input"},
      {R"({"input":[1.5]})", "input"},
      {R"({"input":[100000]})", "input"},
      {R"({"input":[[1],[100000]]})", "input[1]"},
      {R"({"input":5})", "input"},
      {R"({"input":"a","encoding_format":"hex"})", "encoding_format"},
      {R"({"input":["a",""]})", "input[1]"},
      {R"({"input":[[1],[2,true]]})", "input[1]"},
      {R"({"input":"a","dimensions":3})", "dimensions"},
      {R"({"input":"a","dimensions":4})", "dimensions"},
      {R"({"input":"a","model":7})", "model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    json e = ExpectError(Post("/v1/embeddings", c.body), 400);
    EXPECT_EQ(e["param"], c.param);
  }
  // An input longer than the context (256 positions).
  json e = ExpectError(
      Post("/v1/embeddings", json{{"input", {"ok", std::string(257, 'x')}}}.dump()), 400);
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "input[1]");
  EXPECT_EQ(Post("/v1/embeddings", json{{"input", std::string(256, 'x')}}.dump())->status, 200);
  EXPECT_EQ(ExpectError(Post("/v1/embeddings", "[1]"), 400)["param"], nullptr);
}

// 12 inputs through a queue of 2: each input waits for an earlier one to finish.
TEST_F(EmbeddingsTest, MoreInputsThanTheQueueHolds) {
  Start();
  engine_->SetTokenDelayMs(5);
  json inputs = json::array();
  for (int i = 0; i < 12; ++i) inputs.push_back(std::string(size_t(i + 1), char('a' + i)));
  auto r = Post("/v1/embeddings", json{{"input", inputs}}.dump());
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  ASSERT_EQ(j["data"].size(), 12u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(Floats(j["data"][i]["embedding"]), Expected(inputs[i])) << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 78);
}

// A client that leaves while its inputs wait in the queue cancels them, and the inputs
// not yet submitted never are.
TEST_F(EmbeddingsTest, AClientThatLeavesCancelsEveryInput) {
  Start();
  engine_->Pause(true);
  {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(std::chrono::milliseconds(150));
    EXPECT_FALSE(c.Post("/v1/embeddings", R"({"input":["a","b","c"]})", "application/json"));
  }
  for (int i = 0; i < 400 && engine_->cancel_calls() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_->cancel_calls(), 2);
  engine_->Pause(false);
  for (int i = 0; i < 400 && engine_->cancelled_count() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_->cancelled_count(), 2);
  EXPECT_EQ(engine_->Stats().requests_total, 2);  // the queue holds 2: "c" waited, never sent
}

TEST_F(EmbeddingsTest, EngineFailuresAre5xx) {
  Start();
  engine_->FailAfterTokens(0, Status(StatusCode::kInternal, "boom"));
  ExpectError(Post("/v1/embeddings", R"({"input":"x"})"), 500);
  engine_->FailAfterTokens(0, Unavailable("stage 1 (unix:/x.sock) is down"));
  json e = ExpectError(Post("/v1/embeddings", R"({"input":"x"})"), 503);
  EXPECT_EQ(e["code"], "stage_unavailable");
}

}  // namespace embeddings_api_test
}  // namespace shardlm::server
