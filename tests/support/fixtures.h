// Test helpers: where the shared fixtures are, and how to read them.
//
// A fresh clone has no ../shared: tests that need fixtures skip with a message. Under CI
// (CI=true) a missing fixture is a failure, never a skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace shardlm::testing {

// ../shared/fixtures beside the source tree, or $SHARDLM_FIXTURES. Empty if absent.
std::string FixturesDir();
// Path of one fixture file; empty if the fixtures folder is absent.
std::string FixturePath(const std::string& name);
bool UnderCi();
std::vector<float> ReadF32File(const std::string& path);
nlohmann::json ReadJsonFile(const std::string& path);
std::string ReadTextFile(const std::string& path);
// Fixture models of capabilities still to come. The fixtures hold acceptance tests of later
// work too: architectures the engine does not run yet (qwen3moe, laguna). Tests over
// golden.json and models.json leave these models out; the FixtureCoverage tests check that each is
// still refused as unsupported, so an entry must leave the list, and its goldens start running,
// once its support lands. (Every weight type of the fixtures is readable.)
bool EngineCannotRunYet(const std::string& model_file);
const std::vector<std::string>& ModelsOfArchitecturesToCome();
// golden.json's entries the engine runs today (arch llama, qwen3 or gemma3, readable weights).
std::vector<nlohmann::json> RunnableGoldenEntries();
// golden.json's entry `id`; null, and a failed expectation, when it has none.
nlohmann::json GoldenEntry(const std::string& id);
// A fixture model's file or a golden entry's id as a test name suffix: ".gguf" dropped, and
// every character other than a letter or digit written as '_'.
std::string FixtureTestName(const std::string& name);
// The fixed clock the fixture renderings were made with (strftime_now): 2026-11-22 00:00:00.
std::tm FixtureClock();
// A bos/eos token of templates.json: null (not passed to the template) is nullopt.
std::optional<std::string> OptionalToken(const nlohmann::json& token);
// The `shardlm` binary built beside the tests.
std::string ShardlmBinary();
bool BinaryBuilt();

}  // namespace shardlm::testing

// Skips the test (fresh clone) or fails it (CI) when the fixtures folder is missing.
#define SHARDLM_REQUIRE_FIXTURES()                                                              \
  do {                                                                                          \
    if (::shardlm::testing::FixturesDir().empty()) {                                            \
      if (::shardlm::testing::UnderCi()) FAIL() << "CI=true but ../shared/fixtures is missing"; \
      GTEST_SKIP() << "../shared/fixtures not found (set SHARDLM_FIXTURES); skipping";          \
    }                                                                                           \
  } while (0)

// Skips (fresh build without the binary) or fails (CI) when `shardlm` is not built.
#define SHARDLM_REQUIRE_BINARY()                                                                 \
  do {                                                                                           \
    if (!::shardlm::testing::BinaryBuilt()) {                                                    \
      if (::shardlm::testing::UnderCi())                                                         \
        FAIL() << "CI=true but " << ::shardlm::testing::ShardlmBinary() << " is missing";        \
      GTEST_SKIP() << ::shardlm::testing::ShardlmBinary() << " not built; build target shardlm"; \
    }                                                                                            \
  } while (0)
