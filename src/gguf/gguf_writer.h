// GgufWriter: builds a GGUF v3 file (metadata + tensors) in memory or on disk.
//
// Layout written: the one documented in gguf_file.h, version 3, general.alignment = 32 (not
// stored as a key unless the caller sets it), tensors in the order they were added, each
// padded with zeros to the alignment.
// Goals: every metadata type and array kind; tensors from bytes (copied or moved) or from a
// callback that fills them at write time, so `gguf synth` can write a multi-GB model with one
// tensor in memory at a time; atomic file writes (temp name, fsync, rename).
// Non-goals: editing an existing file in place; validating model semantics (any key goes).
//
// Thread safety: none; one thread builds and writes. Lifetime: the writer owns copied data;
// fill callbacks must stay valid until the last Write call.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/ggml_type.h"
#include "gguf/gguf_file.h"

namespace shardlm {

class GgufWriter {
 public:
  // Fills dst (exactly the tensor's byte size) when the file is written.
  using FillFn = std::function<Status(std::span<uint8_t> dst)>;
  static constexpr uint64_t kAlignment = 32;

  GgufWriter() = default;

  // Metadata. Setting an existing key replaces its value and keeps its position.
  void SetUint8(std::string_view key, uint8_t v);
  void SetInt8(std::string_view key, int8_t v);
  void SetUint16(std::string_view key, uint16_t v);
  void SetInt16(std::string_view key, int16_t v);
  void SetUint32(std::string_view key, uint32_t v);
  void SetInt32(std::string_view key, int32_t v);
  void SetUint64(std::string_view key, uint64_t v);
  void SetInt64(std::string_view key, int64_t v);
  void SetFloat32(std::string_view key, float v);
  void SetFloat64(std::string_view key, double v);
  void SetBool(std::string_view key, bool v);
  void SetString(std::string_view key, std::string_view v);
  // Arrays of integers/bools (elem_type one of the integer types or kBool; values are
  // truncated to the element width), of floats (kFloat32 or kFloat64), of strings.
  Status SetIntArray(std::string_view key, GgufValueType elem_type, std::span<const int64_t> v);
  Status SetFloatArray(std::string_view key, GgufValueType elem_type, std::span<const double> v);
  void SetStringArray(std::string_view key, std::span<const std::string> v);
  // Copies a value read from another file (any type the reader produces).
  Status SetValue(std::string_view key, const GgufValue& value);

  // Tensors. ne[0] is the contiguous dimension; errors for an unknown type, a bad shape, a
  // byte count that does not match the shape, or a duplicate name.
  Status AddTensor(std::string_view name, GgmlType type, std::span<const int64_t> ne,
                   std::span<const uint8_t> bytes);
  Status AddTensor(std::string_view name, GgmlType type, std::span<const int64_t> ne,
                   std::vector<uint8_t>&& bytes);
  Status AddTensor(std::string_view name, GgmlType type, std::span<const int64_t> ne, FillFn fill);

  size_t n_tensors() const { return tensors_.size(); }
  size_t n_kv() const { return kvs_.size(); }
  // Total file size the current contents will produce.
  uint64_t FileSize() const;

  // Serializes everything (calls the fill callbacks).
  Result<std::vector<uint8_t>> WriteToBytes() const;
  // Writes `path` atomically: `path.tmp.<pid>`, fsync, rename over `path`, fsync the folder.
  // On error the temp file is removed and `path` is untouched.
  Status WriteToFile(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> encoded;  // u32 type + value, as in the file
  };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t n_bytes = 0;
    uint64_t offset = 0;  // in the data section
    std::vector<uint8_t> owned;
    FillFn fill;  // used when `owned` is empty and n_bytes > 0
  };

  void SetEncoded(std::string_view key, std::vector<uint8_t> encoded);
  Result<uint64_t> CheckNewTensor(std::string_view name, GgmlType type,
                                  std::span<const int64_t> ne) const;
  std::vector<uint8_t> EncodeHeader() const;  // everything before the data section, padded
  // Streams the file through `sink`; the sink gets consecutive chunks.
  Status Write(const std::function<Status(std::span<const uint8_t>)>& sink) const;

  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;  // data section size so far (padded)
};

}  // namespace shardlm
