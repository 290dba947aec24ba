// GgufFile: a read-only, bounds-checked view of a GGUF v2/v3 file (mmapped or in memory).
//
// Byte layout (little-endian):
//   u32 magic "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv
//   n_kv × { string key | u32 value_type | value }
//       string = u64 length + bytes (no terminator)
//       value  = scalar | string | array: u32 elem_type + u64 count + count elems
//   n_tensors × { string name | u32 n_dims (1..4) | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to `general.alignment` (u32, default 32)
//   tensor data: each tensor at data_start + offset (offset a multiple of the alignment)
//
// Goals: every count, length and offset is checked against the bytes that remain and against
// overflow before anything is allocated; errors name the key or tensor. Metadata types are
// checked once, by the typed getters, which return a Status instead of aborting.
// Non-goals: writing (gguf_writer.h), interpreting architectures (model/).
//
// Thread safety: immutable after Open; any number of threads may read it concurrently.
// Lifetime: tensor data and string_views point into the mapping and live as long as the
// GgufFile.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "gguf/ggml_type.h"

namespace shardlm {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
  kSentinel = 13,
};

std::string_view GgufValueTypeName(GgufValueType type);

// One metadata value. Arrays keep their element type and their elements decoded into the
// matching vector: integers and bools widened to int64 (uint64 elements above INT64_MAX keep
// their bit pattern), floats to double, strings as views. Arrays of arrays are rejected.
struct GgufValue {
  GgufValueType type = GgufValueType::kSentinel;
  GgufValueType array_type = GgufValueType::kSentinel;  // for kArray only
  // scalar payload: one of uint64_t (unsigned ints, bool), int64_t, double, string_view
  std::variant<std::monostate, uint64_t, int64_t, double, std::string_view> scalar;
  // array payload (exactly one is filled, by array_type)
  std::vector<int64_t> ints;  // all integer and bool element types
  std::vector<double> floats;
  std::vector<std::string_view> strings;
  uint64_t array_size = 0;
};

struct GgufKeyValue {
  std::string_view key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string_view name;
  GgmlType type = GgmlType::kSentinel;
  std::vector<int64_t> ne;  // ne[0] = row length (contiguous), ne[1] = rows, ...
  uint64_t offset = 0;      // relative to the data section
  uint64_t n_bytes = 0;     // checked: fits in the file
  const uint8_t* data = nullptr;

  int64_t n_elements() const;
  int64_t rows() const;  // product of ne[1..] (also when ne[0] == 0)
};

class GgufCursor;  // gguf_file.cc: a bounds-checked read position

class GgufFile {
 public:
  // Maps the file read-only. Errors name the file and the problem.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes owned by the caller (tests, fuzzing); they must outlive the GgufFile.
  static Result<std::unique_ptr<GgufFile>> FromBytes(std::span<const uint8_t> bytes,
                                                     std::string name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint64_t data_offset() const { return data_offset_; }
  // The header: bytes [0, data_offset()), i.e. every key and tensor info plus the padding.
  std::span<const uint8_t> header_bytes() const { return bytes_.first(data_offset_); }

  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufValue* Find(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Typed getters: a missing key is kNotFound, a wrong type kInvalidData naming the key.
  // Integer getters accept any integer type whose value fits.
  Result<uint64_t> GetUint(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;  // float32/float64 (and integers)
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string_view> GetString(std::string_view key) const;
  // elem_type kSentinel accepts an array of any element type.
  Result<const GgufValue*> GetArray(std::string_view key, GgufValueType elem_type) const;
  // With a default for a missing key; a present key of the wrong type is still an error.
  Result<uint64_t> GetUintOr(std::string_view key, uint64_t fallback) const;
  Result<double> GetFloatOr(std::string_view key, double fallback) const;
  Result<bool> GetBoolOr(std::string_view key, bool fallback) const;

 private:
  GgufFile() = default;
  Status Parse();
  Status ParseMetadata(GgufCursor& cursor, uint64_t n_kv);
  Status ParseTensorInfos(GgufCursor& cursor, uint64_t n_tensors);
  Status ReadAlignment();
  Status PlaceTensors();
  Result<const GgufValue*> FindTyped(std::string_view key) const;

  std::string name_;
  std::span<const uint8_t> bytes_;
  void* mapping_ = nullptr;  // munmap on destruction when non-null
  size_t mapping_size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> key_index_;     // key → metadata_ index
  std::unordered_map<std::string_view, size_t> tensor_index_;  // name → tensors_ index
};

}  // namespace shardlm
