// `--devices` / `--layer-split` through the real binary: a bad value, or a remote stage with
// no daemon behind it, makes run, bench and serve exit non-zero with a message that names
// it; `run` over 2 and 3 local stages, over a local stage + a `shardlm shard` daemon (also
// met by a bare socket name in the private socket folder), and over remote + remote + local,
// prints the unsplit greedy text from bitwise the same logits; a daemon of another uid is
// refused by the server, a server of another uid by the daemon, until each allows the other;
// `serve --disagg` refuses a spec it cannot serve.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_process.h"
#include "support/fixtures.h"
#include "support/other_user.h"

namespace shardlm {
namespace {

using testing::FixturePath;
using testing::ProcessResult;
using testing::RunShardlm;

// Every test runs the built binary on the fixtures.
class PlacementCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SHARDLM_REQUIRE_BINARY();
    SHARDLM_REQUIRE_FIXTURES();
  }
};

struct BadFlags {
  std::vector<std::string> flags;
  const char* message;
};

TEST_F(PlacementCliTest, BadValuesExitNonZeroWithAMessage) {
  const std::string model = FixturePath("stories260K.gguf");
  const std::vector<BadFlags> cases = {
      {{"--devices", "gpu:0"}, "unknown device 'gpu:0'"},
      {{"--devices", "cpu:99999"}, "core 99999 does not exist"},
      {{"--devices", "cpu,,cpu"}, "--devices: item 2 is empty"},
      {{"--devices", "unix:"}, "has no socket path"},
      {{"--devices", "cpu,cpu", "--layer-split", "1,0"}, "every weight must be"},
      {{"--devices", "cpu,cpu", "--layer-split", "1,x"}, "is not a number"},
      {{"--devices", "cpu,cpu", "--layer-split", "1,1,1"}, "3 weights but --devices"},
  };
  const std::vector<std::vector<std::string>> commands = {
      {"run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0"},
      {"bench", "-m", model, "-p", "8", "-n", "4", "-r", "1"},
      {"serve", "-m", model, "--port", "0"},
  };
  for (const std::vector<std::string>& command : commands) {
    for (const BadFlags& c : cases) {
      std::vector<std::string> args = command;
      args.insert(args.end(), c.flags.begin(), c.flags.end());
      ProcessResult r = RunShardlm(args, std::chrono::seconds(60));
      SCOPED_TRACE(command[0] + " " + c.flags.back());
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "");
    }
  }
}

// `serve --disagg` refuses a spec it cannot serve before it starts a worker.
TEST_F(PlacementCliTest, ADisaggSpecItCannotServeIsAClearError) {
  const std::string model = FixturePath("stories260K.gguf");
  const std::vector<BadFlags> cases = {
      {{"--disagg", "decode=cpu:1"}, "name the worker's cores, prefill=cpu:A-B"},
      {{"--disagg", "prefill=0,decode=cpu:1"}, "expected cpu:A or cpu:A-B"},
      {{"--disagg", "prefill=cpu:0,gpu=1"}, "expected prefill=cpu:A-B,decode=cpu:C-D"},
      {{"--disagg", "prefill=cpu:0"}, "name the decode side once"},
      {{"--disagg", "prefill=cpu:0,decode=cpu:1", "--devices", "cpu:1"},
       "name the decode side once"},
      {{"--disagg", "prefill=cpu:0,decode=cpu:1", "--prefill-worker", "unix:w.sock"},
       "drop --prefill-worker"},
  };
  for (const BadFlags& c : cases) {
    std::vector<std::string> args = {"serve", "-m", model, "--port", "0"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    ProcessResult r = RunShardlm(args, std::chrono::seconds(60));
    SCOPED_TRACE(c.flags[1]);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("prefill worker started"), std::string::npos) << r.err;
  }
}

TEST_F(PlacementCliTest, MoreStagesThanLayersIsAClearError) {
  // qwen3-tiny-f32 has 2 layers.
  ProcessResult r = RunShardlm({"run", "-m", FixturePath("qwen3-tiny-f32.gguf"), "-p", "Hi", "-n",
                                "4", "--devices", "cpu,cpu,cpu"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("only 2 layers"), std::string::npos) << r.err;
}

TEST_F(PlacementCliTest, AnUnreachableRemoteStageIsAClearError) {
  const std::string socket = testing::CliTempPath("nobody.sock");
  std::filesystem::remove(socket);
  const std::string model = FixturePath("stories260K.gguf");
  for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{
           {"run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0"},
           {"bench", "-m", model, "-p", "8", "-n", "4", "-r", "1"},
           {"serve", "-m", model, "--port", "0"}}) {
    std::vector<std::string> args = command;
    args.insert(args.end(), {"--devices", "cpu,unix:" + socket});
    ProcessResult r = RunShardlm(args, std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 1) << command[0] << ": " << r.err;
    EXPECT_NE(r.err.find(socket), std::string::npos) << command[0] << ": " << r.err;
  }
}

struct RunOutput {
  std::string text;
  std::string logits;  // raw float32 bytes
};

// `run` greedy on stories260K (or a copy of it at `model`) with `extra` flags: the text and
// the logits of each step.
RunOutput GreedyRun(const std::vector<std::string>& extra, const std::string& model = "") {
  const std::string logits_path = testing::CliTempPath("logits.f32");
  std::vector<std::string> args = {"run",
                                   "-m",
                                   model.empty() ? FixturePath("stories260K.gguf") : model,
                                   "-p",
                                   "Once upon a time",
                                   "-n",
                                   "48",
                                   "--temp",
                                   "0",
                                   "-t",
                                   "2",
                                   "--logits-out",
                                   logits_path};
  args.insert(args.end(), extra.begin(), extra.end());
  ProcessResult r = RunShardlm(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  RunOutput out{r.out, testing::ReadTextFile(logits_path)};
  std::filesystem::remove(logits_path);
  return out;
}

void ExpectSameAsUnsplit(const RunOutput& unsplit, const RunOutput& split) {
  EXPECT_EQ(split.text, unsplit.text);
  ASSERT_EQ(split.logits.size(), unsplit.logits.size());
  EXPECT_TRUE(std::memcmp(split.logits.data(), unsplit.logits.data(), unsplit.logits.size()) == 0)
      << "logits differ bitwise";
}

// A `shardlm shard` daemon on core 1 listening on a socket in the test's temp folder (a stale
// socket file is removed first); killed, and its socket removed, when it goes out of scope.
class ShardDaemon {
 public:
  explicit ShardDaemon(const std::string& name)
      : socket_(RemoveStale(testing::CliTempPath(name))),
        process_({"shard", "--listen", "unix:" + socket_, "--cores", "1"}) {}
  ~ShardDaemon() {
    process_.Kill();
    std::filesystem::remove(socket_);
  }
  const std::string& socket() const { return socket_; }
  testing::BackgroundProcess& process() { return process_; }
  bool WaitListening() {
    return process_.WaitFor("listening on unix:" + socket_, std::chrono::seconds(30));
  }

 private:
  static std::string RemoveStale(const std::string& socket) {
    std::filesystem::remove(socket);
    return socket;
  }
  std::string socket_;
  testing::BackgroundProcess process_;
};

TEST_F(PlacementCliTest, LocalSplitsGiveBitwiseTheUnsplitLogits) {
  const RunOutput unsplit = GreedyRun({});
  ASSERT_FALSE(unsplit.text.empty());
  ASSERT_EQ(unsplit.logits.size(), 48u * 512u * sizeof(float));  // 48 steps x n_vocab 512
  {
    SCOPED_TRACE("2 stages");
    ExpectSameAsUnsplit(unsplit, GreedyRun({"--devices", "cpu,cpu", "--layer-split", "1,1"}));
  }
  {
    SCOPED_TRACE("3 stages");
    ExpectSameAsUnsplit(unsplit, GreedyRun({"--devices", "cpu,cpu,cpu", "--layer-split", "2,1,2"}));
  }
}

TEST_F(PlacementCliTest, LocalPlusRemoteGivesBitwiseTheUnsplitLogits) {
  ShardDaemon shard("s1.sock");
  ASSERT_TRUE(shard.WaitListening()) << shard.process().log();
  const RunOutput unsplit = GreedyRun({});
  ExpectSameAsUnsplit(unsplit, GreedyRun({"--devices", "cpu,unix:" + shard.socket()}));
  EXPECT_TRUE(shard.process().WaitFor("serving layers [", std::chrono::seconds(5)))
      << shard.process().log();
}

// A q8_0 KV cache through a shard daemon (the handshake carries the KV type; the daemon
// sizes its pages by it): the same greedy text as unsplit with a q8_0 cache.
TEST_F(PlacementCliTest, Q8_0KvThroughARemoteStageGivesTheUnsplitText) {
  ShardDaemon shard("q8.sock");
  ASSERT_TRUE(shard.WaitListening()) << shard.process().log();
  const std::vector<std::string> args = {"run",
                                         "-m",
                                         FixturePath("qwen3-tiny-q8_0.gguf"),
                                         "-p",
                                         "Once upon a time",
                                         "-n",
                                         "24",
                                         "--temp",
                                         "0",
                                         "-t",
                                         "2",
                                         "--kv-type",
                                         "q8_0"};
  const ProcessResult unsplit = RunShardlm(args);
  ASSERT_EQ(unsplit.exit_code, 0) << unsplit.err;
  std::vector<std::string> split_args = args;
  split_args.insert(split_args.end(), {"--devices", "cpu,unix:" + shard.socket()});
  const ProcessResult split = RunShardlm(split_args);
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(split.out, unsplit.out);
  EXPECT_TRUE(shard.process().WaitFor("serving layers [", std::chrono::seconds(5)))
      << shard.process().log();
}

TEST_F(PlacementCliTest, RemoteFirstStagesGiveBitwiseTheUnsplitLogits) {
  ShardDaemon shard1("r1.sock");
  ShardDaemon shard2("r2.sock");
  ASSERT_TRUE(shard1.WaitListening()) << shard1.process().log();
  ASSERT_TRUE(shard2.WaitListening()) << shard2.process().log();
  // Stage 0 (the embedding) and stage 1 remote, the LM head local.
  const RunOutput unsplit = GreedyRun({});
  ExpectSameAsUnsplit(
      unsplit,
      GreedyRun({"--devices", "unix:" + shard1.socket() + ",unix:" + shard2.socket() + ",cpu",
                 "--layer-split", "1,2,2"}));
  EXPECT_TRUE(shard1.process().WaitFor("serving layers [0, ", std::chrono::seconds(5)))
      << shard1.process().log();
  EXPECT_TRUE(shard2.process().WaitFor("serving layers [", std::chrono::seconds(5)))
      << shard2.process().log();
}

// XDG_RUNTIME_DIR, for this test and the processes it starts, is a fresh folder; the old
// value comes back afterwards.
class ScopedRuntimeDir {
 public:
  ScopedRuntimeDir() : path_(testing::CliTempPath("runtime")) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directory(path_);
    if (const char* old = std::getenv("XDG_RUNTIME_DIR")) saved_ = old;
    ::setenv("XDG_RUNTIME_DIR", path_.c_str(), 1);
  }
  ~ScopedRuntimeDir() {
    if (saved_) {
      ::setenv("XDG_RUNTIME_DIR", saved_->c_str(), 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
    std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::optional<std::string> saved_;
};

TEST_F(PlacementCliTest, BareSocketNameMeetsInThePrivateSocketFolder) {
  ScopedRuntimeDir runtime;
  const std::string folder = runtime.path() + "/shardlm";
  testing::BackgroundProcess shard({"shard", "--listen", "unix:bare.sock", "--cores", "1"});
  ASSERT_TRUE(shard.WaitFor("listening on unix:" + folder + "/bare.sock", std::chrono::seconds(30)))
      << shard.log();
  struct stat st {};
  ASSERT_EQ(::stat(folder.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ExpectSameAsUnsplit(GreedyRun({}), GreedyRun({"--devices", "cpu,unix:bare.sock"}));
  EXPECT_TRUE(shard.WaitFor("serving layers [", std::chrono::seconds(5))) << shard.log();
}

// A daemon run as another user (in that user's own folder, from copies both users can read):
// the server refuses it before the Hello, naming the socket and both uids; trusting it with
// --allow-shard-uid, the server is hung up on by the daemon, which logs the server's uid and
// pid; with --allow-uid on the daemon too, the split gives the unsplit logits.
TEST_F(PlacementCliTest, ShardDaemonOfAnotherUidServesOnlyWhenBothSidesAllowIt) {
  SHARDLM_REQUIRE_ROOT_FOR_OTHER_USER();
  testing::OtherUserDir dir;
  const std::string shardlm = dir.Copy(testing::ShardlmBinary(), "shardlm");
  const std::string model = dir.Copy(FixturePath("stories260K.gguf"), "model.gguf");
  const std::string socket = dir.Subdir("theirs", testing::kOtherUid, 0700) + "/s.sock";
  const std::string own = std::to_string(::geteuid());
  const std::string other = std::to_string(testing::kOtherUid);
  const std::vector<std::string> run = {"run",
                                        "-m",
                                        model,
                                        "-p",
                                        "Once",
                                        "-n",
                                        "4",
                                        "--temp",
                                        "0",
                                        "--devices",
                                        "cpu,unix:" + socket};
  const std::vector<std::string> daemon_args = {shardlm,          "shard",     "--listen",
                                                "unix:" + socket, "--threads", "1"};
  {
    testing::ChildProcess daemon(testing::AsOtherUser(daemon_args), dir.File("daemon1.log"));
    ASSERT_TRUE(daemon.WaitFor("listening on unix:" + socket, std::chrono::seconds(30)))
        << daemon.output();
    ProcessResult r = RunShardlm(run);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("stage 1 (unix:" + socket + "): the process listening on " + socket +
                         " runs as uid " + other + " (pid " + std::to_string(daemon.pid()) +
                         "); only uid " + own + " may (--allow-shard-uid UID trusts"),
              std::string::npos)
        << r.err;

    std::vector<std::string> trusting = run;
    trusting.insert(trusting.end(), {"--allow-shard-uid", other});
    r = RunShardlm(trusting);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("before answering the Hello"), std::string::npos) << r.err;
    EXPECT_TRUE(daemon.WaitFor(
        "refused a connection: the client on " + socket + " runs as uid " + own + " (pid ",
        std::chrono::seconds(5)))
        << daemon.output();
    EXPECT_EQ(daemon.output().find("serving layers"), std::string::npos) << daemon.output();
  }
  std::vector<std::string> allowing = daemon_args;
  allowing.insert(allowing.end(), {"--allow-uid", own});
  testing::ChildProcess daemon(testing::AsOtherUser(allowing), dir.File("daemon2.log"));
  ASSERT_TRUE(daemon.WaitFor("listening on unix:" + socket, std::chrono::seconds(30)))
      << daemon.output();
  ExpectSameAsUnsplit(
      GreedyRun({}),
      GreedyRun({"--devices", "cpu,unix:" + socket, "--allow-shard-uid", other}, model));
  EXPECT_TRUE(daemon.WaitFor("serving layers [", std::chrono::seconds(5))) << daemon.output();
}

}  // namespace
}  // namespace shardlm
