// Slot files (slot_file.h): a round trip keeps tokens and every stage's pages; every
// truncation, every flipped byte, trailing bytes, a missing or extra section, a cache block
// file and a file saved under another model, split, page size or KV type are InvalidData
// errors; the size formula is exact; a bounded pool's page selection travels with the
// sequence and a bad one is refused.
#include "cache/slot_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cache/snapshot_test_util.h"

namespace shardlm {
namespace {

using testing_util::EncodeBlock;
using testing_util::Pattern;
using testing_util::SmallLayout;

// A sequence of n tokens over SmallLayout (2-token pages; stage pages of 32 and 64 bytes).
struct Sequence {
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint8_t>> pages;  // [stage]
  explicit Sequence(int n, uint8_t seed = 3) {
    for (int i = 0; i < n; ++i) tokens.push_back(1000 * i + seed);
    const int n_pages = (n + 1) / 2;
    pages = {Pattern(32 * size_t(n_pages), seed), Pattern(64 * size_t(n_pages), seed + 1)};
  }
  std::vector<std::span<const uint8_t>> Views() const { return {pages[0], pages[1]}; }
};

std::vector<uint8_t> Encode(const SnapshotLayout& layout, const Sequence& seq) {
  const auto views = seq.Views();
  auto file = EncodeSlotFile(layout, seq.tokens, views);
  EXPECT_TRUE(file.ok()) << file.status().message();
  return file.ok() ? std::move(file).value() : std::vector<uint8_t>{};
}

bool Same(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

TEST(SlotFile, RoundTripKeepsTokensAndEveryStagesPages) {
  const SnapshotLayout layout = SmallLayout();
  for (int n : {1, 2, 5, 8}) {
    SCOPED_TRACE(n);
    const Sequence seq(n);
    const std::vector<uint8_t> file = Encode(layout, seq);
    EXPECT_EQ(file.size(), SlotFileBytes(layout, n));
    auto image = DecodeSlotFile(file, layout);
    ASSERT_TRUE(image.ok()) << image.status().message();
    EXPECT_EQ(image->tokens, seq.tokens);
    EXPECT_EQ(image->n_pages, SlotPages(layout, n));
    ASSERT_EQ(image->stage_pages.size(), 2u);
    EXPECT_TRUE(Same(image->stage_pages[0], seq.pages[0]));
    EXPECT_TRUE(Same(image->stage_pages[1], seq.pages[1]));
  }
}

TEST(SlotFile, APageSelectionTravelsWithTheSequence) {
  const SnapshotLayout layout = SmallLayout();
  const Sequence seq(7);  // 4 pages
  PageSelection selection;
  selection.scores = {-1.5f, -std::numeric_limits<float>::infinity(), 0.0f, -3.0f};
  selection.recency = {2, 0, 3, 1};
  const auto views = seq.Views();
  auto file = EncodeSlotFile(layout, seq.tokens, views, &selection);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->size(), SlotFileBytes(layout, 7, true));
  auto image = DecodeSlotFile(*file, layout);
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_TRUE(image->selection.has_value());
  EXPECT_EQ(*image->selection, selection);
  EXPECT_EQ(image->tokens, seq.tokens);
  EXPECT_TRUE(Same(image->stage_pages[1], seq.pages[1]));
  EXPECT_FALSE(DecodeSlotFile(Encode(layout, seq), layout)->selection.has_value());
  // Every flipped byte of the selection's part is detected.
  const size_t first = SlotFileGeometryOf(layout, 7, true)->descriptor_offset[1];
  for (size_t i = first; i < first + kSectionDescriptorBytes + 32; ++i) {
    std::vector<uint8_t> bad = *file;
    bad[i] ^= 0x10;
    EXPECT_EQ(DecodeSlotFile(bad, layout).status().code(), StatusCode::kInvalidData) << i;
  }
  // A selection that does not cover the sequence, or with a rank out of range, is refused.
  PageSelection short_one = selection;
  short_one.Truncate(3);
  EXPECT_EQ(EncodeSlotFile(layout, seq.tokens, views, &short_one).status().code(),
            StatusCode::kInvalidArgument);
  PageSelection bad_rank = selection;
  bad_rank.recency[2] = 4;
  auto bad_file = EncodeSlotFile(layout, seq.tokens, views, &bad_rank);
  ASSERT_TRUE(bad_file.ok());
  auto refused = DecodeSlotFile(*bad_file, layout);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidData);
  EXPECT_NE(refused.status().message().find("rank 4"), std::string::npos)
      << refused.status().message();
}

TEST(SlotFile, EveryTruncationAndTrailingBytesAreErrors) {
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> file = Encode(layout, Sequence(5));
  for (size_t n = 0; n < file.size(); ++n) {
    auto image = DecodeSlotFile(std::span(file).first(n), layout);
    ASSERT_FALSE(image.ok()) << "truncated to " << n;
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidData);
  }
  std::vector<uint8_t> longer = file;
  longer.resize(file.size() + 8, 0);
  auto image = DecodeSlotFile(longer, layout);
  ASSERT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("trailing"), std::string::npos);
}

TEST(SlotFile, EveryFlippedByteIsDetected) {
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> file = Encode(layout, Sequence(3));
  for (size_t i = 0; i < file.size(); ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}}) {
      std::vector<uint8_t> bad = file;
      bad[i] ^= mask;
      auto image = DecodeSlotFile(bad, layout);
      ASSERT_FALSE(image.ok()) << "byte " << i << " mask " << int(mask) << " went unnoticed";
      EXPECT_EQ(image.status().code(), StatusCode::kInvalidData);
    }
  }
}

TEST(SlotFile, AFileOfAnotherLayoutIsRefused) {
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> file = Encode(layout, Sequence(4));
  std::vector<SnapshotLayout> others(4, layout);
  others[0].model.lo ^= 1;              // another model
  others[1].stages = {{0, 2}, {2, 3}};  // another split
  others[2].kv_type = KvType::kF16;     // another KV type
  others[3].page_tokens = 4;            // another page size
  for (size_t i = 0; i < others.size(); ++i) {
    auto image = DecodeSlotFile(file, others[i]);
    ASSERT_FALSE(image.ok()) << i;
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidData);
    EXPECT_NE(image.status().message().find("layout fingerprint"), std::string::npos)
        << image.status().message();
  }
}

TEST(SlotFile, CacheBlocksAndSlotFilesAreNeverReadAsEachOther) {
  const SnapshotLayout layout = SmallLayout();
  const BlockHash hash{1, 2};
  auto as_slot = DecodeSlotFile(EncodeBlock(layout, hash, kRootBlockHash), layout);
  ASSERT_FALSE(as_slot.ok());
  EXPECT_NE(as_slot.status().message().find("a cache block, not a slot file"), std::string::npos)
      << as_slot.status().message();
  auto as_block = DecodeSnapshot(Encode(layout, Sequence(2)), LayoutFingerprint(layout), hash);
  ASSERT_FALSE(as_block.ok());
  EXPECT_NE(as_block.status().message().find("a slot file, not a cache block"), std::string::npos)
      << as_block.status().message();
}

// A valid container whose sections are not what a slot file holds.
TEST(SlotFile, MissingExtraOrMisplacedSectionsAreErrors) {
  const SnapshotLayout layout = SmallLayout();
  const Sequence seq(4);
  const std::vector<uint8_t> token_bytes(16, 0);
  SnapshotSection tokens;
  tokens.kind = SectionKind::kTokens;
  tokens.dtype = SnapshotDType::kI32;
  tokens.dims = {4, 1, 1, 1};
  tokens.bytes = token_bytes;
  const SnapshotSection stage0 = KvPageSection(layout, 0, seq.pages[0], 2);
  const SnapshotSection stage1 = KvPageSection(layout, 1, seq.pages[1], 2);
  const SnapshotSection one_page = KvPageSection(layout, 1, std::span(seq.pages[1]).first(64));
  const std::vector<std::vector<SnapshotSection>> bad = {
      {tokens, stage0},                  // a stage missing
      {tokens, stage0, stage1, stage1},  // one too many
      {stage0, tokens, stage1},          // tokens not first
      {tokens, stage1, stage0},          // stages out of order
      {tokens, stage0, one_page},        // a page missing
  };
  SnapshotHeader header;
  header.kind = SnapshotFileKind::kSlot;
  header.layout = LayoutFingerprint(layout);
  header.n_tokens = 4;
  for (size_t i = 0; i < bad.size(); ++i) {
    auto file = EncodeSnapshot(header, bad[i]);
    ASSERT_TRUE(file.ok()) << file.status().message();
    auto image = DecodeSlotFile(*file, layout);
    ASSERT_FALSE(image.ok()) << "case " << i;
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidData);
  }
  header.n_tokens = 3;  // the tokens section holds 4
  auto file = EncodeSnapshot(header, std::vector<SnapshotSection>{tokens, stage0, stage1});
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE(DecodeSlotFile(*file, layout).ok());
}

// Streaming: the writer and reader touch the file only in the pieces asked for (a header,
// descriptors, the tokens, then n pages of one stage at a time), so a restore or save
// holds a chunk, never the sequence; the streamed file is EncodeSlotFile's, byte for byte.
TEST(SlotFile, StreamsInPiecesOfTheSizeAskedFor) {
  const SnapshotLayout layout = SmallLayout();
  const Sequence seq(41);  // 21 pages
  const std::vector<uint8_t> whole = Encode(layout, seq);
  const size_t largest_stage_page = 64;
  for (int chunk : {1, 3, 21}) {
    SCOPED_TRACE(chunk);
    std::vector<uint8_t> streamed(whole.size(), 0xee);
    size_t largest_write = 0;
    auto write_at = [&](uint64_t offset, std::span<const uint8_t> bytes) {
      largest_write = std::max(largest_write, bytes.size());
      if (offset + bytes.size() > streamed.size()) return InvalidArgument("past the end");
      std::memcpy(streamed.data() + offset, bytes.data(), bytes.size());
      return Status::Ok();
    };
    auto writer = SlotFileWriter::Start(layout, seq.tokens, write_at);
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    for (int first = 0; first < writer->geometry().n_pages; first += chunk) {
      const int n = std::min(chunk, writer->geometry().n_pages - first);
      const std::vector<const uint8_t*> src = {seq.pages[0].data() + 32 * first,
                                               seq.pages[1].data() + 64 * first};
      ASSERT_TRUE(writer->WritePages(n, src).ok());
    }
    ASSERT_TRUE(writer->Finish().ok());
    EXPECT_TRUE(streamed == whole);
    EXPECT_LE(largest_write,
              std::max<size_t>(largest_stage_page * chunk, 4 * seq.tokens.size() + 8));

    size_t largest_read = 0;
    auto read_at = [&](uint64_t offset, std::span<uint8_t> dst) {
      largest_read = std::max(largest_read, dst.size());
      std::memcpy(dst.data(), whole.data() + offset, dst.size());
      return Status::Ok();
    };
    auto reader = SlotFileReader::Open(layout, whole.size(), read_at, 41);
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    EXPECT_EQ(reader->tokens(), seq.tokens);
    std::vector<uint8_t> stage0(32 * size_t(chunk)), stage1(64 * size_t(chunk));
    std::vector<uint8_t*> dst = {stage0.data(), stage1.data()};
    for (int first = 0; first < reader->n_pages(); first += chunk) {
      const int n = std::min(chunk, reader->n_pages() - first);
      ASSERT_TRUE(reader->ReadPages(n, dst).ok());
      EXPECT_TRUE(Same(std::span(stage1).first(64 * size_t(n)),
                       std::span(seq.pages[1]).subspan(64 * size_t(first), 64 * size_t(n))));
    }
    EXPECT_EQ(reader->ReadPages(1, dst).code(), StatusCode::kInvalidArgument);  // past the end
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_LE(largest_read,
              std::max<size_t>(largest_stage_page * chunk, 4 * seq.tokens.size() + 8));
  }
}

// A flipped page byte passes ReadPages (the pages are not to be used yet) and fails Finish;
// a sequence longer than the slots is refused before anything is read past the header.
TEST(SlotFile, PagesAreTrustedOnlyAfterFinishAndLongSequencesAreRefusedFirst) {
  const SnapshotLayout layout = SmallLayout();
  const Sequence seq(6);
  std::vector<uint8_t> file = Encode(layout, seq);
  file[file.size() - 10] ^= 0x04;  // stage 1's last page
  uint64_t bytes_read = 0;
  auto read_at = [&](uint64_t offset, std::span<uint8_t> dst) {
    bytes_read += dst.size();
    std::memcpy(dst.data(), file.data() + offset, dst.size());
    return Status::Ok();
  };
  auto reader = SlotFileReader::Open(layout, file.size(), read_at, 6);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  std::vector<uint8_t> stage0(32 * 3), stage1(64 * 3);
  std::vector<uint8_t*> dst = {stage0.data(), stage1.data()};
  EXPECT_EQ(reader->Finish().code(), StatusCode::kInvalidArgument);  // pages not read yet
  ASSERT_TRUE(reader->ReadPages(3, dst).ok());
  const Status finished = reader->Finish();
  EXPECT_EQ(finished.code(), StatusCode::kInvalidData);
  EXPECT_NE(finished.message().find("stage 1): payload checksum mismatch"), std::string::npos)
      << finished.message();
  bytes_read = 0;
  auto too_long = SlotFileReader::Open(layout, file.size(), read_at, 5);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidData);
  EXPECT_NE(too_long.status().message().find("at most 5"), std::string::npos)
      << too_long.status().message();
  EXPECT_EQ(bytes_read, kSnapshotHeaderBytes);
}

TEST(SlotFile, EncodeRejectsEmptySequencesAndMismatchedPages) {
  const SnapshotLayout layout = SmallLayout();
  const Sequence seq(4);
  const auto views = seq.Views();
  EXPECT_EQ(EncodeSlotFile(layout, {}, views).status().code(), StatusCode::kInvalidArgument);
  const std::vector<std::span<const uint8_t>> one_stage = {seq.pages[0]};
  EXPECT_EQ(EncodeSlotFile(layout, seq.tokens, one_stage).status().code(),
            StatusCode::kInvalidArgument);
  const std::vector<int32_t> more_tokens(6, 1);  // needs 3 pages, given 2
  EXPECT_EQ(EncodeSlotFile(layout, more_tokens, views).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardlm
