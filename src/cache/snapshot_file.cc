#include "cache/snapshot_file.h"

#include <xxhash.h>

#include <cstring>
#include <string>

#include "base/check.h"
#include "tensor/quant_blocks.h"

namespace shardlm {
namespace {

constexpr char kBlockMagic[8] = {'S', 'H', 'L', 'M', 'S', 'N', 'A', 'P'};
constexpr char kSlotMagic[8] = {'S', 'H', 'L', 'M', 'S', 'L', 'O', 'T'};

const char* MagicOf(SnapshotFileKind kind) {
  return kind == SnapshotFileKind::kSlot ? kSlotMagic : kBlockMagic;
}

size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// a × b, or false on overflow.
bool MulChecked(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

std::string SectionName(size_t idx, const SnapshotSection& s) {
  return fmt::format("section {} ({}, stage {})", idx, SectionKindName(s.kind), s.stage_idx);
}

void EncodeDescriptor(const SnapshotSection& s, uint8_t* d) {
  const SectionDescriptor descriptor{s, s.bytes.size(),
                                     XXH3_64bits(s.bytes.data(), s.bytes.size())};
  const auto bytes = EncodeSectionDescriptor(descriptor);
  std::memcpy(d, bytes.data(), bytes.size());
}

// Decodes section `idx` at `offset` (advanced past its payload and padding): descriptor,
// geometry, bounds, payload checksum and zero padding.
Result<SnapshotSection> DecodeSection(std::span<const uint8_t> file, size_t idx, size_t& offset) {
  if (file.size() - offset < kSectionDescriptorBytes) {
    return InvalidData("truncated in section {} descriptor", idx);
  }
  SHARDLM_ASSIGN_OR_RETURN(
      SectionDescriptor descriptor,
      DecodeSectionDescriptor(idx, file.subspan(offset).first<kSectionDescriptorBytes>()));
  SnapshotSection s = descriptor.section;
  const uint64_t length = descriptor.byte_length, checksum = descriptor.payload_checksum;
  offset += kSectionDescriptorBytes;
  Result<uint64_t> want = SectionPayloadBytes(s);
  if (!want.ok()) return want.status().WithContext(SectionName(idx, s));
  if (*want != length) {
    return InvalidData("{}: {} bytes, its geometry needs {}", SectionName(idx, s), length, *want);
  }
  if (length > file.size() - offset || Align8(length) > file.size() - offset) {
    return InvalidData("truncated in {} payload: {} bytes, {} left", SectionName(idx, s), length,
                       file.size() - offset);
  }
  s.bytes = file.subspan(offset, length);
  if (XXH3_64bits(s.bytes.data(), s.bytes.size()) != checksum) {
    return InvalidData("{}: payload checksum mismatch", SectionName(idx, s));
  }
  for (size_t pad = offset + length; pad < offset + Align8(length); ++pad) {
    if (file[pad] != 0) return InvalidData("{}: non-zero padding", SectionName(idx, s));
  }
  offset += Align8(length);
  return s;
}

}  // namespace

std::array<uint8_t, kSectionDescriptorBytes> EncodeSectionDescriptor(
    const SectionDescriptor& desc) {
  std::array<uint8_t, kSectionDescriptorBytes> out{};
  uint8_t* d = out.data();
  const SnapshotSection& s = desc.section;
  PutU32(d + 0, static_cast<uint32_t>(s.kind));
  PutU32(d + 4, static_cast<uint32_t>(s.stage_idx));
  PutU32(d + 8, static_cast<uint32_t>(s.layer_begin));
  PutU32(d + 12, static_cast<uint32_t>(s.layer_end));
  PutU32(d + 16, static_cast<uint32_t>(s.dtype));
  for (int i = 0; i < 4; ++i) PutU32(d + 20 + 4 * i, s.dims[i]);
  PutU32(d + 36, 0);
  PutU64(d + 40, desc.byte_length);
  PutU64(d + 48, desc.payload_checksum);
  PutU64(d + 56, XXH3_64bits(d, 56));
  return out;
}

Result<SectionDescriptor> DecodeSectionDescriptor(
    size_t idx, std::span<const uint8_t, kSectionDescriptorBytes> bytes) {
  const uint8_t* d = bytes.data();
  if (GetU64(d + 56) != XXH3_64bits(d, 56)) {
    return InvalidData("section {}: descriptor checksum mismatch", idx);
  }
  const uint32_t kind = GetU32(d + 0);
  if (kind == 0 || kind >= static_cast<uint32_t>(SectionKind::kSentinel)) {
    return InvalidData("section {}: unknown kind {}", idx, kind);
  }
  const uint32_t dtype = GetU32(d + 16);
  if (dtype >= static_cast<uint32_t>(SnapshotDType::kSentinel)) {
    return InvalidData("section {}: unknown dtype {}", idx, dtype);
  }
  const uint32_t stage = GetU32(d + 4), begin = GetU32(d + 8), end = GetU32(d + 12);
  constexpr uint32_t kIntMax = 0x7fffffff;
  if (stage > kIntMax || begin > kIntMax || end > kIntMax) {
    return InvalidData("section {}: stage {} or layer range [{}, {}) out of range", idx, stage,
                       begin, end);
  }
  if (GetU32(d + 36) != 0) return InvalidData("section {}: reserved field is not 0", idx);
  SectionDescriptor out;
  SnapshotSection& s = out.section;
  s.kind = static_cast<SectionKind>(kind);
  s.stage_idx = static_cast<int>(stage);
  s.layer_begin = static_cast<int>(begin);
  s.layer_end = static_cast<int>(end);
  s.dtype = static_cast<SnapshotDType>(dtype);
  for (int i = 0; i < 4; ++i) s.dims[i] = GetU32(d + 20 + 4 * i);
  out.byte_length = GetU64(d + 40);
  out.payload_checksum = GetU64(d + 48);
  return out;
}

std::array<uint8_t, kSnapshotHeaderBytes> EncodeSnapshotHeader(const SnapshotHeader& header,
                                                               uint32_t n_sections) {
  std::array<uint8_t, kSnapshotHeaderBytes> out{};
  uint8_t* h = out.data();
  std::memcpy(h, MagicOf(header.kind), sizeof(kBlockMagic));
  const uint32_t current = SnapshotFormatVersion(header.kind);
  const uint32_t version = header.format_version == 0 ? current : header.format_version;
  SHARDLM_CHECK_MSG(version <= current, "format version %u of a %s (this build writes %u)", version,
                    SnapshotFileKindName(header.kind), current);
  PutU32(h + 8, version);
  PutU32(h + 12, kSnapshotHeaderBytes);
  PutU64(h + 16, header.layout.hi);
  PutU64(h + 24, header.layout.lo);
  PutU64(h + 32, header.block_hash.hi);
  PutU64(h + 40, header.block_hash.lo);
  PutU64(h + 48, header.parent_hash.hi);
  PutU64(h + 56, header.parent_hash.lo);
  PutU32(h + 64, static_cast<uint32_t>(header.n_tokens));
  PutU32(h + 68, n_sections);
  PutU64(h + 72, XXH3_64bits(h, 72));
  return out;
}

uint32_t SnapshotFormatVersion(SnapshotFileKind kind) {
  // Slot files: 2 since they carry the recurrent state of models with recurrent layers.
  return kind == SnapshotFileKind::kSlot ? 2 : 1;
}

const char* SnapshotFileKindName(SnapshotFileKind kind) {
  switch (kind) {
    case SnapshotFileKind::kBlock:
      return "cache block";
    case SnapshotFileKind::kSlot:
      return "slot file";
    case SnapshotFileKind::kSentinel:
      break;
  }
  return "unknown";
}

const char* SectionKindName(SectionKind kind) {
  switch (kind) {
    case SectionKind::kKvPage:
      return "kv_page";
    case SectionKind::kRecurrentState:
      return "recurrent_state";
    case SectionKind::kLogits:
      return "logits";
    case SectionKind::kTokens:
      return "tokens";
    case SectionKind::kPageSelection:
      return "page_selection";
    case SectionKind::kSentinel:
      break;
  }
  return "unknown";
}

// Bytes of one 32-element block of a block dtype; 0 for the others.
uint64_t BlockBytes(SnapshotDType dtype) {
  switch (dtype) {
    case SnapshotDType::kQ8_0:
      return sizeof(BlockQ8_0);
    case SnapshotDType::kQ4_0:
      return sizeof(BlockQ4_0);
    case SnapshotDType::kQ4_1:
      return sizeof(BlockQ4_1);
    case SnapshotDType::kQ5_0:
      return sizeof(BlockQ5_0);
    case SnapshotDType::kQ5_1:
      return sizeof(BlockQ5_1);
    case SnapshotDType::kIq4Nl:
      return sizeof(BlockIq4Nl);
    default:
      return 0;
  }
}

// Bytes of `elements` elements of `dtype`; 0 when the dtype is unknown or the elements do not
// fill whole blocks.
uint64_t DTypeBytes(SnapshotDType dtype, uint64_t elements) {
  switch (dtype) {
    case SnapshotDType::kF32:
    case SnapshotDType::kI32:
      return elements > UINT64_MAX / 4 ? 0 : 4 * elements;
    case SnapshotDType::kF16:
      return elements > UINT64_MAX / 2 ? 0 : 2 * elements;
    default:
      break;
  }
  const uint64_t block = BlockBytes(dtype);
  return block == 0 || elements % kQK != 0 ? 0 : elements / kQK * block;
}

Result<uint64_t> SectionPayloadBytes(const SnapshotSection& s) {
  if (s.dtype >= SnapshotDType::kSentinel) {
    return InvalidData("unknown dtype {}", static_cast<uint32_t>(s.dtype));
  }
  if (s.layer_begin < 0 || s.layer_end < s.layer_begin) {
    return InvalidData("bad layer range [{}, {})", s.layer_begin, s.layer_end);
  }
  uint64_t elements = 1;
  for (uint32_t dim : s.dims) {
    if (dim == 0) return InvalidData("a zero dimension");
    if (!MulChecked(elements, dim, &elements)) return InvalidData("dimensions overflow");
  }
  const uint64_t n_layers = static_cast<uint64_t>(s.layer_end - s.layer_begin);
  uint64_t factor = 1;
  switch (s.kind) {
    case SectionKind::kKvPage:
      if (n_layers == 0) return InvalidData("kv_page with no layers");
      if (s.dtype == SnapshotDType::kI32) return InvalidData("kv_page of i32");
      if (BlockBytes(s.dtype) != 0 && s.dims[2] % kQK != 0) {
        return InvalidData("kv_page of blocks with head_dim {} (not a multiple of {})", s.dims[2],
                           kQK);
      }
      factor = 2 * n_layers;  // K and V of each layer
      break;
    case SectionKind::kRecurrentState:
      if (n_layers == 0) return InvalidData("recurrent_state with no layers");
      if (BlockBytes(s.dtype) != 0) return InvalidData("recurrent_state of a block type");
      break;
    case SectionKind::kLogits:
      if (s.dtype != SnapshotDType::kF32) return InvalidData("logits must be f32");
      break;
    case SectionKind::kTokens:
      if (s.dtype != SnapshotDType::kI32) return InvalidData("tokens must be i32");
      break;
    case SectionKind::kPageSelection:
      if (s.dtype != SnapshotDType::kF32) return InvalidData("page_selection must be f32");
      if (s.dims[1] != 2) return InvalidData("page_selection with {} rows (2)", s.dims[1]);
      break;
    default:
      return InvalidData("unknown kind {}", static_cast<uint32_t>(s.kind));
  }
  if (!MulChecked(elements, factor, &elements)) return InvalidData("dimensions overflow");
  const uint64_t bytes = DTypeBytes(s.dtype, elements);
  if (bytes == 0) return InvalidData("dimensions overflow");
  return bytes;
}

Result<std::vector<uint8_t>> EncodeSnapshot(const SnapshotHeader& header,
                                            std::span<const SnapshotSection> sections) {
  if (header.n_tokens <= 0) return InvalidArgument("snapshot with {} tokens", header.n_tokens);
  if (header.kind != SnapshotFileKind::kBlock && header.kind != SnapshotFileKind::kSlot) {
    return InvalidArgument("unknown file kind {}", static_cast<uint32_t>(header.kind));
  }
  if (sections.size() > kMaxSnapshotSections) {
    return InvalidArgument("{} sections (at most {})", sections.size(), kMaxSnapshotSections);
  }
  size_t total = kSnapshotHeaderBytes;
  for (size_t i = 0; i < sections.size(); ++i) {
    Result<uint64_t> want = SectionPayloadBytes(sections[i]);
    if (!want.ok()) {
      return InvalidArgument("{}: {}", SectionName(i, sections[i]), want.status().message());
    }
    if (*want != sections[i].bytes.size()) {
      return InvalidArgument("{}: {} bytes, its geometry needs {}", SectionName(i, sections[i]),
                             sections[i].bytes.size(), *want);
    }
    total += kSectionDescriptorBytes + Align8(sections[i].bytes.size());
  }
  std::vector<uint8_t> out(total, 0);
  const auto head = EncodeSnapshotHeader(header, static_cast<uint32_t>(sections.size()));
  std::memcpy(out.data(), head.data(), head.size());
  size_t offset = kSnapshotHeaderBytes;
  for (const SnapshotSection& s : sections) {
    EncodeDescriptor(s, out.data() + offset);
    offset += kSectionDescriptorBytes;
    if (!s.bytes.empty()) std::memcpy(out.data() + offset, s.bytes.data(), s.bytes.size());
    offset += Align8(s.bytes.size());
  }
  return out;
}

Result<SnapshotHeader> DecodeSnapshotHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < 16) {
    return InvalidData("truncated: {} bytes, the header needs {}", bytes.size(),
                       kSnapshotHeaderBytes);
  }
  const uint8_t* h = bytes.data();
  SnapshotHeader header;
  if (std::memcmp(h, kBlockMagic, sizeof(kBlockMagic)) == 0) {
    header.kind = SnapshotFileKind::kBlock;
  } else if (std::memcmp(h, kSlotMagic, sizeof(kSlotMagic)) == 0) {
    header.kind = SnapshotFileKind::kSlot;
  } else {
    return InvalidData("not a snapshot (magic)");
  }
  const uint32_t version = GetU32(h + 8);
  if (version == 0 || version > SnapshotFormatVersion(header.kind)) {
    return InvalidData("format version {} of a {}; this build reads versions 1 to {}", version,
                       SnapshotFileKindName(header.kind), SnapshotFormatVersion(header.kind));
  }
  header.format_version = version;
  const uint32_t header_bytes = GetU32(h + 12);
  if (header_bytes != kSnapshotHeaderBytes) {
    return InvalidData("header of {} bytes, version {} has {}", header_bytes, version,
                       kSnapshotHeaderBytes);
  }
  if (bytes.size() < header_bytes) {
    return InvalidData("truncated: {} bytes, the header needs {}", bytes.size(), header_bytes);
  }
  if (GetU64(h + header_bytes - 8) != XXH3_64bits(h, header_bytes - 8)) {
    return InvalidData("header checksum mismatch");
  }
  header.layout = {GetU64(h + 16), GetU64(h + 24)};
  header.block_hash = {GetU64(h + 32), GetU64(h + 40)};
  header.parent_hash = {GetU64(h + 48), GetU64(h + 56)};
  const uint32_t n_tokens = GetU32(h + 64), n_sections = GetU32(h + 68);
  if (n_tokens == 0 || n_tokens > 0x7fffffff) return InvalidData("n_tokens {}", n_tokens);
  if (n_sections > kMaxSnapshotSections) {
    return InvalidData("{} sections (at most {})", n_sections, kMaxSnapshotSections);
  }
  header.n_tokens = static_cast<int>(n_tokens);
  header.n_sections = static_cast<int>(n_sections);
  return header;
}

Result<Snapshot> DecodeSnapshotOfKind(std::span<const uint8_t> file, SnapshotFileKind kind,
                                      const Fingerprint128& expected_layout) {
  Snapshot snap;
  SHARDLM_ASSIGN_OR_RETURN(snap.header, DecodeSnapshotHeader(file));
  if (snap.header.kind != kind) {
    return InvalidData("a {}, not a {}", SnapshotFileKindName(snap.header.kind),
                       SnapshotFileKindName(kind));
  }
  if (snap.header.layout != expected_layout) {
    return InvalidData("layout fingerprint {}, expected {} (another model, split or geometry)",
                       snap.header.layout.ToHex(), expected_layout.ToHex());
  }
  size_t offset = kSnapshotHeaderBytes;
  for (size_t i = 0; i < static_cast<size_t>(snap.header.n_sections); ++i) {
    SHARDLM_ASSIGN_OR_RETURN(SnapshotSection s, DecodeSection(file, i, offset));
    snap.sections.push_back(s);
  }
  if (offset != file.size()) {
    return InvalidData("{} trailing bytes after the last section", file.size() - offset);
  }
  return snap;
}

Result<Snapshot> DecodeSnapshot(std::span<const uint8_t> file,
                                const Fingerprint128& expected_layout,
                                const BlockHash& expected_hash) {
  // The header alone first: a wrong hash is reported before a payload is checksummed.
  SHARDLM_ASSIGN_OR_RETURN(SnapshotHeader header, DecodeSnapshotHeader(file));
  if (header.kind == SnapshotFileKind::kBlock && header.layout == expected_layout &&
      header.block_hash != expected_hash) {
    return InvalidData("block hash {}, expected {}", header.block_hash.ToHex(),
                       expected_hash.ToHex());
  }
  return DecodeSnapshotOfKind(file, SnapshotFileKind::kBlock, expected_layout);
}

}  // namespace shardlm
