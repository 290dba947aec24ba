// The fixture models, loaded once per test binary: the pipeline and engine tests build
// many pipelines and schedulers over the same few files, and loading (tokenizer and
// weights) is most of a small test's time.
//
// Goals: one cache of loaded fixture models for every test binary that runs them.
// Non-goals: models a test writes itself, load options per test (none prefault).
//
// Thread safety: none (call from the test thread). Lifetime: a loaded model lives until the
// process exits, so objects made from it must be destroyed first (a cache made after this
// one's first use is destroyed before it).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "pipeline/model_loader.h"
#include "support/fixtures.h"

namespace shardlm::testing_util {

// The fixture model `file`, loaded on first use (a null model, and a failed expectation,
// when it cannot be loaded).
inline const LoadedModel& Fixture(const std::string& file) {
  static std::map<std::string, std::unique_ptr<LoadedModel>> cache;
  std::unique_ptr<LoadedModel>& slot = cache[file];
  if (!slot) {
    auto loaded = LoadModelFile(testing::FixturePath(file), {.prefault = false});
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    slot = std::make_unique<LoadedModel>(loaded.ok() ? std::move(loaded).value() : LoadedModel{});
  }
  return *slot;
}

}  // namespace shardlm::testing_util
