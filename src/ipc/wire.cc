// WireWriter / WireReader (wire_impl.h): explicit little-endian byte order, so the
// encoding is the same whatever the host.
#include <algorithm>
#include <bit>
#include <cmath>

#include "base/check.h"
#include "ipc/shard_protocol.h"
#include "ipc/wire_impl.h"

namespace shardlm {

void WireWriter::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void WireWriter::U64(uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void WireWriter::F64(double v) { U64(std::bit_cast<uint64_t>(v)); }

void WireWriter::String(const std::string& v) {
  size_t n = std::min<size_t>(v.size(), kMaxShardString);
  // Cut before a UTF-8 continuation byte, so a truncated message stays valid text.
  if (n < v.size()) {
    while (n > 0 && (static_cast<uint8_t>(v[n]) & 0xc0) == 0x80) --n;
  }
  Count(n);
  out_.insert(out_.end(), v.begin(), v.begin() + n);
}

void WireWriter::Count(size_t n) {
  SHARDLM_CHECK(n <= UINT32_MAX);
  U32(static_cast<uint32_t>(n));
}

void WireReader::Fail(Status status) {
  if (status_.ok()) status_ = std::move(status);
}

const uint8_t* WireReader::Take(size_t n, const char* field) {
  if (!ok()) return nullptr;
  if (n > remaining()) {
    Fail(InvalidData("field '{}' needs {} bytes at offset {}, {} left", field, n, pos_,
                     remaining()));
    return nullptr;
  }
  const uint8_t* p = bytes_.data() + pos_;
  pos_ += n;
  return p;
}

uint8_t WireReader::U8(const char* field) {
  const uint8_t* p = Take(1, field);
  return p ? p[0] : 0;
}

bool WireReader::Bool(const char* field) {
  uint8_t v = U8(field);
  if (v > 1) Fail(InvalidData("field '{}' is a bool but holds {}", field, v));
  return v == 1;
}

uint32_t WireReader::U32(const char* field) {
  const uint8_t* p = Take(4, field);
  if (!p) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

uint64_t WireReader::U64(const char* field) {
  const uint8_t* p = Take(8, field);
  if (!p) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

double WireReader::F64(const char* field) {
  double v = std::bit_cast<double>(U64(field));
  if (!std::isfinite(v)) {
    Fail(InvalidData("field '{}' is not a finite number", field));
    return 0.0;
  }
  return v;
}

std::string WireReader::String(const char* field) {
  uint32_t n = U32(field);
  if (n > kMaxShardString) {
    Fail(InvalidData("field '{}': string of {} bytes exceeds the limit of {}", field, n,
                     kMaxShardString));
    return {};
  }
  const uint8_t* p = Take(n, field);
  return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
}

uint32_t WireReader::Count(const char* field, size_t min_element_bytes) {
  SHARDLM_CHECK(min_element_bytes > 0);
  uint32_t n = U32(field);
  if (!ok()) return 0;
  if (n > remaining() / min_element_bytes) {
    Fail(
        InvalidData("field '{}': {} elements of at least {} bytes do not fit in the {} "
                    "bytes left",
                    field, n, min_element_bytes, remaining()));
    return 0;
  }
  return n;
}

uint32_t WireReader::Enum(const char* field, uint32_t sentinel) {
  uint32_t v = U32(field);
  if (ok() && v >= sentinel) {
    Fail(InvalidData("field '{}' holds {}, which is not a known value (< {})", field, v, sentinel));
    return 0;
  }
  return v;
}

Status WireReader::Finish(const char* message) const {
  if (!ok()) return status_.WithContext(message);
  if (remaining() != 0) {
    return InvalidData("{}: {} trailing bytes after the last field", message, remaining());
  }
  return Status::Ok();
}

}  // namespace shardlm
