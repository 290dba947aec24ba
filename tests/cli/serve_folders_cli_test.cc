// `shardlm serve`'s cache and slot folders through the real binary: they are checked before
// the model loads, so a missing model file shows what was made. Folders it creates are 0700
// with their parents; a --kv-cache-dir, --slot-save-path or slots subfolder owned by another
// user (as root, the test gives it to uid 65534) stops the server with a message that names
// the folder, its owner and the fix.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache/file_mode.h"
#include "cli/cli_process.h"
#include "support/fixtures.h"

namespace shardlm {
namespace {

namespace fs = std::filesystem;
using testing::CliTempPath;
using testing::ProcessResult;
using testing::RunShardlm;
using testing_util::GiveToOtherUser;
using testing_util::ModeOf;

const char kNoModel[] = "/nonexistent/model.gguf";

// A fresh folder for one test, removed at the end.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : path_(CliTempPath(name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

ProcessResult Serve(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"serve", "-m", kNoModel, "--port", "0"};
  args.insert(args.end(), flags.begin(), flags.end());
  return RunShardlm(args, std::chrono::seconds(60));
}

TEST(ServeFoldersCliTest, FoldersItCreatesArePrivate) {
  SHARDLM_REQUIRE_BINARY();
  ScratchDir scratch("private_folders");
  const fs::path cache = scratch.path() / "a" / "cache";
  const fs::path slots = scratch.path() / "b" / "slots";
  const ProcessResult r =
      Serve({"--kv-cache-dir", cache.string(), "--slot-save-path", slots.string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(kNoModel), std::string::npos) << r.err;  // it got as far as the model
  for (const fs::path& dir : {scratch.path() / "a", cache, scratch.path() / "b", slots}) {
    EXPECT_EQ(ModeOf(dir), 0700u) << dir;
  }
}

TEST(ServeFoldersCliTest, AnotherUsersFolderStopsTheServer) {
  SHARDLM_REQUIRE_BINARY();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another user";
  ScratchDir scratch("foreign_folders");
  const fs::path theirs = scratch.path() / "theirs";
  const fs::path mine = scratch.path() / "mine";
  fs::create_directories(theirs);
  fs::create_directories(mine / "slots");
  ASSERT_TRUE(GiveToOtherUser(theirs));
  ASSERT_TRUE(GiveToOtherUser(mine / "slots"));
  struct Case {
    std::vector<std::string> flags;
    fs::path refused;
    std::string flag;
  };
  const std::vector<Case> cases = {
      {{"--kv-cache-dir", theirs.string()}, theirs, "--kv-cache-dir"},
      {{"--slot-save-path", theirs.string()}, theirs, "--slot-save-path"},
      {{"--kv-cache-dir", mine.string()}, mine / "slots", "--kv-cache-dir"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags[0] + " " + c.flags[1]);
    const ProcessResult r = Serve(c.flags);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("'" + c.refused.string() + "' is owned by uid 65534"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("chown"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(kNoModel), std::string::npos) << r.err;  // before the model
  }
}

}  // namespace
}  // namespace shardlm
