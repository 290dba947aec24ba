// Test helpers: where the shared fixtures are, and how to read them.
//
// A fresh clone has no ../shared: tests that need fixtures skip with a message. Under CI
// (CI=true) a missing fixture is a failure, never a skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
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
