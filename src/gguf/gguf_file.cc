// GgufFile: parsing and validation of GGUF v2/v3 (layout in gguf_file.h).
//
// Owns: the mmap of a file, the cursor that reads it with bounds checks, metadata decoding,
// tensor-info validation (shape, type, alignment, placement inside the file) and the typed
// getters. Goals: a hostile file can neither crash us nor make us allocate more than a small
// multiple of its own size; every message names the file and the key or tensor.
// Non-goals: interpreting keys (model/, tokenizer/), writing (gguf_writer.cc).
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace shardlm {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;
// Smallest encodings, used to reject counts that cannot fit in the remaining bytes before
// any allocation: a KV is key length (8) + type (4) + at least 1 value byte; a tensor info
// is name length (8) + n_dims (4) + one ne (8) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 13;
constexpr uint64_t kMinTensorInfoBytes = 32;
// Metadata arrays are decoded into vectors of 8-16 bytes per element, so their total element
// count is capped: a hostile array of 2^32 one-byte elements must not cost 32 GiB. Real
// files hold about 3 arrays of at most 262144 tokens/merges each.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 26;

// Bytes of one element of a scalar metadata type; 0 for string/array/unknown.
uint64_t ScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool IsFloat(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}
bool IsInteger(GgufValueType t) {
  return ScalarSize(t) != 0 && !IsFloat(t) && t != GgufValueType::kBool;
}

}  // namespace

// A read position over the file bytes. Every read checks the remaining length first.
class GgufCursor {
 public:
  explicit GgufCursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) {
      return InvalidData("truncated: {} needs {} bytes at offset {}, file has {}", what, sizeof(T),
                         pos_, bytes_.size());
    }
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string_view* out, std::string_view what) {
    uint64_t length = 0;
    SHARDLM_TRY(Read(&length, what));
    if (length > remaining()) {
      return InvalidData("{}: string length {} at offset {} exceeds the {} bytes left", what,
                         length, pos_ - 8, remaining());
    }
    *out = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return Status::Ok();
  }

  // Reads one scalar of `type` (not string/array) into the widened variant.
  Status ReadScalar(GgufValueType type, GgufValue* value, std::string_view what);

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

namespace {

template <typename T>
Status ReadAs(GgufCursor& cursor, GgufValue* value, std::string_view what) {
  T raw{};
  SHARDLM_TRY(cursor.Read(&raw, what));
  if constexpr (std::is_floating_point_v<T>) {
    value->scalar = static_cast<double>(raw);
  } else if constexpr (std::is_signed_v<T>) {
    value->scalar = static_cast<int64_t>(raw);
  } else {
    value->scalar = static_cast<uint64_t>(raw);
  }
  return Status::Ok();
}

// Appends the scalar held in `tmp` to the array vectors of `value`.
void AppendElement(const GgufValue& tmp, GgufValue* value) {
  if (auto* u = std::get_if<uint64_t>(&tmp.scalar)) {
    value->ints.push_back(static_cast<int64_t>(*u));
  } else if (auto* i = std::get_if<int64_t>(&tmp.scalar)) {
    value->ints.push_back(*i);
  } else if (auto* d = std::get_if<double>(&tmp.scalar)) {
    value->floats.push_back(*d);
  }
}

// Errors from these do not name the key: ParseMetadata adds it as context.
// `budget`: array elements still allowed in this file (kMaxArrayElements in total).
Status ReadValue(GgufCursor& cursor, GgufValueType type, GgufValue* value, uint64_t* budget);

Status ReadArray(GgufCursor& cursor, GgufValue* value, uint64_t* budget) {
  uint32_t elem_raw = 0;
  SHARDLM_TRY(cursor.Read(&elem_raw, "array element type"));
  auto elem = static_cast<GgufValueType>(elem_raw);
  if (elem == GgufValueType::kArray) return InvalidData("nested arrays are not supported");
  if (elem_raw >= static_cast<uint32_t>(GgufValueType::kSentinel)) {
    return InvalidData("unknown array element type {}", elem_raw);
  }
  uint64_t count = 0;
  SHARDLM_TRY(cursor.Read(&count, "array length"));
  uint64_t min_elem = elem == GgufValueType::kString ? 8 : ScalarSize(elem);
  if (count > cursor.remaining() / min_elem) {
    return InvalidData(
        "array of {} {} elements needs at least {} bytes per element, "
        "only {} bytes left",
        count, GgufValueTypeName(elem), min_elem, cursor.remaining());
  }
  if (count > *budget) {
    return InvalidData("array of {} elements exceeds the limit of {} array elements per file",
                       count, kMaxArrayElements);
  }
  *budget -= count;
  value->array_type = elem;
  value->array_size = count;
  if (elem == GgufValueType::kString) {
    value->strings.resize(count);
    for (uint64_t i = 0; i < count; ++i) {
      SHARDLM_TRY(cursor.ReadString(&value->strings[i], "array string"));
    }
    return Status::Ok();
  }
  if (IsFloat(elem)) {
    value->floats.reserve(count);
  } else {
    value->ints.reserve(count);
  }
  GgufValue tmp;
  for (uint64_t i = 0; i < count; ++i) {
    SHARDLM_TRY(ReadValue(cursor, elem, &tmp, budget));
    AppendElement(tmp, value);
  }
  return Status::Ok();
}

Status ReadValue(GgufCursor& cursor, GgufValueType type, GgufValue* value, uint64_t* budget) {
  value->type = type;
  if (type == GgufValueType::kString) {
    std::string_view s;
    SHARDLM_TRY(cursor.ReadString(&s, "string value"));
    value->scalar = s;
    return Status::Ok();
  }
  if (type == GgufValueType::kArray) return ReadArray(cursor, value, budget);
  SHARDLM_TRY(cursor.ReadScalar(type, value, "value"));
  if (type == GgufValueType::kBool && std::get<uint64_t>(value->scalar) > 1) {
    return InvalidData("bool value {} is neither 0 nor 1", std::get<uint64_t>(value->scalar));
  }
  return Status::Ok();
}

// a * b into *out, false on int64 overflow (both non-negative).
bool MulNonNeg(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

uint64_t AlignUp(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

}  // namespace

Status GgufCursor::ReadScalar(GgufValueType type, GgufValue* value, std::string_view what) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kBool:
      return ReadAs<uint8_t>(*this, value, what);
    case GgufValueType::kInt8:
      return ReadAs<int8_t>(*this, value, what);
    case GgufValueType::kUint16:
      return ReadAs<uint16_t>(*this, value, what);
    case GgufValueType::kInt16:
      return ReadAs<int16_t>(*this, value, what);
    case GgufValueType::kUint32:
      return ReadAs<uint32_t>(*this, value, what);
    case GgufValueType::kInt32:
      return ReadAs<int32_t>(*this, value, what);
    case GgufValueType::kFloat32:
      return ReadAs<float>(*this, value, what);
    case GgufValueType::kUint64:
      return ReadAs<uint64_t>(*this, value, what);
    case GgufValueType::kInt64:
      return ReadAs<int64_t>(*this, value, what);
    case GgufValueType::kFloat64:
      return ReadAs<double>(*this, value, what);
    default:
      return InvalidData("unknown value type {}", static_cast<uint32_t>(type));
  }
}

std::string_view GgufValueTypeName(GgufValueType type) {
  static constexpr std::string_view kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                "int32",  "float32", "bool",   "string", "array",
                                                "uint64", "int64",   "float64"};
  auto index = static_cast<uint32_t>(type);
  return index < std::size(kNames) ? kNames[index] : "unknown";
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // overflow was ruled out at parse time
  return n;
}

int64_t GgufTensorInfo::rows() const {
  int64_t n = 1;
  for (size_t d = 1; d < ne.size(); ++d) n *= ne[d];
  return n;
}

// ---- Opening -----------------------------------------------------------------------------

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("{}: no such file", path);
    return IoError("{}: cannot open: {}", path, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError("{}: not a regular file", path);
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = path;
  if (st.st_size > 0) {
    void* map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return IoError("{}: mmap of {} bytes failed: {}", path, st.st_size, std::strerror(err));
    }
    file->mapping_ = map;
    file->mapping_size_ = static_cast<size_t>(st.st_size);
    file->bytes_ = {static_cast<const uint8_t*>(map), file->mapping_size_};
  }
  ::close(fd);
  SHARDLM_TRY(file->Parse().WithContext(path));
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::span<const uint8_t> bytes,
                                                      std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = std::move(name);
  file->bytes_ = bytes;
  SHARDLM_TRY(file->Parse().WithContext(file->name_));
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

// ---- Parsing -----------------------------------------------------------------------------

Status GgufFile::Parse() {
  GgufCursor cursor(bytes_);
  uint32_t magic = 0;
  SHARDLM_TRY(cursor.Read(&magic, "magic"));
  if (magic != kGgufMagic) {
    return InvalidData("not a GGUF file (magic 0x{:08x}, expected 0x{:08x} \"GGUF\")", magic,
                       kGgufMagic);
  }
  SHARDLM_TRY(cursor.Read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    return Unsupported("GGUF version {} is not supported (only 2 and 3{})", version_,
                       version_ == 1 ? "; re-convert this v1 file with a current llama.cpp" : "");
  }
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  SHARDLM_TRY(cursor.Read(&n_tensors, "tensor count"));
  SHARDLM_TRY(cursor.Read(&n_kv, "metadata count"));
  if (n_kv > cursor.remaining() / kMinKvBytes) {
    return InvalidData("metadata count {} cannot fit in the {} bytes left", n_kv,
                       cursor.remaining());
  }
  SHARDLM_TRY(ParseMetadata(cursor, n_kv));
  if (n_tensors > cursor.remaining() / kMinTensorInfoBytes) {
    return InvalidData("tensor count {} cannot fit in the {} bytes left", n_tensors,
                       cursor.remaining());
  }
  SHARDLM_TRY(ReadAlignment());
  SHARDLM_TRY(ParseTensorInfos(cursor, n_tensors));
  data_offset_ = AlignUp(cursor.pos(), alignment_);
  return PlaceTensors();
}

Status GgufFile::ParseMetadata(GgufCursor& cursor, uint64_t n_kv) {
  uint64_t budget = kMaxArrayElements;
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufKeyValue kv;
    SHARDLM_TRY(cursor.ReadString(&kv.key, "metadata key"));
    uint32_t type_raw = 0;
    SHARDLM_TRY(cursor.Read(&type_raw, "metadata value type"));
    if (type_raw >= static_cast<uint32_t>(GgufValueType::kSentinel)) {
      return InvalidData("key '{}': unknown value type {}", kv.key, type_raw);
    }
    Status st = ReadValue(cursor, static_cast<GgufValueType>(type_raw), &kv.value, &budget);
    if (!st.ok()) return st.WithContext(fmt::format("key '{}'", kv.key));
    if (!key_index_.emplace(kv.key, metadata_.size()).second) {
      return InvalidData("duplicate metadata key '{}'", kv.key);
    }
    metadata_.push_back(std::move(kv));
  }
  return Status::Ok();
}

Status GgufFile::ReadAlignment() {
  const GgufValue* value = Find("general.alignment");
  if (value == nullptr) return Status::Ok();
  const uint64_t* unsigned_value = std::get_if<uint64_t>(&value->scalar);
  if (!IsInteger(value->type) || unsigned_value == nullptr) {
    return InvalidData("key 'general.alignment' is {}, expected an unsigned integer",
                       GgufValueTypeName(value->type));
  }
  uint64_t alignment = *unsigned_value;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 30)) {
    return InvalidData("key 'general.alignment': {} is not a power of two in [1, 2^30]", alignment);
  }
  alignment_ = alignment;
  return Status::Ok();
}

namespace {

// Validates dims, type and byte size of one tensor info (not yet its placement).
Status CheckTensorShape(GgufTensorInfo& info, uint32_t type_raw) {
  auto type = LookupGgmlType(type_raw);
  if (!type) return Unsupported("unsupported tensor type {}", GgmlTypeName(type_raw));
  info.type = static_cast<GgmlType>(type_raw);
  for (size_t d = 0; d < info.ne.size(); ++d) {
    if (info.ne[d] < 0) return InvalidData("ne[{}] = {} is negative", d, info.ne[d]);
  }
  // Rows (product of ne[1..]) and elements are both checked: rows() must not overflow
  // even when ne[0] == 0 makes the element count 0.
  int64_t rows = 1;
  int64_t n = 0;
  for (size_t d = 1; d < info.ne.size(); ++d) {
    if (!MulNonNeg(rows, info.ne[d], &rows)) n = -1;
  }
  if (n < 0 || !MulNonNeg(rows, info.ne[0], &n)) {
    return InvalidData("shape {} overflows the element count", fmt::join(info.ne, " x "));
  }
  if (info.ne[0] % type->block_size != 0) {
    return InvalidData("ne[0] = {} is not a multiple of the {} block size {}", info.ne[0],
                       type->name, type->block_size);
  }
  int64_t row_bytes = 0;
  int64_t n_bytes = 0;
  if (!MulNonNeg(info.ne[0] / type->block_size, type->type_size, &row_bytes) ||
      !MulNonNeg(rows, row_bytes, &n_bytes)) {
    return InvalidData("shape {} overflows the byte size", fmt::join(info.ne, " x "));
  }
  info.n_bytes = static_cast<uint64_t>(n_bytes);
  return Status::Ok();
}

Status ReadOneTensorInfo(GgufCursor& cursor, GgufTensorInfo* info) {
  SHARDLM_TRY(cursor.ReadString(&info->name, "tensor name"));
  Status st = [&]() -> Status {
    uint32_t n_dims = 0;
    SHARDLM_TRY(cursor.Read(&n_dims, "n_dims"));
    if (n_dims < 1 || n_dims > kMaxDims) {
      return InvalidData("n_dims {} is not in [1, {}]", n_dims, kMaxDims);
    }
    info->ne.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) SHARDLM_TRY(cursor.Read(&info->ne[d], "ne"));
    uint32_t type_raw = 0;
    SHARDLM_TRY(cursor.Read(&type_raw, "tensor type"));
    SHARDLM_TRY(cursor.Read(&info->offset, "tensor offset"));
    return CheckTensorShape(*info, type_raw);
  }();
  return st.WithContext(fmt::format("tensor '{}'", info->name));
}

}  // namespace

Status GgufFile::ParseTensorInfos(GgufCursor& cursor, uint64_t n_tensors) {
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info;
    SHARDLM_TRY(ReadOneTensorInfo(cursor, &info));
    if (!tensor_index_.emplace(info.name, tensors_.size()).second) {
      return InvalidData("duplicate tensor name '{}'", info.name);
    }
    tensors_.push_back(std::move(info));
  }
  return Status::Ok();
}

// Checks that every tensor's data is aligned, inside the file and not overlapping another.
Status GgufFile::PlaceTensors() {
  const uint64_t size = bytes_.size();
  if (tensors_.empty()) {
    data_offset_ = std::min(data_offset_, size);  // vocab-only files may omit the padding
    return Status::Ok();
  }
  if (data_offset_ > size) {
    return InvalidData("data section starts at {} beyond the file size {}", data_offset_, size);
  }
  const uint64_t data_size = size - data_offset_;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset % alignment_ != 0) {
      return InvalidData("tensor '{}': offset {} is not a multiple of the alignment {}", t.name,
                         t.offset, alignment_);
    }
    if (t.offset > data_size) {
      return InvalidData("tensor '{}': data offset {} is beyond the {}-byte data section", t.name,
                         t.offset, data_size);
    }
    if (t.n_bytes > data_size - t.offset) {  // no overflow below: start <= size < 2^63
      uint64_t start = data_offset_ + t.offset;
      return InvalidData("tensor '{}': data [{}, {}) exceeds file size {}", t.name, start,
                         start + t.n_bytes, size);
    }
    t.data = bytes_.data() + data_offset_ + t.offset;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const GgufTensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    if (prev.offset + prev.n_bytes > by_offset[i]->offset) {
      return InvalidData("tensor '{}' at data offset {} overlaps tensor '{}' [{}, {})",
                         by_offset[i]->name, by_offset[i]->offset, prev.name, prev.offset,
                         prev.offset + prev.n_bytes);
    }
  }
  return Status::Ok();
}

// ---- Lookup and typed getters ---------------------------------------------------------------

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const GgufValue*> GgufFile::FindTyped(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return NotFound("{}: metadata key '{}' is missing", name_, key);
  return value;
}

namespace {

Status WrongType(const std::string& file, std::string_view key, const GgufValue& v,
                 std::string_view wanted) {
  std::string have(GgufValueTypeName(v.type));
  if (v.type == GgufValueType::kArray) {
    have = fmt::format("array of {}", GgufValueTypeName(v.array_type));
  }
  return InvalidData("{}: metadata key '{}' is {}, expected {}", file, key, have, wanted);
}

}  // namespace

Result<uint64_t> GgufFile::GetUint(std::string_view key) const {
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(key));
  if (!IsInteger(v->type)) return WrongType(name_, key, *v, "an unsigned integer");
  if (auto* i = std::get_if<int64_t>(&v->scalar)) {
    if (*i < 0) {
      return InvalidData("{}: metadata key '{}' is {}, expected a non-negative value", name_, key,
                         *i);
    }
    return static_cast<uint64_t>(*i);
  }
  return std::get<uint64_t>(v->scalar);
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(key));
  if (!IsInteger(v->type)) return WrongType(name_, key, *v, "an integer");
  if (auto* u = std::get_if<uint64_t>(&v->scalar)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidData("{}: metadata key '{}' = {} does not fit in int64", name_, key, *u);
    }
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(v->scalar);
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(key));
  if (IsFloat(v->type)) return std::get<double>(v->scalar);
  if (!IsInteger(v->type)) return WrongType(name_, key, *v, "a number");
  if (auto* u = std::get_if<uint64_t>(&v->scalar)) return static_cast<double>(*u);
  return static_cast<double>(std::get<int64_t>(v->scalar));
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(key));
  if (v->type != GgufValueType::kBool) return WrongType(name_, key, *v, "bool");
  return std::get<uint64_t>(v->scalar) != 0;
}

Result<std::string_view> GgufFile::GetString(std::string_view key) const {
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(key));
  if (v->type != GgufValueType::kString) return WrongType(name_, key, *v, "string");
  return std::get<std::string_view>(v->scalar);
}

Result<const GgufValue*> GgufFile::GetArray(std::string_view key, GgufValueType elem_type) const {
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(key));
  bool elem_ok = elem_type == GgufValueType::kSentinel || v->array_type == elem_type;
  if (v->type != GgufValueType::kArray || !elem_ok) {
    std::string wanted = elem_type == GgufValueType::kSentinel
                             ? std::string("an array")
                             : fmt::format("array of {}", GgufValueTypeName(elem_type));
    return WrongType(name_, key, *v, wanted);
  }
  return v;
}

Result<uint64_t> GgufFile::GetUintOr(std::string_view key, uint64_t fallback) const {
  if (Find(key) == nullptr) return fallback;
  return GetUint(key);
}

Result<double> GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  if (Find(key) == nullptr) return fallback;
  return GetFloat(key);
}

Result<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  if (Find(key) == nullptr) return fallback;
  return GetBool(key);
}

}  // namespace shardlm
