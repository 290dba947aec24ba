// Placement: `--devices` and `--layer-split` parsing with their errors, layer costs (weight
// elements) of a fixture model, and the layer ranges planned from costs and weights.
#include "pipeline/placement.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/fixtures.h"

namespace shardlm {
namespace placement_test {

using testing::FixturePath;

constexpr int kCores = 4;  // the machine the parser is told about

std::vector<DeviceSpec> Devices(std::string_view text) {
  auto devices = ParseDevices(text, kCores);
  EXPECT_TRUE(devices.ok()) << text << ": " << devices.status().message();
  return devices.ok() ? devices.value() : std::vector<DeviceSpec>{};
}

// The error message of a text that must not parse (empty when it parses).
std::string DeviceError(std::string_view text) {
  auto devices = ParseDevices(text, kCores);
  if (devices.ok()) return "";
  EXPECT_EQ(devices.status().code(), StatusCode::kInvalidArgument);
  return devices.status().message();
}

std::string SplitError(std::string_view text) {
  auto weights = ParseLayerSplit(text);
  if (weights.ok()) return "";
  EXPECT_EQ(weights.status().code(), StatusCode::kInvalidArgument);
  return weights.status().message();
}

std::vector<std::pair<int, int>> Plan(const std::vector<size_t>& bytes, size_t n_stages,
                                      const std::vector<double>& weights) {
  auto ranges = PlanLayerRanges(bytes, n_stages, weights);
  EXPECT_TRUE(ranges.ok()) << ranges.status().message();
  std::vector<std::pair<int, int>> pairs;
  if (ranges.ok()) {
    for (const LayerRange& range : ranges.value()) pairs.emplace_back(range.begin, range.end);
  }
  return pairs;
}

using Ranges = std::vector<std::pair<int, int>>;

TEST(ParseDevicesTest, EmptyIsOneUnpinnedCpu) {
  const auto devices = Devices("");
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].kind, DeviceSpec::Kind::kCpu);
  EXPECT_TRUE(devices[0].cores.empty());
  EXPECT_FALSE(devices[0].remote());
  EXPECT_EQ(devices[0].ToString(), "cpu");
}

TEST(ParseDevicesTest, CoreSetsAndSockets) {
  const auto devices = Devices("cpu,cpu:3,cpu:0-1,unix:/x.sock");
  ASSERT_EQ(devices.size(), 4u);
  EXPECT_TRUE(devices[0].cores.empty());
  EXPECT_EQ(devices[1].cores, std::vector<int>{3});
  EXPECT_EQ(devices[2].cores, (std::vector<int>{0, 1}));
  EXPECT_EQ(devices[3].kind, DeviceSpec::Kind::kUnix);
  EXPECT_EQ(devices[3].socket_path, "/x.sock");
  EXPECT_TRUE(devices[3].remote());
  EXPECT_FALSE(devices[2].remote());
}

TEST(ParseDevicesTest, ToStringRoundTrips) {
  for (const char* text :
       {"cpu", "cpu:3", "cpu:0-1", "cpu:0-3", "unix:/run/shardlm/s1.sock", "unix:relative.sock"}) {
    const auto devices = Devices(text);
    ASSERT_EQ(devices.size(), 1u) << text;
    EXPECT_EQ(devices[0].ToString(), text);
  }
}

TEST(ParseDevicesTest, SpacesAroundItemsAreIgnored) {
  const auto devices = Devices(" cpu:0 , unix:/a b.sock ");
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].ToString(), "cpu:0");
  EXPECT_EQ(devices[1].socket_path, "/a b.sock");  // inner spaces belong to the path
}

TEST(ParseDevicesTest, EmptyItemsAreErrors) {
  EXPECT_NE(DeviceError("cpu:0,,cpu:1").find("item 2 is empty"), std::string::npos)
      << DeviceError("cpu:0,,cpu:1");
  EXPECT_NE(DeviceError("cpu:0,").find("item 2 is empty"), std::string::npos);
  EXPECT_NE(DeviceError(",cpu").find("item 1 is empty"), std::string::npos);
  EXPECT_NE(DeviceError("cpu, ,cpu").find("empty"), std::string::npos);
}

TEST(ParseDevicesTest, BadCoreRangesAreErrors) {
  EXPECT_NE(DeviceError("cpu:3-1").find("reversed"), std::string::npos) << DeviceError("cpu:3-1");
  for (const char* text : {"cpu:", "cpu:-1", "cpu:1-", "cpu:a", "cpu:1x", "cpu:0-1-2", "cpu: 1",
                           "cpu:+1", "cpu:99999999999999999999"}) {
    const std::string error = DeviceError(text);
    EXPECT_NE(error.find("is not a core number"), std::string::npos) << text << ": " << error;
  }
}

TEST(ParseDevicesTest, CoresBeyondTheMachineAreErrors) {
  const std::string error = DeviceError("cpu:2-5");
  EXPECT_NE(error.find("core 5 does not exist"), std::string::npos) << error;
  EXPECT_NE(error.find("4 cores (0-3)"), std::string::npos) << error;
  EXPECT_NE(DeviceError("cpu:4").find("core 4"), std::string::npos);
  EXPECT_EQ(DeviceError("cpu:3"), "");
}

TEST(ParseDevicesTest, UnixWithoutPathAndUnknownKindsAreErrors) {
  EXPECT_NE(DeviceError("unix:").find("no socket path"), std::string::npos);
  EXPECT_NE(DeviceError("unix:   ").find("no socket path"), std::string::npos);
  const std::string error = DeviceError("cpu,gpu:0");
  EXPECT_NE(error.find("unknown device 'gpu:0'"), std::string::npos) << error;
  EXPECT_NE(error.find("unix:PATH"), std::string::npos) << error;  // says what is accepted
  EXPECT_NE(DeviceError("cpu0").find("unknown device"), std::string::npos);
}

TEST(ParseLayerSplitTest, Weights) {
  auto weights = ParseLayerSplit("1,1");
  ASSERT_TRUE(weights.ok());
  EXPECT_EQ(weights.value(), (std::vector<double>{1.0, 1.0}));
  weights = ParseLayerSplit(" 0.4 , 0.6 ");
  ASSERT_TRUE(weights.ok());
  EXPECT_EQ(weights.value(), (std::vector<double>{0.4, 0.6}));
  weights = ParseLayerSplit("3,1e0,+2");
  ASSERT_TRUE(weights.ok());
  EXPECT_EQ(weights.value(), (std::vector<double>{3.0, 1.0, 2.0}));
  weights = ParseLayerSplit("");
  ASSERT_TRUE(weights.ok());
  EXPECT_TRUE(weights.value().empty());
}

TEST(ParseLayerSplitTest, BadNumbersAreErrors) {
  for (const char* text : {"1,x", "1,2abc", "1,0.5.5", "1,--1", "1, 1 1"}) {
    const std::string error = SplitError(text);
    EXPECT_NE(error.find("weight 2"), std::string::npos) << text << ": " << error;
    EXPECT_NE(error.find("is not a number"), std::string::npos) << text << ": " << error;
  }
  EXPECT_NE(SplitError("1,,1").find("item 2 is empty"), std::string::npos);
}

TEST(ParseLayerSplitTest, NonPositiveAndNonFiniteWeightsAreErrors) {
  for (const char* text : {"0,1", "-1,1", "-0,1", "nan,1", "inf,1", "1e999,1", "1e-999,1"}) {
    const std::string error = SplitError(text);
    EXPECT_NE(error.find("weight 1"), std::string::npos) << text << ": " << error;
    EXPECT_NE(error.find("finite number > 0"), std::string::npos) << text << ": " << error;
  }
}

TEST(PlanLayerRangesTest, EqualLayersOneToOneAreHalves) {
  const std::vector<size_t> bytes(4, 1000);
  EXPECT_EQ(Plan(bytes, 2, {1, 1}), (Ranges{{0, 2}, {2, 4}}));
  EXPECT_EQ(Plan(bytes, 2, {}), (Ranges{{0, 2}, {2, 4}}));  // no split: equal cost
  // An odd count: the tie goes to the earlier boundary.
  EXPECT_EQ(Plan(std::vector<size_t>(5, 1000), 2, {}), (Ranges{{0, 2}, {2, 5}}));
}

TEST(PlanLayerRangesTest, ProportionalWeights) {
  const std::vector<size_t> bytes(10, 1000);
  EXPECT_EQ(Plan(bytes, 2, {0.4, 0.6}), (Ranges{{0, 4}, {4, 10}}));
  EXPECT_EQ(Plan(bytes, 2, {4, 6}), (Ranges{{0, 4}, {4, 10}}));  // only ratios matter
  EXPECT_EQ(Plan(bytes, 3, {}), (Ranges{{0, 3}, {3, 7}, {7, 10}}));
  EXPECT_EQ(Plan(bytes, 3, {1, 2, 2}), (Ranges{{0, 2}, {2, 6}, {6, 10}}));
  EXPECT_EQ(Plan(bytes, 1, {}), (Ranges{{0, 10}}));
}

TEST(PlanLayerRangesTest, NonUniformLayersSplitByCostNotCount) {
  // One heavy layer holds half the bytes: 1:1 puts it alone in the first stage.
  EXPECT_EQ(Plan({400, 100, 100, 100, 100}, 2, {1, 1}), (Ranges{{0, 1}, {1, 5}}));
  EXPECT_EQ(Plan({100, 100, 100, 100, 400}, 2, {1, 1}), (Ranges{{0, 4}, {4, 5}}));
  // Thirds of 1000 bytes: boundaries at 200 and 800 bytes (not at 3 and 4 layers).
  EXPECT_EQ(Plan({100, 100, 300, 300, 100, 100}, 3, {}), (Ranges{{0, 2}, {2, 4}, {4, 6}}));
}

TEST(PlanLayerRangesTest, EveryStageGetsALayerEvenWithATinyWeight) {
  const std::vector<size_t> bytes(4, 1000);
  EXPECT_EQ(Plan(bytes, 2, {0.001, 1}), (Ranges{{0, 1}, {1, 4}}));
  EXPECT_EQ(Plan(bytes, 2, {1, 0.001}), (Ranges{{0, 3}, {3, 4}}));
  EXPECT_EQ(Plan(bytes, 3, {1, 0.001, 1}), (Ranges{{0, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(Plan(bytes, 4, {100, 1, 1, 1}), (Ranges{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  // Layers with no bytes at all (degenerate input) still split by count.
  EXPECT_EQ(Plan({0, 0, 0, 0}, 2, {}), (Ranges{{0, 2}, {2, 4}}));
}

TEST(PlanLayerRangesTest, TheHeadCountsTowardTheLastStage) {
  // 10 layers of 1000 bytes and a head of 4000: 14000 bytes, 7000 each at 1:1, so the last
  // stage takes 3 layers besides the head.
  const std::vector<size_t> bytes(10, 1000);
  auto ranges = PlanLayerRanges(bytes, 2, {}, 4000);
  ASSERT_TRUE(ranges.ok()) << ranges.status().message();
  EXPECT_EQ(ranges.value()[0].end, 7);
  ranges = PlanLayerRanges(bytes, 3, {1, 1, 1}, 3000);  // 13000 bytes: 4333 each
  ASSERT_TRUE(ranges.ok());
  EXPECT_EQ(ranges.value()[0].end, 4);
  EXPECT_EQ(ranges.value()[1].end, 9);
  // A head heavier than every layer still leaves the last stage one layer.
  ranges = PlanLayerRanges(bytes, 2, {}, 100000);
  ASSERT_TRUE(ranges.ok());
  EXPECT_EQ(ranges.value()[0].end, 9);
  // Layers without bytes split by count; the head does not tip them.
  ranges = PlanLayerRanges({0, 0, 0, 0}, 2, {}, 4000);
  ASSERT_TRUE(ranges.ok());
  EXPECT_EQ(ranges.value()[0].end, 2);
}

TEST(HeadCostTest, OutputOrTiedEmbedding) {
  SHARDLM_REQUIRE_FIXTURES();
  auto file = GgufFile::Open(FixturePath("stories260K.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  const GgufTensorInfo* output = file.value()->FindTensor("output.weight");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(HeadCost(*file.value()), size_t(output->n_elements()));
  // Tied: the head is the token embedding.
  auto tied = GgufFile::Open(FixturePath("qwen3-tiny-qwenvocab-q8_0.gguf"));
  ASSERT_TRUE(tied.ok()) << tied.status().message();
  ASSERT_EQ(tied.value()->FindTensor("output.weight"), nullptr);
  EXPECT_EQ(HeadCost(*tied.value()),
            size_t(tied.value()->FindTensor("token_embd.weight")->n_elements()));
}

TEST(PlanLayerRangesTest, ImpossibleSplitsAreErrors) {
  const std::vector<size_t> bytes(2, 1000);
  auto ranges = PlanLayerRanges(bytes, 3, {});
  ASSERT_FALSE(ranges.ok());
  EXPECT_EQ(ranges.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ranges.status().message().find("3 stages"), std::string::npos)
      << ranges.status().message();
  EXPECT_NE(ranges.status().message().find("only 2 layers"), std::string::npos);

  ranges = PlanLayerRanges(bytes, 2, {1, 1, 1});
  ASSERT_FALSE(ranges.ok());
  EXPECT_NE(ranges.status().message().find("3 weights"), std::string::npos)
      << ranges.status().message();
  EXPECT_NE(ranges.status().message().find("2 stages"), std::string::npos);

  EXPECT_FALSE(PlanLayerRanges(bytes, 0, {}).ok());
  EXPECT_FALSE(PlanLayerRanges(bytes, 2, {1, 0}).ok());
  EXPECT_FALSE(PlanLayerRanges(bytes, 2, {1, -2}).ok());
}

// Weight elements of one layer from the config alone.
size_t LayerElements(const ModelConfig& c) {
  const size_t norms = 2 * size_t(c.n_embd) + (c.layers[0].qk_norm ? 2 * size_t(c.head_dim) : 0);
  const size_t attn =
      2 * size_t(c.layers[0].q_dim()) * c.n_embd + 2 * size_t(c.layers[0].k_dim()) * c.n_embd;
  const size_t ffn = 3 * size_t(c.n_ff) * c.n_embd;
  return norms + attn + ffn;
}

TEST(LayerCostsTest, FixtureModelsHaveEqualLayersOfTheRightSize) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* name : {"stories260K.gguf", "qwen3-tiny-f32.gguf"}) {
    SCOPED_TRACE(name);
    auto file = GgufFile::Open(FixturePath(name));
    ASSERT_TRUE(file.ok()) << file.status().message();
    auto config = ReadModelConfig(*file.value());
    ASSERT_TRUE(config.ok()) << config.status().message();
    const std::vector<size_t> costs = LayerCosts(*file.value(), config.value());
    ASSERT_EQ(costs.size(), size_t(config->n_layers));
    for (size_t cost : costs) EXPECT_EQ(cost, LayerElements(config.value()));
    // Every other element of the file belongs to the embedding, the output norm and the head.
    size_t all = 0;
    for (const GgufTensorInfo& tensor : file.value()->tensors()) all += tensor.n_elements();
    size_t rest = 0;
    for (const char* tensor : {"token_embd.weight", "output_norm.weight", "output.weight"}) {
      rest += file.value()->FindTensor(tensor)->n_elements();
    }
    EXPECT_EQ(costs[0] * costs.size() + rest, all);
  }
}

TEST(LayerCostsTest, AQuantizedMixCostsByElementsNotBytes) {
  SHARDLM_REQUIRE_FIXTURES();
  // q4_k_m keeps blk.1.attn_v and blk.1.ffn_down in Q6_K, the rest of the layers in Q4_K:
  // layer 1 has more bytes, the same multiply-adds.
  auto file = GgufFile::Open(FixturePath("qwen3-tiny-q4_k_m.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto config = ReadModelConfig(*file.value());
  ASSERT_TRUE(config.ok());
  size_t bytes[2] = {0, 0};
  for (const GgufTensorInfo& tensor : file.value()->tensors()) {
    if (tensor.name.starts_with("blk.0.")) bytes[0] += tensor.n_bytes;
    if (tensor.name.starts_with("blk.1.")) bytes[1] += tensor.n_bytes;
  }
  EXPECT_GT(bytes[1], bytes[0]);
  const std::vector<size_t> costs = LayerCosts(*file.value(), config.value());
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_EQ(costs[0], costs[1]);
  EXPECT_EQ(costs[0], LayerElements(config.value()));
}

// gemma4-tiny's last two layers read the KV of layers 1 and 2: a boundary at 2, 3 or 4 moves
// to 1 (and says so); one already at 1 stays; three stages cannot all keep a layer.
TEST(KeepSharedKvInOneStageTest, BoundariesMoveToTheSourceLayer) {
  SHARDLM_REQUIRE_FIXTURES();
  auto file = GgufFile::Open(FixturePath("gemma4-tiny.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto config = ReadModelConfig(**file);
  ASSERT_TRUE(config.ok()) << config.status().message();
  for (int boundary = 1; boundary < 5; ++boundary) {
    SCOPED_TRACE(boundary);
    std::vector<LayerRange> ranges = {{0, boundary}, {boundary, 5}};
    auto moved = KeepSharedKvInOneStage(*config, ranges);
    ASSERT_TRUE(moved.ok()) << moved.status().message();
    EXPECT_EQ(ranges[0].end, 1);
    EXPECT_EQ(ranges[1].begin, 1);
    EXPECT_EQ(moved->size(), boundary == 1 ? 0u : 1u);
    if (boundary > 1) {
      EXPECT_NE(
          (*moved)[0].find("stage 1 starts at layer 1 instead of " + std::to_string(boundary)),
          std::string::npos)
          << (*moved)[0];
    }
  }
  std::vector<LayerRange> three = {{0, 1}, {1, 3}, {3, 5}};
  auto refused = KeepSharedKvInOneStage(*config, three);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("use fewer devices"), std::string::npos);
  // Models without shared KV keep every boundary.
  auto qwen = GgufFile::Open(FixturePath("qwen3-tiny-f32.gguf"));
  ASSERT_TRUE(qwen.ok());
  auto qwen_config = ReadModelConfig(**qwen);
  ASSERT_TRUE(qwen_config.ok());
  std::vector<LayerRange> halves = {{0, 1}, {1, 2}};
  auto kept = KeepSharedKvInOneStage(*qwen_config, halves);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->empty());
  EXPECT_EQ(halves[1].begin, 1);
}

}  // namespace placement_test
}  // namespace shardlm
