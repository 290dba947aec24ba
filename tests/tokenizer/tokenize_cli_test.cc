// `shardlm tokenize` end to end: runs the built binary (skipped when it was not built, e.g.
// when only test_tokenizer was asked for) and checks its output format and exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "support/fixtures.h"

namespace shardlm {
namespace {

using ::shardlm::testing::FixturePath;

struct CliRun {
  int exit_code = -1;
  std::string out;
};

CliRun Shardlm(const std::string& args) {
  CliRun run;
  FILE* pipe = popen((testing::ShardlmBinary() + " " + args + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

#define SHARDLM_REQUIRE_FIXTURES_AND_BINARY() \
  do {                                        \
    SHARDLM_REQUIRE_FIXTURES();               \
    SHARDLM_REQUIRE_BINARY();                 \
  } while (0)

TEST(TokenizeCliTest, PrintsIdsLikeLlamaTokenize) {
  SHARDLM_REQUIRE_FIXTURES_AND_BINARY();
  const std::string qwen = FixturePath("qwen3-vocab.gguf");
  CliRun run = Shardlm("tokenize -m " + qwen + " 'Hello, world!<|im_end|>'");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "[9707, 11, 1879, 0, 151645]\n");
  run = Shardlm("tokenize -m " + qwen + " --no-parse-special '<|im_end|>'");
  EXPECT_EQ(run.out, "[27, 91, 318, 6213, 91, 29]\n");
  const std::string stories = FixturePath("stories260K.gguf");
  EXPECT_EQ(Shardlm("tokenize -m " + stories + " 'Hello, world!'").out,
            "[1, 346, 306, 414, 432, 263, 304, 341, 443]\n");
  EXPECT_EQ(Shardlm("tokenize -m " + stories + " --no-bos 'Hello, world!'").out,
            "[346, 306, 414, 432, 263, 304, 341, 443]\n");
}

TEST(TokenizeCliTest, Pieces) {
  SHARDLM_REQUIRE_FIXTURES_AND_BINARY();
  CliRun run = Shardlm("tokenize -m " + FixturePath("stories260K.gguf") + " --pieces 'Hello'");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "     1 -> '<s>'\n   346 -> ' He'\n   306 -> 'll'\n   414 -> 'o'\n");
}

TEST(TokenizeCliTest, ErrorsExitNonZero) {
  SHARDLM_REQUIRE_FIXTURES_AND_BINARY();
  EXPECT_NE(Shardlm("tokenize -m /nonexistent/model.gguf 'x'").exit_code, 0);
  EXPECT_NE(Shardlm("tokenize 'x'").exit_code, 0);
  EXPECT_NE(
      Shardlm("tokenize -m " + FixturePath("qwen3-vocab.gguf") + " -f /nonexistent").exit_code, 0);
}

}  // namespace
}  // namespace shardlm
