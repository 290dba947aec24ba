// The Responses API's store of recent responses: a conversation follows previous_response_id
// links oldest first, items are found by id, and the byte budget evicts the oldest responses
// (their items and the chains through them go too).
#include "server/response_store.h"

#include <gtest/gtest.h>

#include <string>

namespace shardlm::server {
namespace response_store_test {

Json Message(const std::string& id, const std::string& role, const std::string& text) {
  return Json{{"id", id}, {"type", "message"}, {"role", role}, {"content", text}};
}

TEST(ResponseStore, ConversationFollowsTheChainOldestFirst) {
  ResponseStore store;
  store.Put("resp_1", "", Json::array({Message("in1", "user", "a")}),
            Json::array({Message("msg_1", "assistant", "b")}));
  store.Put("resp_2", "resp_1", Json::array({Message("in2", "user", "c")}),
            Json::array({Message("msg_2", "assistant", "d")}));
  Result<Json> items = store.Conversation("resp_2");
  ASSERT_TRUE(items.ok()) << items.status().message();
  std::string texts;
  for (const Json& item : items.value()) texts += item["content"].get<std::string>();
  EXPECT_EQ(texts, "abcd");
  EXPECT_EQ(store.Conversation("resp_1")->size(), 2u);
  EXPECT_EQ(store.Item("msg_1").value()["content"], "b");
  EXPECT_EQ(store.Item("in2").value()["content"], "c");
  EXPECT_FALSE(store.Item("msg_3").has_value());
  Result<Json> missing = store.Conversation("resp_9");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("resp_9"), std::string::npos);
}

TEST(ResponseStore, TheBudgetEvictsTheOldestResponsesAndTheirChains) {
  const Json big = Json::array({Message("x", "user", std::string(400, 'x'))});
  ResponseStore store(1500);
  store.Put("resp_1", "", big, Json::array({Message("msg_1", "assistant", "one")}));
  store.Put("resp_2", "resp_1", Json::array(), Json::array({Message("msg_2", "assistant", "2")}));
  store.Put("resp_3", "", big, Json::array({Message("msg_3", "assistant", "three")}));
  EXPECT_EQ(store.responses(), 3u);
  EXPECT_LE(store.bytes(), 1500u);
  store.Put("resp_4", "", big, Json::array({Message("msg_4", "assistant", "four")}));
  // resp_1 went first: its items with it, and resp_2's chain now breaks where it was.
  EXPECT_LE(store.bytes(), 1500u);
  EXPECT_FALSE(store.Item("msg_1").has_value());
  EXPECT_TRUE(store.Item("msg_2").has_value());
  Result<Json> broken = store.Conversation("resp_2");
  EXPECT_EQ(broken.status().code(), StatusCode::kNotFound);
  EXPECT_NE(broken.status().message().find("'resp_1' (which 'resp_2' continued)"),
            std::string::npos)
      << broken.status().message();
  EXPECT_TRUE(store.Conversation("resp_4").ok());
  // The item id "x" is in resp_3 and resp_4: it stays findable while either is kept.
  EXPECT_TRUE(store.Item("x").has_value());
}

TEST(ResponseStore, AResponseLargerThanTheBudgetIsNotKept) {
  ResponseStore store(100);
  store.Put("resp_1", "", Json::array({Message("m", "user", std::string(200, 'y'))}),
            Json::array());
  EXPECT_EQ(store.responses(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_FALSE(store.Item("m").has_value());
}

}  // namespace response_store_test
}  // namespace shardlm::server
