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
// checked must match (the grid i-quants have other quantizers, not compared here);
// F16 and BF16 check the round-to-nearest-even conversions element by element.
const char* const kFixtures[] = {
    "qwen3-tiny-q8_0.gguf",  "qwen3-tiny-q4_0.gguf",   "qwen3-tiny-q4_1.gguf",
    "qwen3-tiny-q5_0.gguf",  "qwen3-tiny-q5_1.gguf",   "qwen3-tiny-q2_k.gguf",
    "qwen3-tiny-q3_k.gguf",  "qwen3-tiny-q4_k.gguf",   "qwen3-tiny-q5_k.gguf",
    "qwen3-tiny-q6_k.gguf",  "qwen3-tiny-q4_k_m.gguf", "qwen3-tiny-f16.gguf",
    "qwen3-tiny-bf16.gguf",  "qwen3-tiny-mxfp4.gguf",  "qwen3-tiny-tq1_0.gguf",
    "qwen3-tiny-tq2_0.gguf",
};

std::unique_ptr<GgufFile> OpenFixture(const std::string& name) {
  auto file = GgufFile::Open(testing::FixturePath(name));
  EXPECT_TRUE(file.ok()) << name << ": " << file.status().message();
  return file.ok() ? std::move(file).value() : nullptr;
}

// A quantized fixture tensor, the F32 tensor it was made from, and its row geometry.
struct QuantizedTensor {
  const GgufTensorInfo& quant;
  const float* f32;  // [rows][cols]
  const TypeTraits& traits;
  GgmlTypeInfo info;
  int64_t cols;
  int64_t row_bytes;
};

// Calls visit(const QuantizedTensor&) for each non-F32 tensor of `quant` with its F32
// namesake in `f32`; a missing or non-F32 source or an unknown type is a fatal failure.
template <typename Visit>
void ForEachQuantizedTensor(const GgufFile& quant, const GgufFile& f32, Visit visit) {
  for (const GgufTensorInfo& t : quant.tensors()) {
    if (t.type == GgmlType::kF32) continue;
    const GgufTensorInfo* src = f32.FindTensor(t.name);
    ASSERT_NE(src, nullptr) << t.name;
    ASSERT_EQ(src->type, GgmlType::kF32);
    const TypeTraits* traits = GetTypeTraits(t.type);
    ASSERT_NE(traits, nullptr);
    const auto info = LookupGgmlType(static_cast<uint32_t>(t.type));
    ASSERT_TRUE(info.has_value()) << t.name;
    const int64_t cols = t.ne[0];
    visit(QuantizedTensor{t, reinterpret_cast<const float*>(src->data), *traits, *info, cols,
                          RowBytes(*info, cols)});
  }
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
    ASSERT_NO_FATAL_FAILURE(ForEachQuantizedTensor(*quant, *f32, [&](const QuantizedTensor& q) {
      const int64_t type_size = q.info.type_size;
      std::vector<uint8_t> ours(q.row_bytes);
      for (int64_t r = 0; r < std::min(q.quant.rows(), kMaxRowsPerTensor); ++r) {
        q.traits.quantize_row(q.f32 + r * q.cols, ours.data(), q.cols);
        const uint8_t* theirs = q.quant.data + r * q.row_bytes;
        for (int64_t b = 0; b < q.cols / q.info.block_size; ++b) {
          ++blocks;
          identical +=
              std::memcmp(ours.data() + b * type_size, theirs + b * type_size, type_size) == 0;
        }
      }
    }));
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
      {"qwen3-tiny-q8_0.gguf", 0.006},   {"qwen3-tiny-q4_0.gguf", 0.12},
      {"qwen3-tiny-q4_1.gguf", 0.10},    {"qwen3-tiny-q5_0.gguf", 0.06},
      {"qwen3-tiny-q5_1.gguf", 0.05},    {"qwen3-tiny-q2_k.gguf", 0.35},
      {"qwen3-tiny-q3_k.gguf", 0.20},    {"qwen3-tiny-q4_k.gguf", 0.10},
      {"qwen3-tiny-q5_k.gguf", 0.05},    {"qwen3-tiny-q6_k.gguf", 0.025},
      {"qwen3-tiny-bf16.gguf", 0.003},   {"qwen3-tiny-f16.gguf", 0.0005},
      {"qwen3-tiny-iq4_nl.gguf", 0.11},  {"qwen3-tiny-iq4_xs.gguf", 0.12},
      {"qwen3-tiny-mxfp4.gguf", 0.15},   {"qwen3-tiny-iq3_s.gguf", 0.21},
      {"qwen3-tiny-iq3_xxs.gguf", 0.27}, {"qwen3-tiny-iq2_s.gguf", 0.33},
      {"qwen3-tiny-iq2_xs.gguf", 0.37},  {"qwen3-tiny-iq2_xxs.gguf", 0.38},
      {"qwen3-tiny-iq1_m.gguf", 0.70},   {"qwen3-tiny-iq1_s.gguf", 0.40},
      {"qwen3-tiny-tq1_0.gguf", 0.85},   {"qwen3-tiny-tq2_0.gguf", 0.85},
  };
  for (const auto& [file, ceiling] : kCeilings) {
    SCOPED_TRACE(file);
    const auto quant = OpenFixture(file);
    ASSERT_NE(quant, nullptr);
    double err2 = 0, ref2 = 0;
    ASSERT_NO_FATAL_FAILURE(ForEachQuantizedTensor(*quant, *f32, [&](const QuantizedTensor& q) {
      std::vector<float> row(q.cols);
      for (int64_t r = 0; r < q.quant.rows(); ++r) {
        q.traits.dequantize_row(q.quant.data + r * q.row_bytes, row.data(), q.cols);
        const float* x = q.f32 + r * q.cols;
        for (int64_t k = 0; k < q.cols; ++k) {
          err2 += (static_cast<double>(row[k]) - x[k]) * (static_cast<double>(row[k]) - x[k]);
          ref2 += static_cast<double>(x[k]) * x[k];
        }
      }
    }));
    const double rel = std::sqrt(err2 / ref2);
    std::printf("%-24s relative RMS error %.4g (ceiling %.3g)\n", file, rel, ceiling);
    EXPECT_LE(rel, ceiling);
  }
}

}  // namespace
}  // namespace shardlm
