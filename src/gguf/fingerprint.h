// ModelFingerprint: a 128-bit identity of a GGUF file, cheap to compute on multi-GB files.
//
// What it hashes (xxh3-128): the header bytes [0, data_offset) (every key and tensor info),
// the file size, and for each tensor in file order the xxh3-64 of its first and last 4 KiB of
// data. So a re-quantized file or one with other weights but the same header differs, while
// only ~8 KiB per tensor is read.
// Goals: stable across runs, machines and versions of shardlm (it keys the persistent prefix
// cache: cache/block_hash.h). Non-goals: detecting a change in the middle of a large
// tensor (use a checksum of the whole file for that), cryptographic strength.
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf_file.h"

namespace shardlm {

struct Fingerprint128 {
  uint64_t hi = 0;
  uint64_t lo = 0;

  std::string ToHex() const;  // 32 lowercase hex digits, hi first
  friend bool operator==(const Fingerprint128&, const Fingerprint128&) = default;
};

// Reads only the header and the edges of each tensor. Thread-safe (the file is immutable).
Fingerprint128 ModelFingerprint(const GgufFile& file);

}  // namespace shardlm
