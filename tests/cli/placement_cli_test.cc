// `--devices` / `--layer-split` through the real binary: a bad value, or a remote stage with
// no daemon behind it, makes run, bench and serve exit non-zero with a message that names
// it; `run` over 2 and 3 local stages, over a local stage + a `shardlm shard` daemon, and
// over remote + remote + local, prints the unsplit greedy text from bitwise the same logits.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_process.h"
#include "support/fixtures.h"

namespace shardlm {
namespace {

using testing::FixturePath;
using testing::ProcessResult;
using testing::RunShardlm;

struct BadFlags {
  std::vector<std::string> flags;
  const char* message;
};

TEST(PlacementCliTest, BadValuesExitNonZeroWithAMessage) {
  SHARDLM_REQUIRE_BINARY();
  SHARDLM_REQUIRE_FIXTURES();
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

TEST(PlacementCliTest, MoreStagesThanLayersIsAClearError) {
  SHARDLM_REQUIRE_BINARY();
  SHARDLM_REQUIRE_FIXTURES();
  // qwen3-tiny-f32 has 2 layers.
  ProcessResult r = RunShardlm({"run", "-m", FixturePath("qwen3-tiny-f32.gguf"), "-p", "Hi", "-n",
                                "4", "--devices", "cpu,cpu,cpu"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("only 2 layers"), std::string::npos) << r.err;
}

TEST(PlacementCliTest, AnUnreachableRemoteStageIsAClearError) {
  SHARDLM_REQUIRE_BINARY();
  SHARDLM_REQUIRE_FIXTURES();
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

// `run` greedy on stories260K with `extra` flags: the text and the logits of each step.
RunOutput GreedyRun(const std::vector<std::string>& extra) {
  const std::string logits_path = testing::CliTempPath("logits.f32");
  std::vector<std::string> args = {"run",
                                   "-m",
                                   FixturePath("stories260K.gguf"),
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

TEST(PlacementCliTest, LocalSplitsGiveBitwiseTheUnsplitLogits) {
  SHARDLM_REQUIRE_BINARY();
  SHARDLM_REQUIRE_FIXTURES();
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

TEST(PlacementCliTest, LocalPlusRemoteGivesBitwiseTheUnsplitLogits) {
  SHARDLM_REQUIRE_BINARY();
  SHARDLM_REQUIRE_FIXTURES();
  ShardDaemon shard("s1.sock");
  ASSERT_TRUE(shard.WaitListening()) << shard.process().log();
  const RunOutput unsplit = GreedyRun({});
  ExpectSameAsUnsplit(unsplit, GreedyRun({"--devices", "cpu,unix:" + shard.socket()}));
  EXPECT_TRUE(shard.process().WaitFor("serving layers [", std::chrono::seconds(5)))
      << shard.process().log();
}

// A q8_0 KV cache through a shard daemon (the handshake carries the KV type; the daemon
// sizes its pages by it): the same greedy text as unsplit with a q8_0 cache.
TEST(PlacementCliTest, Q8_0KvThroughARemoteStageGivesTheUnsplitText) {
  SHARDLM_REQUIRE_BINARY();
  SHARDLM_REQUIRE_FIXTURES();
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

TEST(PlacementCliTest, RemoteFirstStagesGiveBitwiseTheUnsplitLogits) {
  SHARDLM_REQUIRE_BINARY();
  SHARDLM_REQUIRE_FIXTURES();
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

}  // namespace
}  // namespace shardlm
