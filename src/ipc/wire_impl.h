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

#include <bit>
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

// Field visitors. A message lists its fields once, in wire order, as calls on a visitor:
// v("name", field) for a scalar or string, v.Enum("name", field, sentinel), v.Array("name",
// items, min_element_bytes, each) with each(v, item) for the elements. WireEncoder writes
// the fields, WireDecoder reads them into a value, so the two directions cannot disagree on
// order or width.
class WireEncoder {
 public:
  explicit WireEncoder(std::vector<uint8_t>& out) : w_(out) {}
  void operator()(const char*, uint32_t v) { w_.U32(v); }
  void operator()(const char*, int32_t v) { w_.I32(v); }
  void operator()(const char*, uint64_t v) { w_.U64(v); }
  void operator()(const char*, int64_t v) { w_.U64(static_cast<uint64_t>(v)); }
  void operator()(const char*, double v) { w_.F64(v); }
  // A float travels as its bits: infinities included (page scores start at -infinity).
  void operator()(const char*, float v) { w_.U32(std::bit_cast<uint32_t>(v)); }
  void operator()(const char*, bool v) { w_.Bool(v); }
  void operator()(const char*, const std::string& v) { w_.String(v); }
  void Enum(const char*, uint32_t v, uint32_t) { w_.U32(v); }
  template <typename T, typename Each>
  void Array(const char*, const std::vector<T>& items, size_t, Each each) {
    w_.Count(items.size());
    for (const T& item : items) each(*this, item);
  }

 private:
  WireWriter w_;
};

class WireDecoder {
 public:
  explicit WireDecoder(WireReader& r) : r_(r) {}
  void operator()(const char* field, uint32_t& v) { v = r_.U32(field); }
  void operator()(const char* field, int32_t& v) { v = r_.I32(field); }
  void operator()(const char* field, uint64_t& v) { v = r_.U64(field); }
  void operator()(const char* field, int64_t& v) { v = static_cast<int64_t>(r_.U64(field)); }
  void operator()(const char* field, double& v) { v = r_.F64(field); }
  void operator()(const char* field, float& v) { v = std::bit_cast<float>(r_.U32(field)); }
  void operator()(const char* field, bool& v) { v = r_.Bool(field); }
  void operator()(const char* field, std::string& v) { v = r_.String(field); }
  void Enum(const char* field, uint32_t& v, uint32_t sentinel) { v = r_.Enum(field, sentinel); }
  // The count is checked against the bytes left before anything is allocated.
  template <typename T, typename Each>
  void Array(const char* field, std::vector<T>& items, size_t min_element_bytes, Each each) {
    items.resize(r_.Count(field, min_element_bytes));
    for (T& item : items) each(*this, item);
  }

 private:
  WireReader& r_;
};

// Appends m's fields as `fields(encoder, m)` lists them.
template <typename Fields, typename T>
void EncodeFields(Fields fields, const T& m, std::vector<uint8_t>& out) {
  WireEncoder encoder(out);
  fields(encoder, m);
}

// Decodes `payload` with `read(reader)` into a T, then checks that nothing is left over.
template <typename T, typename ReadFn>
Result<T> DecodeWith(std::span<const uint8_t> payload, const char* message, ReadFn read) {
  WireReader reader(payload);
  T value = read(reader);
  SHARDLM_TRY(reader.Finish(message));
  return value;
}

// Decodes a T whose fields `fields(decoder, m)` lists, then checks nothing is left over.
template <typename T, typename Fields>
Result<T> DecodeFields(Fields fields, std::span<const uint8_t> payload, const char* message) {
  return DecodeWith<T>(payload, message, [&](WireReader& reader) {
    T value;
    WireDecoder decoder(reader);
    fields(decoder, value);
    return value;
  });
}

}  // namespace shardlm
