// GgufWriter implementation: value encoding, layout, streaming and atomic file writes.
//
// Goals: byte-exact GGUF v3 that llama.cpp and our reader accept; bounded memory (one tensor
// buffer at a time for callback tensors). Non-goals: compression, in-place edits.
#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace shardlm {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"
constexpr uint32_t kVersion = 3;

class Encoder {
 public:
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void PutType(GgufValueType t) { Put<uint32_t>(static_cast<uint32_t>(t)); }
  std::vector<uint8_t> Take() { return std::move(out_); }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

template <typename T>
std::vector<uint8_t> EncodeScalar(GgufValueType type, T v) {
  Encoder e;
  e.PutType(type);
  e.Put<T>(v);
  return e.Take();
}

// Appends one integer element of `type`; false if `type` is not an integer/bool type.
bool PutIntElement(Encoder& e, GgufValueType type, int64_t v) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      e.Put<uint8_t>(static_cast<uint8_t>(v));
      return true;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      e.Put<uint16_t>(static_cast<uint16_t>(v));
      return true;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
      e.Put<uint32_t>(static_cast<uint32_t>(v));
      return true;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      e.Put<uint64_t>(static_cast<uint64_t>(v));
      return true;
    default:
      return false;
  }
}

uint64_t AlignUp(uint64_t x) {
  return (x + GgufWriter::kAlignment - 1) / GgufWriter::kAlignment * GgufWriter::kAlignment;
}

}  // namespace

// ---- Metadata ------------------------------------------------------------------------------

void GgufWriter::SetEncoded(std::string_view key, std::vector<uint8_t> encoded) {
  for (Kv& kv : kvs_) {
    if (kv.key == key) {
      kv.encoded = std::move(encoded);
      return;
    }
  }
  kvs_.push_back({std::string(key), std::move(encoded)});
}

void GgufWriter::SetUint8(std::string_view k, uint8_t v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kUint8, v));
}
void GgufWriter::SetInt8(std::string_view k, int8_t v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kInt8, v));
}
void GgufWriter::SetUint16(std::string_view k, uint16_t v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kUint16, v));
}
void GgufWriter::SetInt16(std::string_view k, int16_t v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kInt16, v));
}
void GgufWriter::SetUint32(std::string_view k, uint32_t v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kUint32, v));
}
void GgufWriter::SetInt32(std::string_view k, int32_t v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kInt32, v));
}
void GgufWriter::SetUint64(std::string_view k, uint64_t v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kUint64, v));
}
void GgufWriter::SetInt64(std::string_view k, int64_t v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kInt64, v));
}
void GgufWriter::SetFloat32(std::string_view k, float v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kFloat32, v));
}
void GgufWriter::SetFloat64(std::string_view k, double v) {
  SetEncoded(k, EncodeScalar(GgufValueType::kFloat64, v));
}
void GgufWriter::SetBool(std::string_view k, bool v) {
  SetEncoded(k, EncodeScalar<uint8_t>(GgufValueType::kBool, v ? 1 : 0));
}
void GgufWriter::SetString(std::string_view k, std::string_view v) {
  Encoder e;
  e.PutType(GgufValueType::kString);
  e.PutString(v);
  SetEncoded(k, e.Take());
}

Status GgufWriter::SetIntArray(std::string_view key, GgufValueType elem_type,
                               std::span<const int64_t> v) {
  Encoder e;
  e.PutType(GgufValueType::kArray);
  e.PutType(elem_type);
  e.Put<uint64_t>(v.size());
  for (int64_t x : v) {
    if (!PutIntElement(e, elem_type, x)) {
      return InvalidArgument("key '{}': {} is not an integer element type", key,
                             GgufValueTypeName(elem_type));
    }
  }
  SetEncoded(key, e.Take());
  return Status::Ok();
}

Status GgufWriter::SetFloatArray(std::string_view key, GgufValueType elem_type,
                                 std::span<const double> v) {
  if (elem_type != GgufValueType::kFloat32 && elem_type != GgufValueType::kFloat64) {
    return InvalidArgument("key '{}': {} is not a float element type", key,
                           GgufValueTypeName(elem_type));
  }
  Encoder e;
  e.PutType(GgufValueType::kArray);
  e.PutType(elem_type);
  e.Put<uint64_t>(v.size());
  for (double x : v) {
    if (elem_type == GgufValueType::kFloat32) {
      e.Put<float>(static_cast<float>(x));
    } else {
      e.Put<double>(x);
    }
  }
  SetEncoded(key, e.Take());
  return Status::Ok();
}

void GgufWriter::SetStringArray(std::string_view key, std::span<const std::string> v) {
  Encoder e;
  e.PutType(GgufValueType::kArray);
  e.PutType(GgufValueType::kString);
  e.Put<uint64_t>(v.size());
  for (const std::string& s : v) e.PutString(s);
  SetEncoded(key, e.Take());
}

Status GgufWriter::SetValue(std::string_view key, const GgufValue& value) {
  using T = GgufValueType;
  const auto& s = value.scalar;
  switch (value.type) {
    case T::kUint8:
      SetUint8(key, static_cast<uint8_t>(std::get<uint64_t>(s)));
      break;
    case T::kInt8:
      SetInt8(key, static_cast<int8_t>(std::get<int64_t>(s)));
      break;
    case T::kUint16:
      SetUint16(key, static_cast<uint16_t>(std::get<uint64_t>(s)));
      break;
    case T::kInt16:
      SetInt16(key, static_cast<int16_t>(std::get<int64_t>(s)));
      break;
    case T::kUint32:
      SetUint32(key, static_cast<uint32_t>(std::get<uint64_t>(s)));
      break;
    case T::kInt32:
      SetInt32(key, static_cast<int32_t>(std::get<int64_t>(s)));
      break;
    case T::kUint64:
      SetUint64(key, std::get<uint64_t>(s));
      break;
    case T::kInt64:
      SetInt64(key, std::get<int64_t>(s));
      break;
    case T::kFloat32:
      SetFloat32(key, static_cast<float>(std::get<double>(s)));
      break;
    case T::kFloat64:
      SetFloat64(key, std::get<double>(s));
      break;
    case T::kBool:
      SetBool(key, std::get<uint64_t>(s) != 0);
      break;
    case T::kString:
      SetString(key, std::get<std::string_view>(s));
      break;
    case T::kArray: {
      if (value.array_type == T::kString) {
        std::vector<std::string> strings(value.strings.begin(), value.strings.end());
        SetStringArray(key, strings);
        return Status::Ok();
      }
      if (value.array_type == T::kFloat32 || value.array_type == T::kFloat64) {
        return SetFloatArray(key, value.array_type, value.floats);
      }
      return SetIntArray(key, value.array_type, value.ints);
    }
    default:
      return InvalidArgument("key '{}': cannot write value type {}", key,
                             static_cast<uint32_t>(value.type));
  }
  return Status::Ok();
}

// ---- Tensors -------------------------------------------------------------------------------

Result<uint64_t> GgufWriter::CheckNewTensor(std::string_view name, GgmlType type,
                                            std::span<const int64_t> ne) const {
  auto info = LookupGgmlType(static_cast<uint32_t>(type));
  if (!info) {
    return InvalidArgument("tensor '{}': unsupported type {}", name,
                           GgmlTypeName(static_cast<uint32_t>(type)));
  }
  if (ne.empty() || ne.size() > 4) {
    return InvalidArgument("tensor '{}': {} dims, expected 1..4", name, ne.size());
  }
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) {
      return InvalidArgument("tensor '{}': bad dimension {}", name, d);
    }
  }
  if (ne[0] % info->block_size != 0) {
    return InvalidArgument("tensor '{}': ne[0] = {} is not a multiple of the {} block size {}",
                           name, ne[0], info->name, info->block_size);
  }
  for (const Tensor& t : tensors_) {
    if (t.name == name) return InvalidArgument("duplicate tensor name '{}'", name);
  }
  int64_t rows = 1;
  bool overflow = false;
  for (size_t d = 1; d < ne.size(); ++d) overflow |= __builtin_mul_overflow(rows, ne[d], &rows);
  int64_t row_bytes = 0;
  int64_t n_bytes = 0;
  if (overflow || __builtin_mul_overflow(ne[0] / info->block_size, info->type_size, &row_bytes) ||
      __builtin_mul_overflow(rows, row_bytes, &n_bytes)) {
    return InvalidArgument("tensor '{}': byte size overflows", name);
  }
  return static_cast<uint64_t>(n_bytes);
}

Status GgufWriter::AddTensor(std::string_view name, GgmlType type, std::span<const int64_t> ne,
                             std::span<const uint8_t> bytes) {
  return AddTensor(name, type, ne, std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

Status GgufWriter::AddTensor(std::string_view name, GgmlType type, std::span<const int64_t> ne,
                             std::vector<uint8_t>&& bytes) {
  SHARDLM_ASSIGN_OR_RETURN(uint64_t n_bytes, CheckNewTensor(name, type, ne));
  if (bytes.size() != n_bytes) {
    return InvalidArgument("tensor '{}': {} bytes given, shape and type need {}", name,
                           bytes.size(), n_bytes);
  }
  Tensor t{std::string(name), type,   {ne.begin(), ne.end()}, n_bytes, data_size_,
           std::move(bytes),  nullptr};
  data_size_ += AlignUp(n_bytes);
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

Status GgufWriter::AddTensor(std::string_view name, GgmlType type, std::span<const int64_t> ne,
                             FillFn fill) {
  SHARDLM_ASSIGN_OR_RETURN(uint64_t n_bytes, CheckNewTensor(name, type, ne));
  Tensor t{std::string(name), type, {ne.begin(), ne.end()}, n_bytes,
           data_size_,        {},   std::move(fill)};
  data_size_ += AlignUp(n_bytes);
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

// ---- Output --------------------------------------------------------------------------------

std::vector<uint8_t> GgufWriter::EncodeHeader() const {
  Encoder e;
  e.Put<uint32_t>(kMagic);
  e.Put<uint32_t>(kVersion);
  e.Put<uint64_t>(tensors_.size());
  e.Put<uint64_t>(kvs_.size());
  for (const Kv& kv : kvs_) {
    e.PutString(kv.key);
    e.bytes().insert(e.bytes().end(), kv.encoded.begin(), kv.encoded.end());
  }
  for (const Tensor& t : tensors_) {
    e.PutString(t.name);
    e.Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) e.Put<int64_t>(d);
    e.Put<uint32_t>(static_cast<uint32_t>(t.type));
    e.Put<uint64_t>(t.offset);
  }
  std::vector<uint8_t> out = e.Take();
  out.resize(AlignUp(out.size()), 0);
  return out;
}

uint64_t GgufWriter::FileSize() const { return EncodeHeader().size() + data_size_; }

Status GgufWriter::Write(const std::function<Status(std::span<const uint8_t>)>& sink) const {
  SHARDLM_TRY(sink(EncodeHeader()));
  static constexpr uint8_t kZeros[kAlignment] = {};
  std::vector<uint8_t> buffer;
  for (const Tensor& t : tensors_) {
    std::span<const uint8_t> data = t.owned;
    if (t.owned.size() != t.n_bytes) {
      buffer.assign(t.n_bytes, 0);
      Status st = t.fill ? t.fill(buffer) : Status::Ok();
      if (!st.ok()) return st.WithContext(fmt::format("tensor '{}'", t.name));
      data = buffer;
    }
    SHARDLM_TRY(sink(data));
    SHARDLM_TRY(sink({kZeros, AlignUp(t.n_bytes) - t.n_bytes}));
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> GgufWriter::WriteToBytes() const {
  std::vector<uint8_t> out;
  out.reserve(FileSize());
  SHARDLM_TRY(Write([&](std::span<const uint8_t> chunk) {
    out.insert(out.end(), chunk.begin(), chunk.end());
    return Status::Ok();
  }));
  return out;
}

namespace {

Status WriteAll(int fd, std::span<const uint8_t> chunk, const std::string& path) {
  while (!chunk.empty()) {
    ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError("{}: write failed: {}", path, std::strerror(errno));
    chunk = chunk.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

void FsyncDirectory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself already happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

Status GgufWriter::WriteToFile(const std::string& path) const {
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("{}: cannot create: {}", tmp, std::strerror(errno));
  Status st = Write([&](std::span<const uint8_t> chunk) { return WriteAll(fd, chunk, tmp); });
  if (st.ok() && ::fsync(fd) != 0) st = IoError("{}: fsync failed: {}", tmp, std::strerror(errno));
  if (::close(fd) != 0 && st.ok()) st = IoError("{}: close failed: {}", tmp, std::strerror(errno));
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = IoError("cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
  }
  if (!st.ok()) {
    std::remove(tmp.c_str());
    return st;
  }
  FsyncDirectory(path);
  return Status::Ok();
}

}  // namespace shardlm
