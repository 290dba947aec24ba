// Tests of the panel repack of a stage (model/panel_repack.h): which matrices become panels,
// what stays in the file, and that a stage's share of the model does not change.
#include "model/panel_repack.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "model/model.h"
#include "support/fixtures.h"
#include "tensor/panels.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

bool InFile(const GgufFile& file, const void* p) {
  const auto* first = file.header_bytes().data();
  return p >= first && p < first + file.file_size();
}

TEST(PanelRepackTest, StageMatricesBecomePanelsAndTheEmbeddingStaysInTheFile) {
  SHARDLM_REQUIRE_FIXTURES();
  const TypeTraits* q4k = GetTypeTraits(GgmlType::kQ4_K);
  if (q4k == nullptr || q4k->panel_dot == nullptr) {
    GTEST_SKIP() << "this CPU has no panel kernels (AVX-512 VNNI): nothing is repacked";
  }
  auto opened = GgufFile::Open(testing::FixturePath("qwen3-tiny-q4_k_m.gguf"));
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::shared_ptr<const GgufFile> file = std::move(opened).value();
  auto plain = Model::Load(file, kAllLayers, /*repack=*/false);
  auto packed = Model::Load(file, kAllLayers, /*repack=*/true);
  ASSERT_TRUE(plain.ok() && packed.ok());
  EXPECT_EQ((*plain)->panels().matrices(), 0);
  const StageWeights& w = (*packed)->weights();
  // Every layer matrix (Q4_K / Q6_K, 256 columns) and the Q6_K head.
  EXPECT_EQ((*packed)->panels().matrices(), 7 * int(w.blocks.size()) + 1);
  EXPECT_GT((*packed)->panels().bytes(), 0u);
  for (const WeightView* view : {&w.output, &w.blocks[0].attn_q, &w.blocks.back().ffn_down}) {
    EXPECT_NE(view->panel_bytes, 0);
    EXPECT_FALSE(InFile(*file, view->data));
  }
  EXPECT_EQ(w.token_embd.panel_bytes, 0);  // looked up by row
  EXPECT_TRUE(InFile(*file, w.token_embd.data));
  // The stage's share of the model is counted in file bytes either way.
  EXPECT_EQ(StageWeightBytes(w), StageWeightBytes((*plain)->weights()));

  // A last stage holds the head as panels and no embedding.
  const int n_layers = (*packed)->config().n_layers;
  auto last = Model::Load(file, {n_layers - 1, n_layers});
  ASSERT_TRUE(last.ok());
  EXPECT_NE((*last)->weights().output.panel_bytes, 0);
  EXPECT_EQ((*last)->weights().token_embd.data, nullptr);
}

}  // namespace
}  // namespace shardlm
