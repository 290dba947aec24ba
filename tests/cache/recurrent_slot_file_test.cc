// Slot files of a model with recurrent layers (slot_file.h): each stage's recurrent state at
// the sequence's last whole page travels with the tokens and pages, in the disk tier's section;
// a stage without KV layers has no kv_page section; a sequence without a whole page carries no
// state. Every flipped state byte, a truncated or missing state section and a state of another
// size are InvalidData errors; a version 1 file (before slot files carried the state) reads for
// a model without recurrent layers and is refused, naming why, for one with them; cache blocks
// stay version 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cache/slot_file.h"
#include "cache/snapshot_test_util.h"

namespace shardlm {
namespace recurrent_slot_file_test {

using testing_util::Pattern;
using testing_util::SmallLayout;

// Four layers, two-token pages, one KV head of 2 dims. Stage 0 holds three recurrent layers
// and no KV (pages of no bytes); stage 1 one attention layer (pages of 32 bytes) and, with
// `both`, a recurrent layer too, whose state of 9 floats leaves padding after it.
SnapshotLayout RecurrentLayout(bool both = false) {
  SnapshotLayout layout = SmallLayout();
  layout.stages = {{0, 3, 0, 6}, {3, 4, 1, both ? 9u : 0u}};
  if (both) layout.stages = {{0, 2, 0, 6}, {2, 4, 1, 9}};
  return layout;
}

// A sequence of n tokens: stage 1's pages and every stage's state at the last whole page.
struct Sequence {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> pages;  // stage 1's
  std::vector<uint8_t> state;  // every stage's, in stage order
  Sequence(const SnapshotLayout& layout, int n) {
    for (int i = 0; i < n; ++i) tokens.push_back(7 * i + 1);
    pages = Pattern(32 * size_t(SlotPages(layout, n)), 5);
    if (n >= layout.page_tokens) {
      for (const StageLayers& stage : layout.stages) {
        const std::vector<uint8_t> part = Pattern(stage.state_bytes(), uint8_t(stage.layer_end));
        state.insert(state.end(), part.begin(), part.end());
      }
    }
  }
  Result<std::vector<uint8_t>> Encode(const SnapshotLayout& layout) const {
    const std::vector<std::span<const uint8_t>> views = {{}, pages};
    return EncodeSlotFile(layout, tokens, views, nullptr, state);
  }
};

TEST(RecurrentSlotFile, TheStateTravelsWithTheSequenceAndKvLessStagesHaveNoPages) {
  for (bool both : {false, true}) {
    const SnapshotLayout layout = RecurrentLayout(both);
    for (int n : {2, 5, 8}) {
      SCOPED_TRACE(fmt::format("both {} n {}", both, n));
      const Sequence seq(layout, n);
      auto file = seq.Encode(layout);
      ASSERT_TRUE(file.ok()) << file.status().message();
      EXPECT_EQ(file->size(), SlotFileBytes(layout, n));
      const SlotFileGeometry g = SlotFileGeometryOf(layout, n).value();
      EXPECT_EQ(g.page_section[0], -1);  // stage 0's pages hold nothing
      EXPECT_EQ(g.page_bytes[0], 0u);
      EXPECT_EQ(g.state_position, n / 2 * 2);
      EXPECT_EQ(g.n_sections(), both ? 4u : 3u);  // tokens, a kv_page, one state per stage
      auto image = DecodeSlotFile(*file, layout);
      ASSERT_TRUE(image.ok()) << image.status().message();
      EXPECT_EQ(image->tokens, seq.tokens);
      EXPECT_TRUE(image->stage_pages[0].empty());
      EXPECT_TRUE(std::equal(image->stage_pages[1].begin(), image->stage_pages[1].end(),
                             seq.pages.begin(), seq.pages.end()));
      EXPECT_EQ(image->state_position, n / 2 * 2);
      EXPECT_EQ(image->state, seq.state);
      EXPECT_EQ(image->state.size(), both ? 60u : 24u);
    }
  }
}

// Position 0's state is the empty one: a sequence shorter than a page carries none, and a
// state given for it is refused.
TEST(RecurrentSlotFile, ASequenceWithoutAWholePageCarriesNoState) {
  const SnapshotLayout layout = RecurrentLayout(true);
  const Sequence seq(layout, 1);
  ASSERT_TRUE(seq.state.empty());
  auto file = seq.Encode(layout);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(SlotFileGeometryOf(layout, 1)->n_sections(), 2u);
  auto image = DecodeSlotFile(*file, layout);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_TRUE(image->state.empty());
  const std::vector<uint8_t> state(60, 1);
  const std::vector<std::span<const uint8_t>> views = {{}, seq.pages};
  EXPECT_EQ(EncodeSlotFile(layout, seq.tokens, views, nullptr, state).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(RecurrentSlotFile, EveryFlippedStateByteAndEveryTruncationIsDetected) {
  const SnapshotLayout layout = RecurrentLayout(true);
  const Sequence seq(layout, 4);
  const std::vector<uint8_t> file = seq.Encode(layout).value();
  const SlotFileGeometry g = SlotFileGeometryOf(layout, 4).value();
  for (size_t s = 0; s < 2; ++s) {
    const size_t section = size_t(g.state_section[s]);
    const size_t end = g.payload_offset[section] + PaddedPayloadBytes(g.state_bytes[s]);
    for (size_t i = g.descriptor_offset[section]; i < end; ++i) {
      std::vector<uint8_t> bad = file;
      bad[i] ^= 0x08;
      auto image = DecodeSlotFile(bad, layout);
      ASSERT_FALSE(image.ok()) << "stage " << s << " byte " << i << " went unnoticed";
      EXPECT_EQ(image.status().code(), StatusCode::kInvalidData);
    }
    // A payload byte names the state section.
    std::vector<uint8_t> bad = file;
    bad[g.payload_offset[section]] ^= 0x01;
    const Status status = DecodeSlotFile(bad, layout).status();
    EXPECT_NE(status.message().find(fmt::format("recurrent_state, stage {}): payload checksum", s)),
              std::string::npos)
        << status.message();
  }
  for (size_t n = 0; n < file.size(); ++n) {
    ASSERT_EQ(DecodeSlotFile(std::span(file).first(n), layout).status().code(),
              StatusCode::kInvalidData)
        << "truncated to " << n;
  }
}

// Valid containers whose state sections are missing, misplaced, of another stage or size.
TEST(RecurrentSlotFile, MissingOrMisshapenStateSectionsAreRefused) {
  const SnapshotLayout layout = RecurrentLayout(true);
  const Sequence seq(layout, 4);
  const std::vector<uint8_t> file = seq.Encode(layout).value();
  Snapshot good =
      DecodeSnapshotOfKind(file, SnapshotFileKind::kSlot, LayoutFingerprint(layout)).value();
  ASSERT_EQ(good.sections.size(), 4u);
  const SnapshotSection tokens = good.sections[0], pages = good.sections[1];
  const SnapshotSection state0 = good.sections[2], state1 = good.sections[3];
  SnapshotSection wrong_stage = state1;
  wrong_stage.stage_idx = 0;
  const std::vector<uint8_t> short_bytes(32, 0);
  SnapshotSection short_state = state1;
  short_state.dims[0] = 8;
  short_state.bytes = short_bytes;
  const std::vector<std::vector<SnapshotSection>> bad = {
      {tokens, pages},                       // no state at all
      {tokens, pages, state0},               // a stage's state missing
      {tokens, pages, state1, state0},       // stages out of order
      {tokens, state0, pages, state1},       // state before the pages
      {tokens, pages, state0, wrong_stage},  // stage 1's state labelled stage 0
      {tokens, pages, state0, short_state},  // a state of another size
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto encoded = EncodeSnapshot(good.header, bad[i]);
    ASSERT_TRUE(encoded.ok()) << encoded.status().message();
    auto image = DecodeSlotFile(*encoded, layout);
    ASSERT_FALSE(image.ok()) << "case " << i;
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidData);
    if (i == 0) {
      EXPECT_NE(image.status().message().find("2 recurrent_state"), std::string::npos)
          << image.status().message();
    }
  }
}

TEST(RecurrentSlotFile, TheWriterNeedsTheStateOnceAndOfItsSize) {
  const SnapshotLayout layout = RecurrentLayout(true);
  const Sequence seq(layout, 4);
  std::vector<uint8_t> out(SlotFileBytes(layout, 4));
  auto write_at = [&out](uint64_t offset, std::span<const uint8_t> bytes) {
    std::memcpy(out.data() + offset, bytes.data(), bytes.size());
    return Status::Ok();
  };
  auto writer = SlotFileWriter::Start(layout, seq.tokens, write_at);
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  const std::vector<const uint8_t*> src = {nullptr, seq.pages.data()};
  ASSERT_TRUE(writer->WritePages(2, src).ok());
  EXPECT_EQ(writer->Finish().code(), StatusCode::kInvalidArgument);  // no state yet
  EXPECT_EQ(writer->WriteState(std::span(seq.state).first(56)).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(writer->WriteState(seq.state).ok());
  EXPECT_EQ(writer->WriteState(seq.state).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(out, seq.Encode(layout).value());  // the streamed file is the encoded one
}

// The header of `file` rewritten as format version 1 (a file saved before version 2).
std::vector<uint8_t> AsVersion1(std::vector<uint8_t> file) {
  SnapshotHeader header = DecodeSnapshotHeader(file).value();
  EXPECT_EQ(header.format_version, 2u);
  header.format_version = 1;
  const auto bytes = EncodeSnapshotHeader(header, uint32_t(header.n_sections));
  std::memcpy(file.data(), bytes.data(), bytes.size());
  return file;
}

TEST(RecurrentSlotFile, Version1FilesReadWithoutRecurrentLayersAndAreRefusedWithThem) {
  const SnapshotLayout plain = SmallLayout();
  const std::vector<int32_t> tokens = {4, 5, 6};
  const std::vector<uint8_t> stage0 = Pattern(64, 1), stage1 = Pattern(128, 2);
  const std::vector<std::span<const uint8_t>> views = {stage0, stage1};
  const std::vector<uint8_t> old = AsVersion1(EncodeSlotFile(plain, tokens, views).value());
  auto image = DecodeSlotFile(old, plain);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->tokens, tokens);
  EXPECT_TRUE(image->state.empty());

  const SnapshotLayout layout = RecurrentLayout();
  const Sequence seq(layout, 4);
  const std::vector<uint8_t> refused_file = AsVersion1(seq.Encode(layout).value());
  const Status refused = DecodeSlotFile(refused_file, layout).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidData);
  EXPECT_NE(refused.message().find("format version 1 holds no recurrent state"), std::string::npos)
      << refused.message();
}

TEST(RecurrentSlotFile, CacheBlocksStayVersion1AndNewerVersionsAreRefused) {
  EXPECT_EQ(SnapshotFormatVersion(SnapshotFileKind::kBlock), 1u);
  EXPECT_EQ(SnapshotFormatVersion(SnapshotFileKind::kSlot), 2u);
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> block = testing_util::EncodeBlock(layout, {1, 2}, kRootBlockHash);
  EXPECT_EQ(DecodeSnapshotHeader(block)->format_version, 1u);
  std::vector<uint8_t> newer = block;
  newer[8] = 2;  // the version field; the header checksum no longer matters once it is read
  const Status status = DecodeSnapshotHeader(newer).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidData);
  EXPECT_NE(status.message().find("format version 2 of a cache block"), std::string::npos)
      << status.message();
}

}  // namespace recurrent_slot_file_test
}  // namespace shardlm
