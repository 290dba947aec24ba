// Compatibility with llama.cpp on the shared fixtures: the quantized fixture models were made
// by llama-quantize (no imatrix) from the F32 fixture model, so quantizing the F32 tensors
// with our reference quantizers must reproduce their bytes, and dequantizing them must land
// within the type's error of the F32 weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "support/fixtures.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

// The float operations of the reference quantizers are reproduced in order, so every block
// checked must match;
// F16 and BF16 check the round-to-nearest-even conversions element by element.
const char* const kFixtures[] = {
    "qwen3-tiny-q8_0.gguf", "qwen3-tiny-q4_0.gguf",   "qwen3-tiny-q4_1.gguf",
    "qwen3-tiny-q5_0.gguf", "qwen3-tiny-q5_1.gguf",   "qwen3-tiny-q2_k.gguf",
    "qwen3-tiny-q3_k.gguf", "qwen3-tiny-q4_k.gguf",   "qwen3-tiny-q5_k.gguf",
    "qwen3-tiny-q6_k.gguf", "qwen3-tiny-q4_k_m.gguf", "qwen3-tiny-f16.gguf",
    "qwen3-tiny-bf16.gguf",
};

std::unique_ptr<GgufFile> OpenFixture(const std::string& name) {
  auto file = GgufFile::Open(testing::FixturePath(name));
  EXPECT_TRUE(file.ok()) << name << ": " << file.status().message();
  return file.ok() ? std::move(file).value() : nullptr;
}

// Rows checked per tensor: every tensor of every file, bounded so the test stays fast under
// ASan (the K-quant searches are slow at -O0).
constexpr int64_t kMaxRowsPerTensor = 48;

TEST(LlamaCompat, QuantizersReproduceLlamaQuantizeBytes) {
  SHARDLM_REQUIRE_FIXTURES();
  const auto f32 = OpenFixture("qwen3-tiny-f32.gguf");
  ASSERT_NE(f32, nullptr);
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    const auto quant = OpenFixture(fixture);
    ASSERT_NE(quant, nullptr);
    int64_t blocks = 0, identical = 0;
    for (const GgufTensorInfo& t : quant->tensors()) {
      if (t.type == GgmlType::kF32) continue;
      const GgufTensorInfo* src = f32->FindTensor(t.name);
      ASSERT_NE(src, nullptr) << t.name;
      ASSERT_EQ(src->type, GgmlType::kF32);
      const TypeTraits* traits = GetTypeTraits(t.type);
      ASSERT_NE(traits, nullptr);
      const auto info = LookupGgmlType(static_cast<uint32_t>(t.type));
      const int64_t cols = t.ne[0];
      const int64_t row_bytes = RowBytes(*info, cols);
      std::vector<uint8_t> ours(row_bytes);
      for (int64_t r = 0; r < std::min(t.rows(), kMaxRowsPerTensor); ++r) {
        const auto* x = reinterpret_cast<const float*>(src->data) + r * cols;
        traits->quantize_row(x, ours.data(), cols);
        const uint8_t* theirs = t.data + r * row_bytes;
        for (int64_t b = 0; b < cols / info->block_size; ++b) {
          ++blocks;
          identical += std::memcmp(ours.data() + b * info->type_size, theirs + b * info->type_size,
                                   info->type_size) == 0;
        }
      }
    }
    std::printf("%-24s %lld / %lld blocks identical\n", fixture, static_cast<long long>(identical),
                static_cast<long long>(blocks));
    EXPECT_GT(blocks, 0);
    EXPECT_EQ(identical, blocks);
  }
}

// Dequantizing llama-quantize's tensors gives back the F32 weights within the type's error
// (a wrong bit layout would give errors of the order of the weights themselves). Ceiling:
// RMS error relative to the RMS of the weights, per type (ggml's test-quantize-fns limits
// are of the same order).
TEST(LlamaCompat, DequantizedFixtureTensorsMatchF32Weights) {
  SHARDLM_REQUIRE_FIXTURES();
  const auto f32 = OpenFixture("qwen3-tiny-f32.gguf");
  ASSERT_NE(f32, nullptr);
  const std::pair<const char*, double> kCeilings[] = {
      {"qwen3-tiny-q8_0.gguf", 0.006}, {"qwen3-tiny-q4_0.gguf", 0.12},
      {"qwen3-tiny-q4_1.gguf", 0.10},  {"qwen3-tiny-q5_0.gguf", 0.06},
      {"qwen3-tiny-q5_1.gguf", 0.05},  {"qwen3-tiny-q2_k.gguf", 0.35},
      {"qwen3-tiny-q3_k.gguf", 0.20},  {"qwen3-tiny-q4_k.gguf", 0.10},
      {"qwen3-tiny-q5_k.gguf", 0.05},  {"qwen3-tiny-q6_k.gguf", 0.025},
      {"qwen3-tiny-bf16.gguf", 0.003}, {"qwen3-tiny-f16.gguf", 0.0005},
  };
  for (const auto& [file, ceiling] : kCeilings) {
    SCOPED_TRACE(file);
    const auto quant = OpenFixture(file);
    ASSERT_NE(quant, nullptr);
    double err2 = 0, ref2 = 0;
    for (const GgufTensorInfo& t : quant->tensors()) {
      if (t.type == GgmlType::kF32) continue;
      const GgufTensorInfo* src = f32->FindTensor(t.name);
      ASSERT_NE(src, nullptr) << t.name;
      const TypeTraits* traits = GetTypeTraits(t.type);
      ASSERT_NE(traits, nullptr);
      const int64_t cols = t.ne[0];
      const int64_t row_bytes = RowBytes(*LookupGgmlType(static_cast<uint32_t>(t.type)), cols);
      std::vector<float> row(cols);
      for (int64_t r = 0; r < t.rows(); ++r) {
        traits->dequantize_row(t.data + r * row_bytes, row.data(), cols);
        const auto* x = reinterpret_cast<const float*>(src->data) + r * cols;
        for (int64_t k = 0; k < cols; ++k) {
          err2 += (static_cast<double>(row[k]) - x[k]) * (static_cast<double>(row[k]) - x[k]);
          ref2 += static_cast<double>(x[k]) * x[k];
        }
      }
    }
    const double rel = std::sqrt(err2 / ref2);
    std::printf("%-24s relative RMS error %.4g (ceiling %.3g)\n", file, rel, ceiling);
    EXPECT_LE(rel, ceiling);
  }
}

}  // namespace
}  // namespace shardlm
