// WireWriter / WireReader: the little-endian, fixed-width encoding of the shard protocol
// (shard_protocol.h), kept out of the message code so each Encode/Decode reads as a field
// list.
//
// Goals: a reader that can never over-read: every read checks the bytes left; a count is
// checked against the bytes left (count × smallest element size) before anything is
// allocated, and strings against kMaxShardString; bools must be 0 or 1; trailing bytes are
// an error. The first failure sticks: later reads return zero values and do nothing, and
// Finish() reports the first error, naming the field.
// Non-goals: framing (message_channel.h), message meaning.
//
// Thread safety: one object per thread. Lifetime: the reader borrows its span; the writer
// appends to a caller's vector that must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardlm {

class WireWriter {
 public:
  explicit WireWriter(std::vector<uint8_t>& out) : out_(out) {}
  void U8(uint8_t v) { out_.push_back(v); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void U32(uint32_t v);
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void U64(uint64_t v);
  void F64(double v);
  // Truncates to kMaxShardString bytes (at a UTF-8 character boundary): error texts can
  // grow past the limit, and a daemon must answer rather than abort. A path that long is
  // not a valid path anyway (PATH_MAX), so cutting one only makes the open fail.
  void String(const std::string& v);
  void Count(size_t n);  // u32 element count of the array that follows

 private:
  std::vector<uint8_t>& out_;
};

class WireReader {
 public:
  explicit WireReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  uint8_t U8(const char* field);
  bool Bool(const char* field);
  uint32_t U32(const char* field);
  int32_t I32(const char* field) { return static_cast<int32_t>(U32(field)); }
  uint64_t U64(const char* field);
  double F64(const char* field);  // finite values only
  std::string String(const char* field);
  // A u32 count of elements that each take at least min_element_bytes on the wire; 0 (and
  // a sticky error) when the rest of the payload cannot hold that many.
  uint32_t Count(const char* field, size_t min_element_bytes);
  // A u32 that must be < sentinel (an enum value).
  uint32_t Enum(const char* field, uint32_t sentinel);

  bool ok() const { return status_.ok(); }
  size_t remaining() const { return bytes_.size() - pos_; }
  // The first error, or InvalidData when bytes are left over; `message` names the message.
  Status Finish(const char* message) const;

 private:
  // Points at n readable bytes and advances, or records an error and returns nullptr.
  const uint8_t* Take(size_t n, const char* field);
  void Fail(Status status);

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  Status status_;
};

// Decodes `payload` with `read(reader)` into a T, then checks that nothing is left over.
template <typename T, typename ReadFn>
Result<T> DecodeWith(std::span<const uint8_t> payload, const char* message, ReadFn read) {
  WireReader reader(payload);
  T value = read(reader);
  SHARDLM_TRY(reader.Finish(message));
  return value;
}

}  // namespace shardlm
