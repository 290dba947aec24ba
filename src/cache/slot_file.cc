// SlotFile: encoding and validation of a saved slot sequence (see slot_file.h).
#include "cache/slot_file.h"

#include <string>

#include "base/check.h"

namespace shardlm {
namespace {

uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

SnapshotSection TokensSection(int n_tokens, std::span<const uint8_t> bytes) {
  SnapshotSection s;
  s.kind = SectionKind::kTokens;
  s.dtype = SnapshotDType::kI32;
  s.dims = {static_cast<uint32_t>(n_tokens), 1, 1, 1};
  s.bytes = bytes;
  return s;
}

std::vector<uint8_t> TokensToBytes(std::span<const int32_t> tokens) {
  std::vector<uint8_t> out(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  return out;
}

Result<std::vector<int32_t>> TokensFromSection(const SnapshotSection& s, int n_tokens) {
  const SnapshotSection want = TokensSection(n_tokens, {});
  if (s.kind != SectionKind::kTokens) {
    return InvalidData("section 0 is {}, a slot file starts with its tokens",
                       SectionKindName(s.kind));
  }
  if (s.dims != want.dims || s.stage_idx != 0 || s.layer_begin != 0 || s.layer_end != 0) {
    return InvalidData("the tokens section holds {} tokens, the header says {}", s.dims[0],
                       n_tokens);
  }
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t v = 0;
    for (int b = 3; b >= 0; --b) v = (v << 8) | s.bytes[4 * i + b];
    tokens[i] = static_cast<int32_t>(v);
    if (tokens[i] < 0) return InvalidData("token {} has id {}", i, tokens[i]);
  }
  return tokens;
}

}  // namespace

int SlotPages(const SnapshotLayout& layout, int n_tokens) {
  return (n_tokens + layout.page_tokens - 1) / layout.page_tokens;
}

Result<std::vector<uint8_t>> EncodeSlotFile(const SnapshotLayout& layout,
                                            std::span<const int32_t> tokens,
                                            std::span<const std::span<const uint8_t>> stage_pages) {
  if (tokens.empty()) return InvalidArgument("a slot file needs at least one token");
  if (stage_pages.size() != layout.stages.size()) {
    return InvalidArgument("pages of {} stages for a layout of {}", stage_pages.size(),
                           layout.stages.size());
  }
  const int n_tokens = static_cast<int>(tokens.size());
  const std::vector<uint8_t> token_bytes = TokensToBytes(tokens);
  std::vector<SnapshotSection> sections{TokensSection(n_tokens, token_bytes)};
  for (size_t s = 0; s < stage_pages.size(); ++s) {
    sections.push_back(
        KvPageSection(layout, static_cast<int>(s), stage_pages[s], SlotPages(layout, n_tokens)));
  }
  SnapshotHeader header;
  header.kind = SnapshotFileKind::kSlot;
  header.layout = LayoutFingerprint(layout);
  header.n_tokens = n_tokens;
  return EncodeSnapshot(header, sections);
}

Result<SlotImage> DecodeSlotFile(std::span<const uint8_t> file, const SnapshotLayout& layout) {
  SHARDLM_ASSIGN_OR_RETURN(Snapshot snap, DecodeSnapshotOfKind(file, SnapshotFileKind::kSlot,
                                                               LayoutFingerprint(layout)));
  if (snap.header.block_hash != kRootBlockHash || snap.header.parent_hash != kRootBlockHash) {
    return InvalidData("a slot file with block hashes set");
  }
  const size_t n_stages = layout.stages.size();
  if (snap.sections.size() != 1 + n_stages) {
    return InvalidData("{} sections; a slot file of {} stages has {} (tokens, one per stage)",
                       snap.sections.size(), n_stages, 1 + n_stages);
  }
  SlotImage image;
  SHARDLM_ASSIGN_OR_RETURN(image.tokens, TokensFromSection(snap.sections[0], snap.header.n_tokens));
  image.n_pages = SlotPages(layout, snap.header.n_tokens);
  for (size_t s = 0; s < n_stages; ++s) {
    const SnapshotSection& section = snap.sections[1 + s];
    SHARDLM_TRY(CheckKvPageSection(layout, static_cast<int>(s), section, image.n_pages));
    image.stage_pages.push_back(section.bytes);
  }
  return image;
}

uint64_t SlotFileBytes(const SnapshotLayout& layout, int n_tokens) {
  SHARDLM_CHECK(n_tokens >= 1);
  const int n_pages = SlotPages(layout, n_tokens);
  uint64_t bytes = kSnapshotHeaderBytes + kSectionDescriptorBytes + Align8(4 * uint64_t(n_tokens));
  for (size_t s = 0; s < layout.stages.size(); ++s) {
    const SnapshotSection section = KvPageSection(layout, static_cast<int>(s), {}, n_pages);
    Result<uint64_t> payload = SectionPayloadBytes(section);
    bytes += kSectionDescriptorBytes + (payload.ok() ? Align8(*payload) : 0);
  }
  return bytes;
}

}  // namespace shardlm
