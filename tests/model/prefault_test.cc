// Partial loading: the bytes a stage binds (StageWeightBytes) add up across a split to the
// whole model, and prefaulting a stage makes only its share of the file resident.
#include "model/prefault.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "model/model.h"
#include "support/fixtures.h"

namespace shardlm {
namespace {

using testing::FixturePath;

std::shared_ptr<const GgufFile> OpenFixture(const std::string& name) {
  auto file = GgufFile::Open(FixturePath(name));
  EXPECT_TRUE(file.ok()) << file.status().message();
  return file.ok() ? std::shared_ptr<const GgufFile>(std::move(file).value()) : nullptr;
}

size_t BoundBytes(std::shared_ptr<const GgufFile> file, LayerRange range) {
  auto model = Model::Load(std::move(file), range);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? StageWeightBytes(model.value()->weights()) : 0;
}

// Resident bytes of the mapping that contains `address` (/proc/self/smaps "Rss:").
size_t ResidentBytes(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t target = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > 8) {
      inside = lo <= target && target < hi;
    } else if (inside && line.starts_with("Rss:")) {
      size_t kib = 0;
      std::istringstream(line.substr(4)) >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

TEST(StageWeightBytesTest, SplitStagesAddUpToTheWholeModel) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* name : {"stories260K.gguf", "qwen3-tiny-q4_k_m.gguf"}) {
    SCOPED_TRACE(name);
    auto file = OpenFixture(name);
    ASSERT_NE(file, nullptr);
    size_t all_tensors = 0;
    for (const GgufTensorInfo& tensor : file->tensors()) all_tensors += tensor.n_bytes;
    const size_t whole = BoundBytes(file, kAllLayers);
    EXPECT_EQ(whole, all_tensors);  // the fixtures hold only tensors the model binds
    auto config = ReadModelConfig(*file);
    ASSERT_TRUE(config.ok());
    const int n_layers = config->n_layers;
    const size_t first = BoundBytes(file, {0, 1});
    const size_t rest = BoundBytes(file, {1, n_layers});
    EXPECT_EQ(first + rest, whole);
    EXPECT_GT(first, file->FindTensor("token_embd.weight")->n_bytes);
    EXPECT_GT(rest, file->FindTensor("output.weight")->n_bytes);
  }
}

TEST(PrefaultTest, AStageMakesOnlyItsOwnBytesResident) {
  SHARDLM_REQUIRE_FIXTURES();
  // A fresh mapping of its own: nothing of it is resident beyond the header yet.
  auto file = OpenFixture("qwen3-tiny-f32.gguf");  // 2 layers of ~2.4 MB
  ASSERT_NE(file, nullptr);
  auto model = Model::Load(file, {1, 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const size_t stage_bytes = StageWeightBytes(model.value()->weights());
  ASSERT_GT(file->file_size(), stage_bytes + (2u << 20));  // the test can tell the difference
  const void* mapping = file->header_bytes().data();
  const size_t before = ResidentBytes(mapping);
  EXPECT_EQ(PrefaultStage(model.value()->weights()), stage_bytes);
  const size_t after = ResidentBytes(mapping);
  if (before == 0 && after == 0) GTEST_SKIP() << "/proc/self/smaps shows no Rss";
  // Every page of the stage is in; at most fault-around slack (64 KiB per boundary) beyond.
  EXPECT_GE(after, before + stage_bytes - 64 * 1024) << "before " << before;
  EXPECT_LE(after, before + stage_bytes + 512 * 1024) << "before " << before;
}

}  // namespace
}  // namespace shardlm
