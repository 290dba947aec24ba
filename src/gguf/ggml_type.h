// GGML tensor element types as stored in GGUF files: their ids, names and block geometry.
//
// This is part of the file format (a tensor's byte size is rows × row_bytes), so it sits in
// gguf/, below tensor/, which adds the block layouts and kernels.
// Goals: the exact ids of ggml, so files from llama.cpp read as they are written.
// Non-goals: types ggml removed (q4_2, q4_3) are named here only so that errors can say which
// type a file uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace shardlm {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIq2Xxs = 16,
  kIq2Xs = 17,
  kIq3Xxs = 18,
  kIq1S = 19,
  kIq4Nl = 20,
  kIq3S = 21,
  kIq2S = 22,
  kIq4Xs = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIq1M = 29,
  kBF16 = 30,
  kTq1_0 = 34,
  kTq2_0 = 35,
  kMxfp4 = 39,
  kSentinel = 40,  // one past the largest id ggml knows today
};

struct GgmlTypeInfo {
  std::string_view name;  // as llama.cpp prints it: "q4_K", "f16"
  int64_t block_size;     // elements per block (1 for plain types)
  int64_t type_size;      // bytes per block
};

// Geometry of a type we can read; nullopt for ids that are unknown or not computable.
std::optional<GgmlTypeInfo> LookupGgmlType(uint32_t id);

// A name for any id, also unknown ones ("type 16 (iq2_xxs)" / "type 99"), for messages.
std::string GgmlTypeName(uint32_t id);

// Bytes of a row of `n` elements; n must be a multiple of the block size (checked by caller).
inline int64_t RowBytes(const GgmlTypeInfo& info, int64_t n) {
  return n / info.block_size * info.type_size;
}

}  // namespace shardlm
