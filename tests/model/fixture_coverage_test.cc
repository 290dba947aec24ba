// The fixture models left out of the golden tests are exactly those of capabilities still to
// come: each listed model is still refused as unsupported (when its support lands this fails,
// and the model must leave the list so its goldens run), and every other model of
// models.json, every weight type included, loads.
#include <gtest/gtest.h>

#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "support/fixtures.h"

namespace shardlm::testing {
namespace {

TEST(FixtureCoverage, ListedArchitecturesAreStillRefused) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const std::string& model : ModelsOfArchitecturesToCome()) {
    auto file = GgufFile::Open(FixturePath(model));
    ASSERT_TRUE(file.ok()) << model << ": " << file.status().message();
    auto config = ReadModelConfig(**file);
    ASSERT_FALSE(config.ok()) << model << " loads now: take it off the list";
    EXPECT_EQ(config.status().code(), StatusCode::kUnsupported) << config.status().message();
  }
}

TEST(FixtureCoverage, EveryOtherModelLoads) {
  SHARDLM_REQUIRE_FIXTURES();
  const nlohmann::json models = ReadJsonFile(FixturePath("models.json"));
  int loaded = 0;
  for (const auto& [model, info] : models.items()) {
    // A tokenizer-only file (the Qwen3 vocabulary) has no weights to load.
    if (EngineCannotRunYet(model) || info["tensors"].empty()) continue;
    auto file = GgufFile::Open(FixturePath(model));
    ASSERT_TRUE(file.ok()) << model << ": " << file.status().message();
    auto config = ReadModelConfig(**file);
    EXPECT_TRUE(config.ok()) << model << ": " << config.status().message();
    ++loaded;
  }
  EXPECT_GE(loaded, 26);
}

}  // namespace
}  // namespace shardlm::testing
