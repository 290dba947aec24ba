// HTTP tests of the /slots routes over the MockEngine: answers in llama.cpp's shape, file
// names confined to the slot folder (traversal, absolute, subfolder, empty and hidden names
// get 400 and touch nothing), unknown slot 404, unknown action 400, missing file 404,
// corrupt file 400, busy slot 409, save and restore off without a folder (the error names
// the flag), --api-key, 405 for a wrong method, and bodiless POSTs (`curl -X POST`) are
// answered at once.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cache/file_mode.h"
#include "server/server_harness.h"
#include "support/temp_dir.h"

namespace shardlm::server {
namespace slot_api_test {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kChat = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";

class SlotApiTest : public ServerTest {
 protected:
  // A server whose slot folder is a subfolder of a fresh temp folder (so a name that
  // escaped would land beside it, in parent()).
  void StartWithSlots(ServerOptions options = {}) {
    folder_ = parent_.path() / "slots";
    fs::create_directories(folder_);
    options.slot_save_dir = folder_.string();
    StartServer(options);
  }
  httplib::Result Slot(const std::string& id_and_query, const std::string& body) {
    return Post("/slots/" + id_and_query, body);
  }
  static std::string Named(const std::string& name) { return json{{"filename", name}}.dump(); }
  int FilesIn(const fs::path& dir) const {
    int n = 0;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) n += entry.is_regular_file();
    return n;
  }

  testing_util::TempDir parent_;
  fs::path folder_;
};

TEST_F(SlotApiTest, SaveEraseRestoreInLlamaCppsShape) {
  StartWithSlots();
  engine_->SetReply("Hello there");
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  auto r = Slot("0?action=save", Named("chat1"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json saved = json::parse(r->body);
  EXPECT_EQ(saved["id_slot"], 0);
  EXPECT_EQ(saved["filename"], "chat1");
  const int n_saved = saved["n_saved"].get<int>();
  EXPECT_GT(n_saved, 11);  // the prompt and the 11-token reply
  EXPECT_EQ(saved["n_written"].get<uint64_t>(), fs::file_size(folder_ / "chat1"));
  EXPECT_TRUE(saved["timings"]["save_ms"].is_number());

  json slots = json::parse(client_->Get("/slots")->body);
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0]["id"], 0);
  EXPECT_EQ(slots[0]["n_tokens"], n_saved);
  EXPECT_EQ(slots[0]["is_processing"], false);
  EXPECT_EQ(slots[0]["state"], "idle");
  EXPECT_EQ(slots[0]["n_ctx"], 256);
  EXPECT_EQ(slots[1]["n_tokens"], 0);

  r = Slot("0?action=erase", "");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body), json({{"id_slot", 0}, {"n_erased", n_saved}}));
  EXPECT_EQ(json::parse(client_->Get("/slots")->body)[0]["n_tokens"], 0);

  r = Slot("1?action=restore", Named("chat1"));
  ASSERT_EQ(r->status, 200) << r->body;
  json restored = json::parse(r->body);
  EXPECT_EQ(restored["id_slot"], 1);
  EXPECT_EQ(restored["filename"], "chat1");
  EXPECT_EQ(restored["n_restored"], n_saved);
  EXPECT_EQ(restored["n_read"], saved["n_written"]);
  EXPECT_TRUE(restored["timings"]["restore_ms"].is_number());
  EXPECT_EQ(json::parse(client_->Get("/slots")->body)[1]["n_tokens"], n_saved);
}

TEST_F(SlotApiTest, FileNamesStayInTheSlotFolder) {
  StartWithSlots();
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  for (const std::string& name :
       {std::string("../x"), std::string("/etc/passwd"), std::string("a/b"), std::string(""),
        std::string(".hidden"), std::string(".."), std::string("..\\x")}) {
    for (const char* action : {"save", "restore"}) {
      SCOPED_TRACE(name + " " + action);
      json e = ExpectError(Slot(std::string("0?action=") + action, Named(name)), 400);
      EXPECT_EQ(e["param"], "filename");
    }
  }
  EXPECT_EQ(FilesIn(parent_.path()), 0);
  json missing = ExpectError(Slot("0?action=save", "{}"), 400);
  EXPECT_EQ(missing["param"], "filename");
  json not_string = ExpectError(Slot("0?action=save", R"({"filename": 3})"), 400);
  EXPECT_EQ(not_string["param"], "filename");
  ExpectError(Slot("0?action=save", "not json"), 400);
}

TEST_F(SlotApiTest, BadIdsActionsAndFiles) {
  StartWithSlots();
  for (const char* id : {"abc", "-1", "1x", "", "99999999999"}) {
    SCOPED_TRACE(id);
    json e = ExpectError(Slot(std::string(id) + "?action=erase", ""), 400);
    EXPECT_EQ(e["param"], "id_slot");
  }
  json unknown = ExpectError(Slot("2?action=erase", ""), 404);
  EXPECT_EQ(unknown["code"], "slot_not_found");
  EXPECT_EQ(ExpectError(Slot("0?action=load", Named("a")), 400)["param"], "action");
  EXPECT_EQ(ExpectError(Slot("0", Named("a")), 400)["param"], "action");
  json missing = ExpectError(Slot("0?action=restore", Named("nothing")), 404);
  EXPECT_EQ(missing["code"], "file_not_found");
  std::ofstream(folder_ / "junk") << "not a slot file";
  json corrupt = ExpectError(Slot("0?action=restore", Named("junk")), 400);
  EXPECT_EQ(corrupt["code"], "invalid_slot_file");
  json empty = ExpectError(Slot("1?action=save", Named("empty")), 400);
  EXPECT_NE(empty["message"].get<std::string>().find("no tokens"), std::string::npos);
  // The server still serves.
  EXPECT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
}

TEST_F(SlotApiTest, ABusySlotIs409) {
  StartWithSlots();
  engine_->SetReply("abcdefghij");
  engine_->SetTokenDelayMs(50);
  std::thread chat([&] {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    auto r = c.Post("/v1/chat/completions", kChat, "application/json");
    EXPECT_TRUE(r && r->status == 200);
  });
  bool busy = false;
  for (int i = 0; i < 200 && !busy; ++i) {
    busy = json::parse(client_->Get("/slots")->body)[0]["is_processing"].get<bool>();
    if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(busy);
  json e = ExpectError(Slot("0?action=save", Named("busy")), 409);
  EXPECT_EQ(e["code"], "slot_busy");
  EXPECT_EQ(ExpectError(Slot("0?action=erase", ""), 409)["code"], "slot_busy");
  chat.join();
  EXPECT_EQ(Slot("0?action=save", Named("busy"))->status, 200);
}

TEST_F(SlotApiTest, TheFirstSaveCreatesAMissingFolder) {
  ServerOptions options;
  options.slot_save_dir = (parent_.path() / "cache" / "slots").string();
  StartServer(options);
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  EXPECT_EQ(ExpectError(Slot("0?action=restore", Named("a")), 404)["code"], "file_not_found");
  EXPECT_FALSE(fs::exists(options.slot_save_dir));
  EXPECT_EQ(Slot("0?action=save", Named("a"))->status, 200);
  EXPECT_TRUE(fs::exists(fs::path(options.slot_save_dir) / "a"));
}

// The folder a first save makes is 0700 (its missing parents too), the file in it 0600.
TEST_F(SlotApiTest, TheFirstSaveMakesAPrivateFolder) {
  testing_util::ScopedUmask open_umask(0);
  ServerOptions options;
  options.slot_save_dir = (parent_.path() / "cache" / "slots").string();
  StartServer(options);
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  ASSERT_EQ(Slot("0?action=save", Named("a"))->status, 200);
  EXPECT_EQ(testing_util::ModeOf(parent_.path() / "cache"), 0700u);
  EXPECT_EQ(testing_util::ModeOf(options.slot_save_dir), 0700u);
  EXPECT_EQ(testing_util::ModeOf(fs::path(options.slot_save_dir) / "a"), 0600u);
}

// A slot folder that another user owns is refused at every use, with a message that names
// it and its owner; nothing is read or written there.
TEST_F(SlotApiTest, AnotherUsersSlotFolderIsRefused) {
  StartWithSlots();
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  ASSERT_EQ(Slot("0?action=save", Named("mine"))->status, 200);
  ASSERT_EQ(Slot("0?action=erase", "")->status, 200);
  if (!testing_util::GiveToOtherUser(folder_)) GTEST_SKIP() << "needs root to give it away";
  for (const char* action : {"save", "restore"}) {
    SCOPED_TRACE(action);
    json e = ExpectError(Slot(std::string("0?action=") + action, Named("mine")), 500);
    EXPECT_EQ(e["code"], "slot_folder_unusable");
    const std::string message = e["message"].get<std::string>();
    EXPECT_NE(message.find(folder_.string()), std::string::npos) << message;
    EXPECT_NE(message.find("owned by uid 65534"), std::string::npos) << message;
  }
  EXPECT_EQ(FilesIn(folder_), 1);
  EXPECT_EQ(json::parse(client_->Get("/slots")->body)[0]["n_tokens"], 0);  // not restored
}

// An engine whose slot saves and restores fail with a given status.
class FailingSlotEngine : public MockEngine {
 public:
  explicit FailingSlotEngine(Status failure) : failure_(std::move(failure)) {}
  Result<SlotSaveResult> SaveSlot(int32_t, const std::filesystem::path&) override {
    return failure_;
  }
  Result<SlotRestoreResult> RestoreSlot(int32_t, const std::filesystem::path&) override {
    return failure_;
  }

 private:
  Status failure_;
};

// Another transfer still running is 429 with Retry-After (the client retries); a save past
// the slot budget is 507 (the client frees room).
TEST(SlotApiErrors, BusyTransfersAre429AndAFullBudgetIs507) {
  testing_util::TempDir folder;
  struct Case {
    Status failure;
    int http_status;
    const char* code;
  };
  const Case cases[] = {
      {ResourceExhausted("another slot save or restore is running"), 429, "slot_io_busy"},
      {QuotaExceeded("saving needs 2.0 MiB ... --slot-save-budget"), 507, "insufficient_storage"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.code);
    FailingSlotEngine engine(c.failure);
    ServerOptions options;
    options.port = 0;
    options.slot_save_dir = folder.path().string();
    auto server = HttpServer::Create(engine, options);
    ASSERT_TRUE(server.ok()) << server.status().message();
    ASSERT_TRUE((*server)->Bind().ok());
    std::thread thread([&] { (*server)->Run(); });
    httplib::Client client("127.0.0.1", (*server)->port());
    client.set_read_timeout(10, 0);
    auto r = client.Post("/slots/0?action=save", R"({"filename":"a"})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, c.http_status) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], c.code) << r->body;
    EXPECT_EQ(r->get_header_value("Retry-After"), c.http_status == 429 ? "1" : "");
    (*server)->Stop();
    thread.join();
  }
}

TEST_F(SlotApiTest, SaveAndRestoreAreOffWithoutAFolder) {
  StartServer();
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  for (const char* action : {"save", "restore"}) {
    json e = ExpectError(Slot(std::string("0?action=") + action, Named("chat1")), 400);
    EXPECT_NE(e["message"].get<std::string>().find("--slot-save-path"), std::string::npos)
        << e["message"];
    EXPECT_EQ(e["code"], "slot_save_disabled");
  }
  EXPECT_EQ(Slot("0?action=erase", "")->status, 200);
  EXPECT_EQ(client_->Get("/slots")->status, 200);
}

TEST_F(SlotApiTest, ApiKeyProtectsSlotsAndWrongMethodsAre405) {
  ServerOptions options;
  options.api_key = "sekrit";
  StartWithSlots(options);
  ExpectError(client_->Get("/slots"), 401);
  ExpectError(Slot("0?action=erase", ""), 401);
  httplib::Headers good = {{"Authorization", "Bearer sekrit"}};
  EXPECT_EQ(client_->Get("/slots", good)->status, 200);
  EXPECT_EQ(client_->Post("/slots/0?action=erase", good, "", "application/json")->status, 200);
  ExpectError(client_->Get("/slots/0", good), 405);
  ExpectError(client_->Post("/slots", good, "", "application/json"), 405);
  ExpectError(client_->Get("/slots/0/x", good), 404);
}

// `curl -X POST '.../slots/0?action=erase'` sends no Content-Length: erase needs no body
// and answers at once; any other bodiless POST gets an error saying how to send one.
TEST_F(SlotApiTest, BodilessPostsAnswerAtOnce) {
  StartWithSlots();
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  const std::string host = "127.0.0.1:" + std::to_string(server_->port());
  const auto start = std::chrono::steady_clock::now();
  const std::string erased =
      RawExchange(server_->port(), "POST /slots/0?action=erase HTTP/1.1\r\nHost: " + host +
                                       "\r\nConnection: close\r\n\r\n");
  EXPECT_NE(erased.find("200 OK"), std::string::npos) << erased;
  EXPECT_NE(erased.find("\"n_erased\""), std::string::npos) << erased;
  const std::string chat =
      RawExchange(server_->port(), "POST /v1/chat/completions HTTP/1.1\r\nHost: " + host +
                                       "\r\nConnection: close\r\n\r\n");
  EXPECT_NE(chat.find("400 Bad Request"), std::string::npos) << chat;
  EXPECT_NE(chat.find("Content-Length: 0"), std::string::npos) << chat;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace slot_api_test
}  // namespace shardlm::server
