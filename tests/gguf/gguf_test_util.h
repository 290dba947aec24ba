// Helpers shared by the gguf tests: a raw little-endian byte builder for hand-made (often
// hostile) files, and a small valid file written by GgufWriter.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_writer.h"

namespace shardlm::testing {

// The value of a Result, or T{} after recording a test failure with its message.
template <typename T>
T V(Result<T> result) {
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? std::move(result).value() : T{};
}

// Appends GGUF primitives; no validation (tests build broken files on purpose).
class RawGguf {
 public:
  RawGguf& U32(uint32_t v) { return Put(v); }
  RawGguf& U64(uint64_t v) { return Put(v); }
  RawGguf& I64(int64_t v) { return Put(v); }
  RawGguf& U8(uint8_t v) { return Put(v); }
  RawGguf& Str(std::string_view s) {
    U64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  // magic, version, n_tensors, n_kv
  RawGguf& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return U32(0x46554747).U32(version).U64(n_tensors).U64(n_kv);
  }
  RawGguf& PadTo(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }
  RawGguf& Zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
  std::vector<uint8_t> bytes;

 private:
  template <typename T>
  RawGguf& Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
    return *this;
  }
};

// A small valid model-like file: scalars of every type, arrays, and three tensors.
inline std::vector<uint8_t> SmallGgufFile() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.block_count", 2);
  w.SetFloat32("llama.rope.freq_base", 10000.0f);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  std::vector<std::string> tokens = {"a", "b", "<s>"};
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  std::vector<int64_t> types = {1, 1, 3};
  (void)w.SetIntArray("tokenizer.ggml.token_type", GgufValueType::kInt32, types);
  std::vector<uint8_t> f32(4 * 8 * 2);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i * 7);
  std::vector<int64_t> ne_a = {8, 2};
  (void)w.AddTensor("a.weight", GgmlType::kF32, ne_a, std::span<const uint8_t>(f32));
  std::vector<uint8_t> q8(34 * 3, 0x11);
  std::vector<int64_t> ne_b = {32, 3};
  (void)w.AddTensor("b.weight", GgmlType::kQ8_0, ne_b, std::span<const uint8_t>(q8));
  std::vector<uint8_t> norm(4 * 5, 0x3f);
  std::vector<int64_t> ne_c = {5};
  (void)w.AddTensor("c.norm", GgmlType::kF32, ne_c, std::span<const uint8_t>(norm));
  return w.WriteToBytes().value();
}

}  // namespace shardlm::testing
