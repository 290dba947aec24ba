// HTTP tests of what a layer split shows a client, over the MockEngine: the placement in
// GET /props and /v1/models, and a stage that goes down: /health 503 naming it, new
// requests refused with 503 + Retry-After, a request it fails mid-way (503 error object;
// a stream ends with an SSE error event), and service again once it is back.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "server/mock_engine.h"
#include "server/pipeline_metrics.h"
#include "server/server_harness.h"

namespace shardlm::server {
namespace stage_api_test {

const char* kDownMessage =
    "stage 1 (layers 2-4, unix:/tmp/s1.sock) is unavailable: connection reset";

MockEngineOptions TwoStages() {
  MockEngineOptions eo;
  StageInfo a;
  a.index = 0;
  a.layers = LayerRange{0, 2};
  a.first = true;
  a.device = "cpu:0";
  a.threads = 1;
  a.weight_bytes = 123456789012;  // above 2^32: byte counts must not be truncated
  a.kv_bytes = 4096;
  StageInfo b;
  b.index = 1;
  b.layers = LayerRange{2, 4};
  b.last = true;
  b.device = "unix:/tmp/s1.sock";
  b.remote = true;
  b.threads = 1;
  b.weight_bytes = 777;
  b.kv_bytes = 8192;
  eo.stages = {a, b};
  return eo;
}

void ExpectStages(const json& stages) {
  ASSERT_TRUE(stages.is_array());
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0]["index"], 0);
  EXPECT_EQ(stages[0]["layers"], json::array({0, 2}));
  EXPECT_EQ(stages[0]["device"], "cpu:0");
  EXPECT_EQ(stages[0]["remote"], false);
  EXPECT_EQ(stages[0]["threads"], 1);
  EXPECT_EQ(stages[0]["weight_bytes"].get<uint64_t>(), 123456789012u);
  EXPECT_EQ(stages[0]["kv_bytes"], 4096);
  EXPECT_EQ(stages[1]["layers"], json::array({2, 4}));
  EXPECT_EQ(stages[1]["device"], "unix:/tmp/s1.sock");
  EXPECT_EQ(stages[1]["remote"], true);
  EXPECT_EQ(stages[1]["kv_bytes"], 8192);
  EXPECT_EQ(stages[1]["last"], true);
}

TEST_F(ServerTest, PropsShowsThePlacement) {
  StartServer({}, TwoStages());
  auto r = client_->Get("/props");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json props = json::parse(r->body);
  EXPECT_EQ(props["model"], "mock-model");
  EXPECT_EQ(props["n_ctx"], 256);
  EXPECT_EQ(props["n_parallel"], 2);
  ExpectStages(props["stages"]);
}

TEST_F(ServerTest, ModelsMetaCarriesTheStages) {
  StartServer({}, TwoStages());
  auto r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  ExpectStages(json::parse(r->body)["data"][0]["meta"]["stages"]);
}

TEST_F(ServerTest, PropsNeedsTheApiKeyAndOnlyAnswersGet) {
  ServerOptions o;
  o.api_key = "k";
  StartServer(o);
  ExpectError(client_->Get("/props"), 401);
  httplib::Headers auth = {{"Authorization", "Bearer k"}};
  auto r = client_->Get("/props", auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["stages"].size(), 1u);  // the mock's default placement
  ExpectError(client_->Post("/props", auth, "{}", "application/json"), 405);
}

TEST_F(ServerTest, StageDownHealth503NamesTheStage) {
  StartServer({}, TwoStages());
  engine_->SetStageDown(Unavailable("{}", kDownMessage));
  auto r = client_->Get("/health");
  json e = ExpectError(r, 503);
  EXPECT_EQ(e["message"], kDownMessage);
  EXPECT_EQ(e["type"], "unavailable_error");
  EXPECT_EQ(e["code"], "stage_unavailable");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  engine_->SetStageDown(Status::Ok());
  r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["status"], "ok");
}

TEST_F(ServerTest, StageDownRefusesNewRequestsThenServesWhenBack) {
  StartServer({}, TwoStages());
  engine_->SetReply("back again");
  engine_->SetStageDown(Unavailable("{}", kDownMessage));
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    for (const char* stream : {"false", "true"}) {
      std::string body = fmt::format(
          R"({{"prompt":"x","messages":[{{"role":"user","content":"x"}}],"stream":{}}})", stream);
      auto r = Post(path, body);
      json e = ExpectError(r, 503);
      EXPECT_EQ(e["code"], "stage_unavailable") << path;
      EXPECT_EQ(e["message"], kDownMessage);
      EXPECT_EQ(r->get_header_value("Retry-After"), "1");
    }
  }
  engine_->SetStageDown(Status::Ok());
  auto r = Post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "back again");
}

TEST_F(ServerTest, StageLostMidRequestIs503) {
  StartServer({}, TwoStages());
  engine_->SetReply("a long answer that never completes");
  engine_->FailAfterTokens(5, Unavailable("{}", kDownMessage));
  json e = ExpectError(
      Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}]})"), 503);
  EXPECT_EQ(e["code"], "stage_unavailable");
  EXPECT_EQ(e["message"], kDownMessage);
  // The stage stays down: /health and the next request say so.
  ExpectError(client_->Get("/health"), 503);
  ExpectError(Post("/v1/completions", R"({"prompt":"x"})"), 503);
}

TEST_F(ServerTest, StageLostMidStreamEndsWithAnErrorEvent) {
  StartServer({}, TwoStages());
  engine_->SetReply("abcdefghijklmnopqrstuvwxyz");
  engine_->FailAfterTokens(5, Unavailable("{}", kDownMessage));
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    engine_->SetStageDown(Status::Ok());
    auto r = Post(path, R"({"messages":[{"role":"user","content":"x"}],"prompt":"x",
                            "stream":true,"stream_options":{"include_usage":true}})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;  // the stream had begun
    std::vector<std::string> data = SseData(r->body);
    ASSERT_GE(data.size(), 2u) << r->body;
    std::string text;
    for (size_t i = 0; i + 1 < data.size(); ++i) {
      json chunk = json::parse(data[i]);
      ASSERT_FALSE(chunk.contains("error")) << data[i];
      ASSERT_FALSE(chunk["choices"].empty()) << "a usage chunk after the error: " << data[i];
      json choice = chunk["choices"][0];
      EXPECT_TRUE(choice["finish_reason"].is_null()) << data[i];
      if (choice.contains("text")) text += choice["text"].get<std::string>();
      if (choice["delta"].contains("content"))
        text += choice["delta"]["content"].get<std::string>();
    }
    EXPECT_EQ(text, "abcde") << path;
    // The last event is the error: no finish_reason, no usage chunk, no [DONE].
    json last = json::parse(data.back());
    ASSERT_TRUE(last.contains("error")) << r->body;
    EXPECT_EQ(last["error"]["code"], "stage_unavailable");
    EXPECT_EQ(last["error"]["type"], "unavailable_error");
    EXPECT_EQ(last["error"]["message"], kDownMessage);
  }
}

TEST_F(ServerTest, OtherEngineErrorsMidStreamAre500) {
  StartServer();
  engine_->SetReply("abcdef");
  engine_->FailAfterTokens(2, Status(StatusCode::kInternal, "kernel exploded"));
  json e = ExpectError(Post("/v1/completions", R"({"prompt":"x"})"), 500);
  EXPECT_EQ(e["type"], "server_error");
  EXPECT_EQ(e["message"], "kernel exploded");
}

TEST_F(ServerTest, MetricsCarryThePipelineCounters) {
  PipelineCounters counters;
  counters.batches = 7;
  counters.tokens = 40;
  counters.bytes_between = 40 * 1024 * 4;
  counters.max_in_flight = 2;
  std::vector<StageStats> stats(2);
  stats[0].batches = 7;
  stats[0].busy_seconds = 1.5;
  stats[1].tokens = 40;
  stats[1].bytes_out = uint64_t{5} << 33;  // above 2^32: not truncated
  std::vector<StageInfo> stages = TwoStages().stages;
  stages[1].device = "unix:/odd\"dir\\s.sock";
  ServerOptions o;
  o.metrics_extra = [counters, stages, stats] {
    return PipelineMetricsText(counters, stages, stats);
  };
  StartServer(o, TwoStages());
  auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  for (const char* line :
       {"shardlm_pipeline_batches_total 7\n", "shardlm_pipeline_tokens_total 40\n",
        "shardlm_pipeline_bytes_between_stages_total 163840\n",
        "shardlm_pipeline_max_in_flight 2\n", "shardlm_pipeline_failed_batches_total 0\n",
        "# TYPE shardlm_pipeline_max_in_flight gauge\n", "shardlm_requests_total 0\n",
        "shardlm_stage_batches_total{stage=\"0\",device=\"cpu:0\"} 7\n",
        "shardlm_stage_busy_seconds_total{stage=\"0\",device=\"cpu:0\"} 1.5\n",
        "# TYPE shardlm_stage_busy_seconds_total counter\n",
        "shardlm_stage_tokens_total{stage=\"1\",device=\"unix:/odd\\\"dir\\\\s.sock\"} 40\n",
        "shardlm_stage_bytes_out_total{stage=\"1\",device=\"unix:/odd\\\"dir\\\\s.sock\"} "
        "42949672960\n"}) {
    EXPECT_NE(r->body.find(line), std::string::npos) << line << r->body;
  }
}

}  // namespace stage_api_test
}  // namespace shardlm::server
