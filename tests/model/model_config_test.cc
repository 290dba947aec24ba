// ModelConfig and weight binding: values read from the fixtures, and bad input (unknown
// architecture, missing or mis-shaped tensor, bad layer range, bad batch) giving a Status
// that names the culprit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "model/model_harness.h"
#include "model/tensor_specs.h"
#include "support/fixtures.h"

namespace shardlm::testing {
namespace {

namespace model_config_test {

// Layers of `layers` with KV pages of their own (attention layers that write KV), windows
// included.
int KvPoolLayers(const ModelConfig& config, LayerRange layers) {
  return StageKvPoolConfig(config, layers, 1, 1, KvType::kF32, WindowKv::kFull).n_layers;
}

}  // namespace model_config_test

using model_config_test::KvPoolLayers;

std::shared_ptr<const GgufFile> OpenFixture(const std::string& name) {
  auto file = GgufFile::Open(FixturePath(name));
  EXPECT_TRUE(file.ok()) << file.status().message();
  return std::move(file).value();
}

// A copy of `src` in memory with `edit` applied to each tensor: it may skip the tensor
// (return false) or change its shape.
struct EditedFile {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};
EditedFile CopyWithEdit(const GgufFile& src,
                        const std::function<bool(std::string_view, std::vector<int64_t>&)>& edit,
                        const std::string& arch = "") {
  GgufWriter writer;
  for (const GgufKeyValue& kv : src.metadata()) EXPECT_TRUE(writer.SetValue(kv.key, kv.value).ok());
  if (!arch.empty()) writer.SetString("general.architecture", arch);
  for (const GgufTensorInfo& t : src.tensors()) {
    std::vector<int64_t> ne = t.ne;
    if (!edit(t.name, ne)) continue;
    EXPECT_TRUE(writer.AddTensor(t.name, t.type, ne, std::span(t.data, t.n_bytes)).ok());
  }
  EditedFile out;
  auto bytes = writer.WriteToBytes();
  EXPECT_TRUE(bytes.ok());
  out.bytes = std::move(bytes).value();
  auto file = GgufFile::FromBytes(out.bytes, "edited.gguf");
  EXPECT_TRUE(file.ok()) << file.status().message();
  out.file = std::move(file).value();
  return out;
}

TEST(ModelConfig, Stories260K) {
  SHARDLM_REQUIRE_FIXTURES();
  auto config = ReadModelConfig(*OpenFixture("stories260K.gguf"));
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->arch, Arch::kLlama);
  EXPECT_EQ(config->n_layers, 5);
  EXPECT_EQ(config->n_embd, 64);
  EXPECT_EQ(config->n_head, 8);
  EXPECT_EQ(config->n_head_kv, 4);
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_EQ(config->n_ff, 172);
  EXPECT_EQ(config->n_vocab, 512);
  EXPECT_EQ(config->n_rot, 8);
  EXPECT_EQ(config->rope_type, RopeType::kNorm);
  EXPECT_FLOAT_EQ(config->rope_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(config->rms_eps, 1e-5f);
  ASSERT_EQ(config->layers.size(), 5u);
  for (const LayerConfig& layer : config->layers) EXPECT_FALSE(layer.qk_norm);
  EXPECT_FALSE(config->tied_output);
}

TEST(ModelConfig, Qwen3Flags) {
  SHARDLM_REQUIRE_FIXTURES();
  auto config = ReadModelConfig(*OpenFixture("qwen3-tiny-f32.gguf"));
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->arch, Arch::kQwen3);
  EXPECT_EQ(config->rope_type, RopeType::kNeox);
  ASSERT_EQ(config->layers.size(), size_t(config->n_layers));
  for (const LayerConfig& layer : config->layers) EXPECT_TRUE(layer.qk_norm);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->n_rot, 64);
  EXPECT_FLOAT_EQ(config->rope_freq_base, 1e6f);
  EXPECT_FLOAT_EQ(config->rms_eps, 1e-6f);
  auto tied = ReadModelConfig(*OpenFixture("qwen3-tiny-qwenvocab-q8_0.gguf"));
  ASSERT_TRUE(tied.ok());
  EXPECT_TRUE(tied->tied_output);
  EXPECT_EQ(tied->n_vocab, 151936);
}

// Every layer of the fixtures has the model's attention shape and attends its own KV.
TEST(ModelConfig, LayerConfigsFollowTheModel) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* name : {"stories260K.gguf", "qwen3-tiny-f32.gguf"}) {
    SCOPED_TRACE(name);
    auto config = ReadModelConfig(*OpenFixture(name));
    ASSERT_TRUE(config.ok()) << config.status().message();
    ASSERT_EQ(config->layers.size(), size_t(config->n_layers));
    for (int i = 0; i < config->n_layers; ++i) {
      const LayerConfig& layer = config->layers[i];
      EXPECT_EQ(layer.attention, AttentionKind::kFull);
      EXPECT_EQ(layer.n_head, config->n_head);
      EXPECT_EQ(layer.n_head_kv, config->n_head_kv);
      EXPECT_EQ(layer.head_dim_k, config->head_dim);
      EXPECT_EQ(layer.head_dim_v, config->head_dim);
      EXPECT_TRUE(layer.attn_norm && layer.ffn_norm);
      EXPECT_EQ(layer.kv_layer, i);
    }
  }
}

// gemma3 as llama.cpp lays it out from the file's few keys: windowed layers 0-4 (window 16,
// rope base 1e4) and a global layer 5 (the file's base 1e6), every norm, q scaled by
// 1/sqrt(head_dim) before attention, embeddings scaled by sqrt(n_embd), GeGLU.
TEST(ModelConfig, Gemma3LaysOutWindowedAndGlobalLayers) {
  SHARDLM_REQUIRE_FIXTURES();
  auto config = ReadModelConfig(*OpenFixture("gemma3-tiny.gguf"));
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->arch, Arch::kGemma3);
  EXPECT_EQ(config->rope_type, RopeType::kNeox);
  EXPECT_EQ(config->embedding_scale, 16.0f);
  EXPECT_EQ(config->ffn_activation, FfnActivation::kGelu);
  EXPECT_EQ(config->final_logit_softcap, 0.0f);
  EXPECT_TRUE(config->tied_output);
  ASSERT_EQ(config->layers.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    const LayerConfig& layer = config->layers[i];
    const bool windowed = i < 5;
    EXPECT_EQ(layer.attention, windowed ? AttentionKind::kSliding : AttentionKind::kFull);
    EXPECT_EQ(layer.window, windowed ? 16 : 0);
    EXPECT_EQ(layer.rope_base, windowed ? 10000.0f : 1e6f);
    EXPECT_TRUE(layer.qk_norm && layer.attn_post_norm && layer.ffn_post_norm);
    EXPECT_EQ(layer.q_scale, 1.0f / sqrtf(128.0f));
    EXPECT_EQ(layer.kq_scale, 1.0f);
  }
}

// qwen35 as llama.cpp lays it out: every fourth layer gated full attention (q with its output
// gate, q/k norms, rope on 16 of 64 dims), the others gated DeltaNet with the ssm.* shape; only
// the attention layer has KV.
TEST(ModelConfig, Qwen35LaysOutDeltaNetAndAttentionLayers) {
  SHARDLM_REQUIRE_FIXTURES();
  auto config = ReadModelConfig(*OpenFixture("qwen35-tiny.gguf"));
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->arch, Arch::kQwen35);
  EXPECT_EQ(config->rope_type, RopeType::kNeox);
  EXPECT_EQ(config->n_rot, 16);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_FALSE(config->tied_output);
  const DeltaNetShape& d = config->delta_net;
  EXPECT_EQ(d.conv_kernel, 4);
  EXPECT_EQ(d.n_k_heads, 2);
  EXPECT_EQ(d.n_v_heads, 4);
  EXPECT_EQ(d.head_dim_k, 32);
  EXPECT_EQ(d.head_dim_v, 32);
  EXPECT_EQ(d.conv_channels(), 256);
  ASSERT_EQ(config->layers.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const LayerConfig& layer = config->layers[i];
    EXPECT_EQ(layer.mixer, i == 3 ? LayerMixer::kAttention : LayerMixer::kDeltaNet);
    EXPECT_EQ(layer.attn_output_gate, i == 3);
    EXPECT_STREQ(layer.ffn_norm_name, "post_attention_norm");
  }
  EXPECT_EQ(KvPoolLayers(*config, {0, 4}), 1);
  EXPECT_EQ(KvPoolLayers(*config, {0, 3}), 0);
  EXPECT_TRUE(config->HasDeltaNet(0, 1));
  EXPECT_FALSE(config->HasDeltaNet(3, 4));
}

// gemma4 as llama.cpp lays it out: the file names the windowed layers; they have heads of 16
// and rope base 1e4 without rope_freqs, the global ones heads of 32 with rope_freqs; kv heads
// and FFN widths per layer; the global layers take v from k; the last two layers read the KV
// of the last earlier layer of their kind and keep none, so a stage boundary between them and
// their source splits shared KV.
TEST(ModelConfig, Gemma4LaysOutLayerShapesAndSharedKv) {
  SHARDLM_REQUIRE_FIXTURES();
  auto config = ReadModelConfig(*OpenFixture("gemma4-tiny.gguf"));
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->arch, Arch::kGemma4);
  EXPECT_EQ(config->head_dim, 32);
  EXPECT_EQ(config->n_head_kv, 2);
  EXPECT_EQ(config->n_ff, 128);
  EXPECT_EQ(config->n_rot, 32);
  EXPECT_EQ(config->n_embd_per_layer, 16);
  EXPECT_FLOAT_EQ(config->final_logit_softcap, 30.0f);
  EXPECT_FLOAT_EQ(config->embedding_scale, sqrtf(128.0f));
  ASSERT_EQ(config->layers.size(), 5u);
  const bool sliding[] = {true, true, false, true, false};
  const int kv_heads[] = {2, 2, 1, 2, 1};
  const int n_ff[] = {64, 64, 64, 128, 128};
  const int kv_source[] = {0, 1, 2, 1, 2};
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE(i);
    const LayerConfig& layer = config->layers[i];
    EXPECT_EQ(layer.attention, sliding[i] ? AttentionKind::kSliding : AttentionKind::kFull);
    EXPECT_EQ(layer.window, sliding[i] ? 32 : 0);
    EXPECT_EQ(layer.head_dim_k, sliding[i] ? 16 : 32);
    EXPECT_EQ(layer.n_rot, sliding[i] ? 16 : 32);
    EXPECT_FLOAT_EQ(layer.rope_base, sliding[i] ? 1e4f : 1e6f);
    EXPECT_EQ(layer.rope_freqs, !sliding[i]);
    EXPECT_EQ(layer.n_head_kv, kv_heads[i]);
    EXPECT_EQ(layer.n_ff, n_ff[i]);
    EXPECT_EQ(layer.kv_layer, kv_source[i]);
    EXPECT_EQ(layer.shared_kv, i >= 3);
    EXPECT_EQ(layer.has_kv(), i < 3);
    EXPECT_EQ(layer.v_from_k, i == 2);  // the global layer with KV of its own
    EXPECT_TRUE(layer.v_norm && layer.per_layer_input && layer.output_scale);
    EXPECT_FLOAT_EQ(layer.kq_scale, 1.0f);
  }
  EXPECT_EQ(KvPoolLayers(*config, {0, 5}), 3);
  EXPECT_FALSE(config->SplitsSharedKv(1));
  EXPECT_TRUE(config->SplitsSharedKv(2));
  EXPECT_TRUE(config->SplitsSharedKv(3));
  EXPECT_TRUE(config->SplitsSharedKv(4));
  // A stage holding a shared-KV layer without its source is refused, naming both.
  auto model = Model::Load(OpenFixture("gemma4-tiny.gguf"), {3, 5});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("layer 3 reads the KV of layer 1"), std::string::npos)
      << model.status().message();
  // With windows in the pages, its pool keeps each KV layer in its own shape.
  auto stage = Model::Load(OpenFixture("gemma4-tiny.gguf"), {1, 5});
  ASSERT_TRUE(stage.ok()) << stage.status().message();
  const PagePoolConfig pool = (*stage)->KvPoolConfig(4, 16, KvType::kF32, WindowKv::kFull);
  EXPECT_EQ(pool.n_layers, 2);
  EXPECT_EQ(pool.layer_shapes, (std::vector<KvLayerShape>{{2, 16}, {1, 32}}));
  // With windows in rings, the pool holds the global layer (one shape), the ring the windowed
  // one, and a sequence's state is the window's 31 positions of K and V.
  const PagePoolConfig paged = (*stage)->KvPoolConfig(4, 16, KvType::kF32, WindowKv::kRing);
  EXPECT_EQ(paged.n_layers, 1);
  EXPECT_EQ(paged.layer_shapes, (std::vector<KvLayerShape>{{1, 32}}));
  EXPECT_EQ(StageWindowRingLayers(*config, {1, 5}, WindowKv::kRing),
            (std::vector<WindowRingLayer>{{{2, 16}, 32}}));
  EXPECT_TRUE(StageWindowRingLayers(*config, {1, 5}, WindowKv::kFull).empty());
  EXPECT_EQ(StageStateBytes(*config, {1, 5}, KvType::kF16, WindowKv::kRing),
            2u * 2 * 31 * 16 * sizeof(uint16_t));
  EXPECT_EQ(StageStateBytes(*config, {1, 5}, KvType::kF16, WindowKv::kFull), 0u);
}

// The tensor list of the whole model names exactly the fixture's tensors, each once, with
// their shapes (the optional rope frequencies are not in these files).
TEST(TensorSpecs, ListTheFixtureTensorsExactly) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* name :
       {"stories260K.gguf", "qwen3-tiny-f32.gguf", "qwen3-tiny-qwenvocab-q8_0.gguf",
        "gemma3-tiny.gguf", "qwen35-tiny.gguf", "gemma4-tiny.gguf"}) {
    SCOPED_TRACE(name);
    auto file = OpenFixture(name);
    auto config = ReadModelConfig(*file);
    ASSERT_TRUE(config.ok()) << config.status().message();
    std::vector<std::string> listed;
    ForEachStageTensor(*config, {0, config->n_layers}, [&](const TensorSpec& spec) {
      const GgufTensorInfo* info = file->FindTensor(spec.name);
      if (!spec.required && info == nullptr) return;
      ASSERT_NE(info, nullptr) << spec.name;
      EXPECT_EQ(info->ne, spec.ne) << spec.name;
      listed.push_back(spec.name);
    });
    std::vector<std::string> in_file;
    for (const GgufTensorInfo& tensor : file->tensors()) in_file.emplace_back(tensor.name);
    std::sort(listed.begin(), listed.end());
    std::sort(in_file.begin(), in_file.end());
    EXPECT_EQ(listed, in_file);
  }
}

TEST(ModelConfig, UnknownArchitectureIsUnsupportedAndNamed) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* name : {"laguna-tiny.gguf", "qwen3moe-tiny.gguf"}) {
    auto model = Model::Load(OpenFixture(name));
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), StatusCode::kUnsupported);
    const std::string arch = std::string(name).substr(0, std::string(name).find('-'));
    EXPECT_NE(model.status().message().find("'" + arch + "'"), std::string::npos)
        << model.status().message();
  }
}

TEST(Weights, MissingTensorIsNamed) {
  SHARDLM_REQUIRE_FIXTURES();
  auto src = OpenFixture("stories260K.gguf");
  EditedFile edited = CopyWithEdit(
      *src, [](std::string_view name, auto&) { return name != "blk.2.ffn_up.weight"; });
  std::shared_ptr<const GgufFile> file(std::move(edited.file));
  auto model = Model::Load(file);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
  EXPECT_NE(model.status().message().find("blk.2.ffn_up.weight"), std::string::npos);
  // A stage that does not own layer 2 does not need it.
  EXPECT_TRUE(Model::Load(file, {0, 2}).ok());
  EXPECT_TRUE(Model::Load(file, {3, 5}).ok());
}

TEST(Weights, WrongShapeIsNamed) {
  SHARDLM_REQUIRE_FIXTURES();
  auto src = OpenFixture("stories260K.gguf");
  EditedFile edited = CopyWithEdit(*src, [](std::string_view name, std::vector<int64_t>& ne) {
    if (name == "blk.0.attn_k.weight") std::swap(ne[0], ne[1]);
    return true;
  });
  auto model = Model::Load(std::shared_ptr<const GgufFile>(std::move(edited.file)));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidData);
  EXPECT_NE(model.status().message().find("blk.0.attn_k.weight"), std::string::npos)
      << model.status().message();
}

TEST(Weights, UnknownArchInMetadataIsNamed) {
  SHARDLM_REQUIRE_FIXTURES();
  auto src = OpenFixture("stories260K.gguf");
  EditedFile edited = CopyWithEdit(
      *src, [](auto, auto&) { return true; }, "mamba");
  auto config = ReadModelConfig(*edited.file);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(config.status().message().find("mamba"), std::string::npos);
}

TEST(Weights, BadLayerRange) {
  SHARDLM_REQUIRE_FIXTURES();
  auto file = OpenFixture("stories260K.gguf");
  for (LayerRange range : {LayerRange{2, 2}, LayerRange{0, 6}, LayerRange{-1, 3}}) {
    auto model = Model::Load(file, range);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  }
  auto stage = Model::Load(file, {1, 5});
  ASSERT_TRUE(stage.ok());
  EXPECT_FALSE((*stage)->is_first_stage());
  EXPECT_TRUE((*stage)->is_last_stage());
  EXPECT_EQ((*stage)->KvPoolConfig(8).n_layers, 4);
}

class ForwardErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    SHARDLM_REQUIRE_FIXTURES();
    HarnessOptions options;
    options.n_pages = 2;
    options.page_tokens = 8;
    options.max_batch = 32;
    h_ = Harness::Open(FixturePath("stories260K.gguf"), options);
    ASSERT_NE(h_, nullptr);
    logits_.resize(32 * 512);
  }
  Status Run(std::vector<BatchEntry> batch, std::vector<PageId> pages) {
    const PageList lists[] = {pages};
    return h_->forward->Run(batch, lists, nullptr, logits_.data());
  }
  std::unique_ptr<Harness> h_;
  std::vector<float> logits_;
};

TEST_F(ForwardErrors, BadBatches) {
  EXPECT_EQ(Run({}, {0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Run({{600, 0, 0, true}}, {0}).code(), StatusCode::kInvalidArgument);  // token
  EXPECT_EQ(Run({{1, 0, 1, true}}, {0}).code(), StatusCode::kInvalidArgument);    // slot
  EXPECT_EQ(Run({{1, -1, 0, true}}, {0}).code(), StatusCode::kInvalidArgument);   // position
  EXPECT_EQ(Run({{1, 0, 0, false}, {2, 2, 0, true}}, {0}).code(),
            StatusCode::kInvalidArgument);  // gap inside the batch
  EXPECT_EQ(Run({{1, 1, 0, false}, {2, 0, 0, true}}, {0}).code(),
            StatusCode::kInvalidArgument);  // decreasing
  EXPECT_TRUE(Run({{1, 0, 0, true}}, {0}).ok());
}

TEST_F(ForwardErrors, MissingPagesOrOutput) {
  std::vector<BatchEntry> batch = {{1, 0, 0, true}};
  Status st = Run(batch, {});  // the slot has no pages
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("slot 0"), std::string::npos) << st.message();
  EXPECT_EQ(h_->forward->Run(batch, {}, nullptr, logits_.data()).code(),
            StatusCode::kInvalidArgument);  // no list at all
  const std::vector<PageId> page0 = {0};
  const PageList lists[] = {page0};
  EXPECT_EQ(h_->forward->Run(batch, lists, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);  // no output buffer
}

TEST_F(ForwardErrors, PageIdOutOfRange) {
  for (PageId bad : {2, -1}) {  // the pool has pages 0 and 1
    Status st = Run({{1, 0, 0, true}}, {bad});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("outside the pool"), std::string::npos) << st.message();
  }
  // Every id of a used list is checked, not only the pages the batch touches.
  EXPECT_EQ(Run({{1, 0, 0, true}}, {0, 7}).code(), StatusCode::kInvalidArgument);
}

TEST_F(ForwardErrors, PositionBeyondThePages) {
  // One page of 8 positions: 7 fits, 8 does not.
  std::vector<BatchEntry> batch;
  for (int i = 0; i < 8; ++i) batch.push_back({1, i, 0, i == 7});
  ASSERT_TRUE(Run(batch, {1}).ok());
  Status st = Run({{1, 8, 0, true}}, {1});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("past its 1 pages"), std::string::npos) << st.message();
  EXPECT_TRUE(Run({{1, 8, 0, true}}, {1, 0}).ok());
  // Past the pool's capacity (2 pages × 8) even with a list that names more pages.
  EXPECT_EQ(Run({{1, 16, 0, true}}, {1, 0, 1}).code(), StatusCode::kOutOfRange);
}

// The caller's bookkeeping: a block table that runs out of pages is an OutOfRange naming
// the flag to raise, and the pool serves again once pages are released.
TEST_F(ForwardErrors, PoolExhaustionIsOutOfRangeAndRecoverable) {
  BlockTable a = h_->NewTable(), b = h_->NewTable();
  std::vector<int32_t> ten(10, 1);
  h_->Run(a, ten, 0, false);  // 2 pages of 8
  std::vector<PageCopy> copies;
  Status st = b.PrepareWrite(0, 1, &copies);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("--kv-pages"), std::string::npos) << st.message();
  a.Clear();
  std::vector<float> logits = h_->Run(b, {1}, 0, false);
  EXPECT_TRUE(std::isfinite(logits[0]));
}

}  // namespace
}  // namespace shardlm::testing
