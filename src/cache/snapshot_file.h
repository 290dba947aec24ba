// Snapshot file: the on-disk form of one cached block (one full page) for every stage, and
// the container of a slot file (a whole saved sequence, slot_file.h).
//
// Byte layout (all integers little-endian; every offset a multiple of 8):
//   header, kSnapshotHeaderBytes (80):
//     0  char[8] magic: "SHLMSNAP" (a cache block) or "SHLMSLOT" (a slot file)
//     8  u32 format_version (per kind: SnapshotFormatVersion)
//     12 u32 header_bytes (80; later versions only append)
//     16 u64 layout.hi, u64 layout.lo          (LayoutFingerprint, snapshot_layout.h)
//     32 u64 block_hash.hi, u64 block_hash.lo
//     48 u64 parent_hash.hi, u64 parent_hash.lo (kRootBlockHash for block 0)
//        (slot files: both hashes are zero)
//     64 u32 n_tokens                68 u32 n_sections
//     header_bytes-8: u64 xxh3-64 of header bytes [0, header_bytes-8)
//   then n_sections times:
//     descriptor, kSectionDescriptorBytes (64):
//       0 u32 kind   4 u32 stage_idx   8 u32 layer_begin   12 u32 layer_end   16 u32 dtype
//       20 u32 dims[4]   36 u32 reserved (0)   40 u64 byte_length
//       48 u64 xxh3-64 of the payload   56 u64 xxh3-64 of descriptor bytes [0, 56)
//     payload, byte_length bytes, then zero bytes up to a multiple of 8
//   and nothing after the last section.
// Section kinds and their geometry (dims not listed are 1; bytes = elements × dtype size,
// for q8_0 elements / 32 × 34: blocks of 32 int8 and an f16 scale, only in kv_page sections
// whose head_dim is a multiple of 32):
//   kv_page:         dims {page_tokens, n_kv_heads, head_dim, n_pages}; elements = 2 (K, V)
//                    × layers × dims product; the payload is n_pages of the stage's pages
//                    (page_pool.h: head-major, [n_kv_heads][page_tokens][head_dim] per
//                    layer and K/V) back to back (a cache block has one)
//   recurrent_state: elements = dims product: one sequence's state in the stage's recurrent
//                    layers (kv/recurrent_state.h's slot layout); layers: the stage's range
//   logits:          dims {n_vocab}; elements = dims product; dtype f32
//   tokens:          dims {n_tokens}; elements = dims product; dtype i32 (token ids)
//   page_selection:  dims {n_pages, 2}; elements = dims product; dtype f32: the bounded KV
//                    pool's memory of a sequence's pages (kv/paging.h PageSelection):
//                    n_pages scores (-inf: unscored), then n_pages recency ranks (integers)
//
// The header and descriptor encodings are public too, for files written and read a piece at
// a time (a slot file of a long sequence is gigabytes): a streamed file has exactly the bytes
// EncodeSnapshot gives, and a streamed reader makes the same checks as DecodeSnapshotOfKind.
//
// Goals: every byte is covered by a check — the header and each descriptor by their own
// checksum, payloads by theirs, padding must be zero, no trailing bytes — so a corrupt,
// truncated or foreign file is an InvalidData Status that names what failed, never a crash,
// an over-read or different data. Decoding does not copy: sections are views of the buffer.
// Non-goals: file I/O (atomic_file.h), compression, which sections a server needs
// (the caller checks them, e.g. CheckKvPageSection).
//
// Thread safety: pure functions. Lifetime: decoded sections point into the decoded buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "cache/block_hash.h"
#include "gguf/fingerprint.h"

namespace shardlm {

inline constexpr size_t kSnapshotHeaderBytes = 80;
inline constexpr size_t kSectionDescriptorBytes = 64;
// A bound on untrusted counts: a pipeline has a handful of stages, each with at most three
// sections; 4096 leaves room without letting a hostile count drive allocation.
inline constexpr uint32_t kMaxSnapshotSections = 4096;

// What a file holds; each kind has its own magic, so neither is ever read as the other.
enum class SnapshotFileKind : uint32_t { kBlock = 0, kSlot = 1, kSentinel };
const char* SnapshotFileKindName(SnapshotFileKind kind);

// The format version this build writes files of `kind` in, and the newest it reads (it reads
// every older one too). Each kind counts its own: a change to what one kind holds leaves the
// other's files current. Cache blocks: 1. Slot files: 2 (slot_file.h "Versions").
uint32_t SnapshotFormatVersion(SnapshotFileKind kind);

// The section kinds described above (their numbers are on disk).
enum class SectionKind : uint32_t {
  kKvPage = 1,          // a stage's KV pages
  kRecurrentState = 2,  // recurrent state of hybrid models
  kLogits = 3,          // one logits row
  kTokens = 4,          // token ids
  kPageSelection = 5,   // a bounded KV pool's memory of a sequence's pages
  kSentinel
};
const char* SectionKindName(SectionKind kind);

// Element type of a section's payload (each KV type has its own: SnapshotDTypeOf in
// snapshot_layout.h). The block types (q8_0 and the 4- and 5-bit ones) hold whole blocks of
// 32 per row.
enum class SnapshotDType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kI32 = 2,
  kQ8_0 = 3,
  kQ4_0 = 4,
  kQ4_1 = 5,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kIq4Nl = 8,
  kSentinel
};

struct SnapshotSection {
  SectionKind kind = SectionKind::kKvPage;
  int stage_idx = 0;
  int layer_begin = 0;
  int layer_end = 0;
  SnapshotDType dtype = SnapshotDType::kF32;
  std::array<uint32_t, 4> dims{1, 1, 1, 1};
  std::span<const uint8_t> bytes;
};

struct SnapshotHeader {
  SnapshotFileKind kind = SnapshotFileKind::kBlock;
  Fingerprint128 layout;
  BlockHash block_hash;
  BlockHash parent_hash;
  int n_tokens = 0;
  int n_sections = 0;  // filled by Decode; Encode uses the sections it is given
  // Decode: the file's. Encode: 0 writes the kind's current version; an older one writes the
  // header as that version did (the sections are the caller's), so tests can make old files.
  uint32_t format_version = 0;
};

struct Snapshot {
  SnapshotHeader header;
  std::vector<SnapshotSection> sections;  // views into the decoded buffer
};

// The payload size a section's kind, layers, dims and dtype call for; InvalidData naming
// the field when they are out of range or the product overflows.
Result<uint64_t> SectionPayloadBytes(const SnapshotSection& section);

// The file bytes; InvalidArgument when a section's bytes do not match its geometry.
Result<std::vector<uint8_t>> EncodeSnapshot(const SnapshotHeader& header,
                                            std::span<const SnapshotSection> sections);

// A section's descriptor: the section without its payload, the payload's length and xxh3-64.
struct SectionDescriptor {
  SnapshotSection section;  // bytes empty
  uint64_t byte_length = 0;
  uint64_t payload_checksum = 0;
};

// Payload bytes with the zero padding that follows them (a multiple of 8).
inline uint64_t PaddedPayloadBytes(uint64_t byte_length) {
  return (byte_length + 7) & ~uint64_t{7};
}

// The header bytes of a file of `n_sections` sections (header.n_sections is ignored).
std::array<uint8_t, kSnapshotHeaderBytes> EncodeSnapshotHeader(const SnapshotHeader& header,
                                                               uint32_t n_sections);
std::array<uint8_t, kSectionDescriptorBytes> EncodeSectionDescriptor(const SectionDescriptor& d);
// Checks descriptor `idx` (its checksum, kind, dtype, ranges, reserved field); the payload
// length is not compared with the geometry here (SectionPayloadBytes does that).
Result<SectionDescriptor> DecodeSectionDescriptor(
    size_t idx, std::span<const uint8_t, kSectionDescriptorBytes> bytes);

// Validates the header alone (magic, version, sizes, header checksum): what a folder scan
// needs. `bytes` may be the whole file or only its first bytes.
Result<SnapshotHeader> DecodeSnapshotHeader(std::span<const uint8_t> bytes);

// Validates everything and checks that the file is a `kind` file under `expected_layout`;
// the block hash is not checked.
Result<Snapshot> DecodeSnapshotOfKind(std::span<const uint8_t> file, SnapshotFileKind kind,
                                      const Fingerprint128& expected_layout);

// Validates everything and checks that the file is cache block `expected_hash` under
// `expected_layout`.
Result<Snapshot> DecodeSnapshot(std::span<const uint8_t> file,
                                const Fingerprint128& expected_layout,
                                const BlockHash& expected_hash);

}  // namespace shardlm
