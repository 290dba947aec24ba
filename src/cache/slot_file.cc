// SlotFile: the geometry, streaming writer and reader of a saved slot sequence, and their
// in-memory forms (see slot_file.h).
#include "cache/slot_file.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "base/check.h"

namespace shardlm {
namespace {

constexpr uint64_t kTokenBytes = 4;  // i32, little-endian
// A stage's pages of one sequence above this many bytes are no slot file (a 128K-token
// sequence of a large model is ~2^37); the bound keeps every offset sum far from overflow.
constexpr uint64_t kMaxSectionBytes = uint64_t{1} << 50;

SnapshotSection TokensSection(int n_tokens) {
  SnapshotSection s;
  s.kind = SectionKind::kTokens;
  s.dtype = SnapshotDType::kI32;
  s.dims = {static_cast<uint32_t>(n_tokens), 1, 1, 1};
  return s;
}

std::vector<uint8_t> TokensToBytes(std::span<const int32_t> tokens) {
  std::vector<uint8_t> out(PaddedPayloadBytes(tokens.size() * kTokenBytes), 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  return out;
}

Xxh3State NewChecksum() {
  Xxh3State state(XXH3_createState());
  SHARDLM_CHECK_MSG(state != nullptr, "out of memory for an xxh3 state");
  XXH3_64bits_reset(state.get());
  return state;
}

SnapshotHeader SlotHeader(const SnapshotLayout& layout, int n_tokens) {
  SnapshotHeader header;
  header.kind = SnapshotFileKind::kSlot;
  header.layout = LayoutFingerprint(layout);
  header.n_tokens = n_tokens;
  return header;
}

// What section `idx` of a file of geometry `g` holds: its kind and stage.
std::pair<SectionKind, int> RoleOf(const SlotFileGeometry& g, size_t idx) {
  if (idx == 0) return {SectionKind::kTokens, 0};
  if (g.has_selection && idx == 1) return {SectionKind::kPageSelection, 0};
  for (size_t s = 0; s < g.page_section.size(); ++s) {
    if (g.page_section[s] == int(idx)) return {SectionKind::kKvPage, int(s)};
    if (g.state_section[s] == int(idx)) return {SectionKind::kRecurrentState, int(s)};
  }
  SHARDLM_CHECK_MSG(false, "section %zu is outside the geometry", idx);
  return {SectionKind::kSentinel, 0};
}

// Checks a descriptor read at section `idx` against the section the geometry expects there.
Status CheckDescriptor(const SnapshotLayout& layout, const SlotFileGeometry& g, size_t idx,
                       const SectionDescriptor& d) {
  const SnapshotSection& s = d.section;
  const auto [kind, stage] = RoleOf(g, idx);
  uint64_t want_bytes = 0;
  switch (kind) {
    case SectionKind::kTokens: {
      if (s.kind != SectionKind::kTokens) {
        return InvalidData("section 0 is {}, a slot file starts with its tokens",
                           SectionKindName(s.kind));
      }
      const SnapshotSection want = TokensSection(g.n_tokens);
      if (s.dims != want.dims || s.dtype != want.dtype || s.stage_idx != 0 || s.layer_begin != 0 ||
          s.layer_end != 0) {
        return InvalidData("the tokens section holds {} tokens, the header says {}", s.dims[0],
                           g.n_tokens);
      }
      want_bytes = kTokenBytes * uint64_t(g.n_tokens);
      break;
    }
    case SectionKind::kPageSelection:
      if (s.kind != SectionKind::kPageSelection || s.dims[0] != uint32_t(g.n_pages)) {
        return InvalidData("section 1 is {} of {}, the page_selection of {} pages was expected",
                           SectionKindName(s.kind), s.dims[0], g.n_pages);
      }
      want_bytes = g.selection_bytes();
      break;
    case SectionKind::kKvPage:
      SHARDLM_TRY(CheckKvPageSection(layout, stage, s, g.n_pages));
      want_bytes = g.page_bytes[size_t(stage)] * uint64_t(g.n_pages);
      break;
    default:  // kRecurrentState: RoleOf names no other kind
      SHARDLM_TRY(CheckRecurrentStateSection(layout, stage, s));
      want_bytes = g.state_bytes[size_t(stage)];
      break;
  }
  if (d.byte_length != want_bytes) {
    return InvalidData("section {} ({}): {} bytes, its geometry needs {}", idx,
                       SectionKindName(s.kind), d.byte_length, want_bytes);
  }
  return Status::Ok();
}

Status CheckZeroPadding(std::span<const uint8_t> padding, size_t section_idx) {
  for (uint8_t byte : padding) {
    if (byte != 0) return InvalidData("section {}: non-zero padding", section_idx);
  }
  return Status::Ok();
}

}  // namespace

void Xxh3StateFree::operator()(XXH3_state_s* state) const { XXH3_freeState(state); }

int SlotPages(const SnapshotLayout& layout, int n_tokens) {
  return (n_tokens + layout.page_tokens - 1) / layout.page_tokens;
}

uint64_t SlotFileGeometry::total_state_bytes() const {
  uint64_t total = 0;
  for (uint64_t bytes : state_bytes) total += bytes;
  return total;
}

Result<SlotFileGeometry> SlotFileGeometryOf(const SnapshotLayout& layout, int n_tokens,
                                            bool has_selection) {
  if (n_tokens <= 0) return InvalidData("a sequence of {} tokens", n_tokens);
  SlotFileGeometry g;
  g.n_tokens = n_tokens;
  g.n_pages = SlotPages(layout, n_tokens);
  g.has_selection = has_selection;
  g.state_position = n_tokens / layout.page_tokens * layout.page_tokens;
  uint64_t offset = kSnapshotHeaderBytes;
  auto add_section = [&](uint64_t payload_bytes) {
    g.descriptor_offset.push_back(offset);
    g.payload_offset.push_back(offset + kSectionDescriptorBytes);
    offset += kSectionDescriptorBytes + PaddedPayloadBytes(payload_bytes);
    return int(g.descriptor_offset.size()) - 1;
  };
  add_section(kTokenBytes * uint64_t(n_tokens));
  if (has_selection) add_section(g.selection_bytes());
  for (size_t s = 0; s < layout.stages.size(); ++s) {
    g.page_bytes.push_back(0);
    g.page_section.push_back(-1);
    if (layout.stages[s].n_kv_layers() == 0) continue;  // pages of no bytes: no section
    Result<uint64_t> page = SectionPayloadBytes(KvPageSection(layout, int(s), {}, 1));
    if (!page.ok()) return page.status().WithContext(fmt::format("stage {}", s));
    if (*page > kMaxSectionBytes / uint64_t(g.n_pages)) {
      return InvalidData("stage {}: {} pages of {} bytes overflow", s, g.n_pages, *page);
    }
    g.page_bytes[s] = *page;
    g.page_section[s] = add_section(*page * uint64_t(g.n_pages));
  }
  for (size_t s = 0; s < layout.stages.size(); ++s) {
    g.state_bytes.push_back(0);
    g.state_section.push_back(-1);
    // No whole page: the state at position 0 is the empty one, nothing to carry.
    if (layout.stages[s].state_floats == 0 || g.state_position == 0) continue;
    if (layout.stages[s].state_floats > std::numeric_limits<uint32_t>::max()) {
      return InvalidData("stage {}: a recurrent state of {} floats", s,
                         layout.stages[s].state_floats);
    }
    g.state_bytes[s] = layout.stages[s].state_bytes();
    g.state_section[s] = add_section(g.state_bytes[s]);
  }
  g.file_bytes = offset;
  return g;
}

uint64_t SlotFileBytes(const SnapshotLayout& layout, int n_tokens, bool has_selection) {
  Result<SlotFileGeometry> g = SlotFileGeometryOf(layout, n_tokens, has_selection);
  SHARDLM_CHECK_MSG(g.ok(), "%s", g.status().message().c_str());
  return g->file_bytes;
}

// --- writer ---

SlotFileWriter::SlotFileWriter(const SnapshotLayout& layout, SlotFileGeometry geometry,
                               WriteAt write_at)
    : layout_(layout), geometry_(std::move(geometry)), write_at_(std::move(write_at)) {
  for (size_t s = 0; s < layout_.stages.size(); ++s) checksums_.push_back(NewChecksum());
}

Result<SlotFileWriter> SlotFileWriter::Start(const SnapshotLayout& layout,
                                             std::span<const int32_t> tokens, WriteAt write_at,
                                             const PageSelection* selection) {
  if (tokens.empty()) return InvalidArgument("a slot file needs at least one token");
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max())) {
    return InvalidArgument("a slot file of {} tokens", tokens.size());
  }
  Result<SlotFileGeometry> geometry =
      SlotFileGeometryOf(layout, int(tokens.size()), selection != nullptr);
  if (!geometry.ok()) return InvalidArgument("{}", geometry.status().message());
  if (selection != nullptr && selection->n_pages() != geometry->n_pages) {
    return InvalidArgument("a page selection of {} pages for a sequence of {}",
                           selection->n_pages(), geometry->n_pages);
  }
  SlotFileWriter writer(layout, std::move(geometry).value(), std::move(write_at));
  const SlotFileGeometry& g = writer.geometry_;
  const auto header =
      EncodeSnapshotHeader(SlotHeader(layout, g.n_tokens), static_cast<uint32_t>(g.n_sections()));
  SHARDLM_TRY(writer.write_at_(0, header));
  const std::vector<uint8_t> token_bytes = TokensToBytes(tokens);
  const uint64_t token_length = kTokenBytes * tokens.size();
  const SectionDescriptor descriptor{
      TokensSection(g.n_tokens), token_length,
      XXH3_64bits(token_bytes.data(), static_cast<size_t>(token_length))};
  SHARDLM_TRY(writer.write_at_(g.descriptor_offset[0], EncodeSectionDescriptor(descriptor)));
  SHARDLM_TRY(writer.write_at_(g.payload_offset[0], token_bytes));
  if (selection != nullptr) {
    std::vector<uint8_t> storage;
    const SnapshotSection section = PageSelectionSection(*selection, &storage);
    const SectionDescriptor chosen{section, storage.size(),
                                   XXH3_64bits(storage.data(), storage.size())};
    SHARDLM_TRY(writer.write_at_(g.descriptor_offset[1], EncodeSectionDescriptor(chosen)));
    SHARDLM_TRY(writer.write_at_(g.payload_offset[1], storage));  // 8 bytes a page: no padding
  }
  for (size_t s = 0; s < g.page_bytes.size(); ++s) {
    if (g.page_section[s] < 0) continue;
    SHARDLM_TRY(
        writer.WritePadding(size_t(g.page_section[s]), g.page_bytes[s] * uint64_t(g.n_pages)));
  }
  return writer;
}

Status SlotFileWriter::WritePadding(size_t section, uint64_t length) {
  static constexpr uint8_t kZeros[8] = {};
  const uint64_t padding = PaddedPayloadBytes(length) - length;
  if (padding == 0) return Status::Ok();
  return write_at_(geometry_.payload_offset[section] + length,
                   std::span<const uint8_t>(kZeros, padding));
}

Status SlotFileWriter::WritePages(int n, std::span<const uint8_t* const> src_by_stage) {
  if (src_by_stage.size() != geometry_.page_bytes.size()) {
    return InvalidArgument("pages of {} stages for a layout of {}", src_by_stage.size(),
                           geometry_.page_bytes.size());
  }
  if (n < 0 || n > geometry_.n_pages - pages_done_) {
    return InvalidArgument("pages [{}, {}) of a sequence of {}", pages_done_, pages_done_ + n,
                           geometry_.n_pages);
  }
  if (n == 0) return Status::Ok();
  for (size_t s = 0; s < src_by_stage.size(); ++s) {
    if (geometry_.page_section[s] < 0) continue;
    const uint64_t page = geometry_.page_bytes[s];
    const std::span<const uint8_t> bytes(src_by_stage[s], size_t(page * uint64_t(n)));
    SHARDLM_TRY(write_at_(
        geometry_.payload_offset[size_t(geometry_.page_section[s])] + page * uint64_t(pages_done_),
        bytes));
    XXH3_64bits_update(checksums_[s].get(), bytes.data(), bytes.size());
  }
  pages_done_ += n;
  return Status::Ok();
}

Status SlotFileWriter::WriteState(std::span<const uint8_t> state) {
  if (state_done_ || state.size() != geometry_.total_state_bytes() || state.empty()) {
    return InvalidArgument("a recurrent state of {} bytes for a slot file that holds {} ({})",
                           state.size(), geometry_.total_state_bytes(),
                           state_done_ ? "written already" : "at its last whole page");
  }
  size_t offset = 0;
  for (size_t s = 0; s < geometry_.state_bytes.size(); ++s) {
    if (geometry_.state_section[s] < 0) continue;
    const size_t section = size_t(geometry_.state_section[s]);
    const std::span<const uint8_t> bytes = state.subspan(offset, geometry_.state_bytes[s]);
    offset += bytes.size();
    const SectionDescriptor descriptor{RecurrentStateSection(layout_, int(s), {}), bytes.size(),
                                       XXH3_64bits(bytes.data(), bytes.size())};
    SHARDLM_TRY(
        write_at_(geometry_.descriptor_offset[section], EncodeSectionDescriptor(descriptor)));
    SHARDLM_TRY(write_at_(geometry_.payload_offset[section], bytes));
    SHARDLM_TRY(WritePadding(section, bytes.size()));
  }
  state_done_ = true;
  return Status::Ok();
}

Status SlotFileWriter::Finish() {
  if (pages_done_ != geometry_.n_pages) {
    return InvalidArgument("slot file finished after {} of its {} pages", pages_done_,
                           geometry_.n_pages);
  }
  if (!state_done_ && geometry_.total_state_bytes() > 0) {
    return InvalidArgument("slot file finished without its recurrent state");
  }
  for (size_t s = 0; s < geometry_.page_bytes.size(); ++s) {
    if (geometry_.page_section[s] < 0) continue;
    const SectionDescriptor descriptor{KvPageSection(layout_, int(s), {}, geometry_.n_pages),
                                       geometry_.page_bytes[s] * uint64_t(geometry_.n_pages),
                                       XXH3_64bits_digest(checksums_[s].get())};
    SHARDLM_TRY(write_at_(geometry_.descriptor_offset[size_t(geometry_.page_section[s])],
                          EncodeSectionDescriptor(descriptor)));
  }
  return Status::Ok();
}

// --- reader ---

SlotFileReader::SlotFileReader(SlotFileGeometry geometry, ReadAt read_at)
    : geometry_(std::move(geometry)),
      read_at_(std::move(read_at)),
      want_checksums_(geometry_.page_bytes.size(), 0) {
  for (size_t s = 0; s < geometry_.page_bytes.size(); ++s) checksums_.push_back(NewChecksum());
}

Result<SlotFileReader> SlotFileReader::Open(const SnapshotLayout& layout, uint64_t file_bytes,
                                            ReadAt read_at, int max_tokens) {
  std::vector<uint8_t> head(std::min<uint64_t>(file_bytes, kSnapshotHeaderBytes));
  if (!head.empty()) SHARDLM_TRY(read_at(0, head));
  SHARDLM_ASSIGN_OR_RETURN(SnapshotHeader header, DecodeSnapshotHeader(head));
  if (header.kind != SnapshotFileKind::kSlot) {
    return InvalidData("a {}, not a {}", SnapshotFileKindName(header.kind),
                       SnapshotFileKindName(SnapshotFileKind::kSlot));
  }
  const Fingerprint128 expected = LayoutFingerprint(layout);
  if (header.layout != expected) {
    return InvalidData("layout fingerprint {}, expected {} (another model, split or geometry)",
                       header.layout.ToHex(), expected.ToHex());
  }
  if (header.block_hash != kRootBlockHash || header.parent_hash != kRootBlockHash) {
    return InvalidData("a slot file with block hashes set");
  }
  if (header.n_tokens > max_tokens) {
    return InvalidData("a sequence of {} tokens; a slot here holds at most {} (its context size)",
                       header.n_tokens, max_tokens);
  }
  if (header.format_version < 2 && HasRecurrentState(layout)) {
    return InvalidData(
        "format version {} holds no recurrent state, and this model's recurrent layers cannot "
        "resume from pages alone",
        header.format_version);
  }
  SHARDLM_ASSIGN_OR_RETURN(SlotFileGeometry plain, SlotFileGeometryOf(layout, header.n_tokens));
  const size_t n_sections = size_t(header.n_sections);
  if (n_sections != plain.n_sections() && n_sections != plain.n_sections() + 1) {
    int n_pages = 0, n_states = 0;
    for (size_t s = 0; s < layout.stages.size(); ++s) {
      n_pages += plain.page_section[s] >= 0;
      n_states += plain.state_section[s] >= 0;
    }
    return InvalidData(
        "{} sections; a slot file of {} tokens under this layout has {} (tokens, {} kv_page, {} "
        "recurrent_state) or {} (with a page_selection)",
        n_sections, header.n_tokens, plain.n_sections(), n_pages, n_states, plain.n_sections() + 1);
  }
  const bool has_selection = n_sections == plain.n_sections() + 1;
  SHARDLM_ASSIGN_OR_RETURN(SlotFileGeometry g,
                           SlotFileGeometryOf(layout, header.n_tokens, has_selection));
  if (file_bytes < g.file_bytes) {
    return InvalidData("truncated: {} bytes, a slot file of {} tokens has {}", file_bytes,
                       g.n_tokens, g.file_bytes);
  }
  if (file_bytes > g.file_bytes) {
    return InvalidData("{} trailing bytes after the last section", file_bytes - g.file_bytes);
  }
  SlotFileReader reader(std::move(g), std::move(read_at));
  for (size_t idx = 0; idx < n_sections; ++idx) SHARDLM_TRY(reader.ReadSection(layout, idx));
  return reader;
}

// Checks section idx's descriptor; reads and checks the payload of every section but the
// pages (their checksums are compared by Finish).
Status SlotFileReader::ReadSection(const SnapshotLayout& layout, size_t idx) {
  const SlotFileGeometry& geo = geometry_;
  std::array<uint8_t, kSectionDescriptorBytes> bytes{};
  SHARDLM_TRY(read_at_(geo.descriptor_offset[idx], bytes));
  SHARDLM_ASSIGN_OR_RETURN(SectionDescriptor d, DecodeSectionDescriptor(idx, bytes));
  SHARDLM_TRY(CheckDescriptor(layout, geo, idx, d));
  const auto [kind, stage] = RoleOf(geo, idx);
  if (kind == SectionKind::kKvPage) {
    want_checksums_[size_t(stage)] = d.payload_checksum;
    return Status::Ok();
  }
  // Small (tokens, a selection) or bounded by the model (a state), and sized by the geometry.
  std::vector<uint8_t> payload(PaddedPayloadBytes(d.byte_length));
  SHARDLM_TRY(read_at_(geo.payload_offset[idx], payload));
  if (XXH3_64bits(payload.data(), size_t(d.byte_length)) != d.payload_checksum) {
    return InvalidData(
        "section {} ({}{}): payload checksum mismatch", idx, SectionKindName(kind),
        kind == SectionKind::kRecurrentState ? fmt::format(", stage {}", stage) : std::string());
  }
  SHARDLM_TRY(CheckZeroPadding(std::span(payload).subspan(size_t(d.byte_length)), idx));
  payload.resize(size_t(d.byte_length));
  switch (kind) {
    case SectionKind::kTokens:
      tokens_.resize(size_t(geo.n_tokens));
      for (size_t i = 0; i < tokens_.size(); ++i) {
        uint32_t v = 0;
        for (int b = 3; b >= 0; --b) v = (v << 8) | payload[4 * i + b];
        tokens_[i] = static_cast<int32_t>(v);
        if (tokens_[i] < 0) return InvalidData("token {} has id {}", i, tokens_[i]);
      }
      return Status::Ok();
    case SectionKind::kPageSelection: {
      SnapshotSection section = d.section;
      section.bytes = payload;
      SHARDLM_ASSIGN_OR_RETURN(PageSelection selection, DecodePageSelectionSection(section));
      selection_ = std::move(selection);
      return Status::Ok();
    }
    default:  // kRecurrentState: the stages' states follow each other in stage order
      state_.insert(state_.end(), payload.begin(), payload.end());
      return Status::Ok();
  }
}

Status SlotFileReader::ReadPages(int n, std::span<uint8_t* const> dst_by_stage) {
  if (dst_by_stage.size() != geometry_.page_bytes.size()) {
    return InvalidArgument("buffers of {} stages for a layout of {}", dst_by_stage.size(),
                           geometry_.page_bytes.size());
  }
  if (n < 0 || n > geometry_.n_pages - pages_done_) {
    return InvalidArgument("pages [{}, {}) of a sequence of {}", pages_done_, pages_done_ + n,
                           geometry_.n_pages);
  }
  if (n == 0) return Status::Ok();
  for (size_t s = 0; s < dst_by_stage.size(); ++s) {
    if (geometry_.page_section[s] < 0) continue;
    const uint64_t page = geometry_.page_bytes[s];
    const std::span<uint8_t> bytes(dst_by_stage[s], size_t(page * uint64_t(n)));
    SHARDLM_TRY(read_at_(
        geometry_.payload_offset[size_t(geometry_.page_section[s])] + page * uint64_t(pages_done_),
        bytes));
    XXH3_64bits_update(checksums_[s].get(), bytes.data(), bytes.size());
  }
  pages_done_ += n;
  return Status::Ok();
}

Status SlotFileReader::Finish() {
  if (pages_done_ != geometry_.n_pages) {
    return InvalidArgument("slot file checked after {} of its {} pages", pages_done_,
                           geometry_.n_pages);
  }
  for (size_t s = 0; s < geometry_.page_bytes.size(); ++s) {
    if (geometry_.page_section[s] < 0) continue;
    const size_t section = size_t(geometry_.page_section[s]);
    if (XXH3_64bits_digest(checksums_[s].get()) != want_checksums_[s]) {
      return InvalidData("section {} (kv_page, stage {}): payload checksum mismatch", section, s);
    }
    const uint64_t length = geometry_.page_bytes[s] * uint64_t(geometry_.n_pages);
    std::vector<uint8_t> padding(PaddedPayloadBytes(length) - length);
    if (padding.empty()) continue;
    SHARDLM_TRY(read_at_(geometry_.payload_offset[section] + length, padding));
    SHARDLM_TRY(CheckZeroPadding(padding, section));
  }
  return Status::Ok();
}

// --- in memory ---

Result<std::vector<uint8_t>> EncodeSlotFile(const SnapshotLayout& layout,
                                            std::span<const int32_t> tokens,
                                            std::span<const std::span<const uint8_t>> stage_pages,
                                            const PageSelection* selection,
                                            std::span<const uint8_t> state) {
  if (stage_pages.size() != layout.stages.size()) {
    return InvalidArgument("pages of {} stages for a layout of {}", stage_pages.size(),
                           layout.stages.size());
  }
  if (tokens.empty()) return InvalidArgument("a slot file needs at least one token");
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max())) {
    return InvalidArgument("a slot file of {} tokens", tokens.size());
  }
  Result<SlotFileGeometry> sized =
      SlotFileGeometryOf(layout, int(tokens.size()), selection != nullptr);
  if (!sized.ok()) return InvalidArgument("{}", sized.status().message());
  std::vector<uint8_t> out(sized->file_bytes, 0);
  auto write_at = [&out](uint64_t offset, std::span<const uint8_t> bytes) {
    if (offset + bytes.size() > out.size()) return InvalidArgument("write past the file's end");
    if (!bytes.empty()) std::memcpy(out.data() + offset, bytes.data(), bytes.size());
    return Status::Ok();
  };
  SHARDLM_ASSIGN_OR_RETURN(SlotFileWriter writer,
                           SlotFileWriter::Start(layout, tokens, write_at, selection));
  const SlotFileGeometry& g = writer.geometry();
  std::vector<const uint8_t*> src;
  for (size_t s = 0; s < stage_pages.size(); ++s) {
    if (stage_pages[s].size() != g.page_bytes[s] * uint64_t(g.n_pages)) {
      return InvalidArgument("stage {}: {} bytes of pages, {} pages need {}", s,
                             stage_pages[s].size(), g.n_pages, g.page_bytes[s] * g.n_pages);
    }
    src.push_back(stage_pages[s].data());
  }
  SHARDLM_TRY(writer.WritePages(g.n_pages, src));
  if (!state.empty() || g.total_state_bytes() > 0) SHARDLM_TRY(writer.WriteState(state));
  SHARDLM_TRY(writer.Finish());
  return out;
}

Result<SlotImage> DecodeSlotFile(std::span<const uint8_t> file, const SnapshotLayout& layout) {
  auto read_at = [file](uint64_t offset, std::span<uint8_t> dst) {
    if (offset > file.size() || dst.size() > file.size() - offset) {
      return InvalidData("truncated: {} bytes", file.size());
    }
    if (!dst.empty()) std::memcpy(dst.data(), file.data() + offset, dst.size());
    return Status::Ok();
  };
  SHARDLM_ASSIGN_OR_RETURN(
      SlotFileReader reader,
      SlotFileReader::Open(layout, file.size(), read_at, std::numeric_limits<int>::max()));
  // A page at a time through a scratch page: the checks of a streamed restore, over views.
  const SlotFileGeometry& g = reader.geometry();
  std::vector<std::vector<uint8_t>> scratch;
  std::vector<uint8_t*> dst;
  for (uint64_t bytes : g.page_bytes) {
    scratch.emplace_back(bytes);
    dst.push_back(scratch.back().data());
  }
  for (int page = 0; page < g.n_pages; ++page) SHARDLM_TRY(reader.ReadPages(1, dst));
  SHARDLM_TRY(reader.Finish());
  SlotImage image;
  image.tokens = reader.tokens();
  image.selection = reader.selection();
  image.n_pages = g.n_pages;
  for (size_t s = 0; s < g.page_bytes.size(); ++s) {
    image.stage_pages.push_back(g.page_section[s] < 0
                                    ? std::span<const uint8_t>()
                                    : file.subspan(g.payload_offset[size_t(g.page_section[s])],
                                                   g.page_bytes[s] * uint64_t(g.n_pages)));
  }
  image.state_position = g.state_position;
  image.state = reader.state();
  return image;
}

}  // namespace shardlm
