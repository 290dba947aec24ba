#include "cache/snapshot_file.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <string>
#include <vector>

#include "cache/snapshot_layout.h"
#include "cache/snapshot_test_util.h"
#include "kv/page_pool.h"

namespace shardlm {
namespace {

using testing_util::BlockPages;
using testing_util::EncodeBlock;
using testing_util::Sections;
using testing_util::SmallLayout;

const BlockHash kHash{0xaaaa, 0xbbbb};
const BlockHash kParent{0xcccc, 0xdddd};

bool SameBytes(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

TEST(SnapshotFile, RoundTrip) {
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> file = EncodeBlock(layout, kHash, kParent, 5);
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(file.size() % 8, 0u);
  auto snap = DecodeSnapshot(file, LayoutFingerprint(layout), kHash);
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  EXPECT_EQ(snap->header.layout, LayoutFingerprint(layout));
  EXPECT_EQ(snap->header.block_hash, kHash);
  EXPECT_EQ(snap->header.parent_hash, kParent);
  EXPECT_EQ(snap->header.n_tokens, 2);
  ASSERT_EQ(snap->sections.size(), 3u);
  const BlockPages pages(5);
  const auto want = Sections(layout, pages, true);
  for (size_t i = 0; i < want.size(); ++i) {
    const SnapshotSection& got = snap->sections[i];
    EXPECT_EQ(got.kind, want[i].kind) << i;
    EXPECT_EQ(got.stage_idx, want[i].stage_idx) << i;
    EXPECT_EQ(got.layer_begin, want[i].layer_begin) << i;
    EXPECT_EQ(got.layer_end, want[i].layer_end) << i;
    EXPECT_EQ(got.dtype, want[i].dtype) << i;
    EXPECT_EQ(got.dims, want[i].dims) << i;
    EXPECT_TRUE(SameBytes(got.bytes, want[i].bytes)) << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.bytes.data()) % 8, 0u) << "payload aligned";
  }
  EXPECT_TRUE(CheckKvPageSection(layout, 0, snap->sections[0]).ok());
  EXPECT_TRUE(CheckKvPageSection(layout, 1, snap->sections[1]).ok());
  EXPECT_FALSE(CheckKvPageSection(layout, 1, snap->sections[0]).ok());
  EXPECT_FALSE(CheckKvPageSection(layout, 0, snap->sections[2]).ok());
}

TEST(SnapshotFile, EveryFlippedByteIsDetected) {
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> file = EncodeBlock(layout, kHash, kParent);
  auto clean = DecodeSnapshot(file, LayoutFingerprint(layout), kHash);
  ASSERT_TRUE(clean.ok());
  auto in_payload = [&](size_t offset) {
    for (const SnapshotSection& s : clean->sections) {
      const size_t begin = static_cast<size_t>(s.bytes.data() - file.data());
      if (offset >= begin && offset < begin + s.bytes.size()) return true;
    }
    return false;
  };
  for (size_t i = 0; i < file.size(); ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = file;
      bad[i] ^= mask;
      auto snap = DecodeSnapshot(bad, LayoutFingerprint(layout), kHash);
      ASSERT_FALSE(snap.ok()) << "byte " << i << " mask " << int(mask) << " went unnoticed";
      EXPECT_EQ(snap.status().code(), StatusCode::kInvalidData);
      if (in_payload(i)) {
        EXPECT_NE(snap.status().message().find("payload checksum"), std::string::npos)
            << "byte " << i << ": " << snap.status().message();
      }
    }
  }
}

TEST(SnapshotFile, EveryTruncationAndTrailingBytesAreErrors) {
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> file = EncodeBlock(layout, kHash, kParent);
  for (size_t n = 0; n < file.size(); ++n) {
    auto snap = DecodeSnapshot(std::span(file).first(n), LayoutFingerprint(layout), kHash);
    ASSERT_FALSE(snap.ok()) << "truncated to " << n;
    EXPECT_EQ(snap.status().code(), StatusCode::kInvalidData);
  }
  std::vector<uint8_t> longer = file;
  longer.resize(file.size() + 8, 0);
  auto snap = DecodeSnapshot(longer, LayoutFingerprint(layout), kHash);
  ASSERT_FALSE(snap.ok());
  EXPECT_NE(snap.status().message().find("trailing"), std::string::npos);
}

TEST(SnapshotFile, ForeignLayoutAndWrongHashAreRejected) {
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> file = EncodeBlock(layout, kHash, kParent);
  SnapshotLayout other = layout;
  other.model.lo ^= 1;
  auto foreign = DecodeSnapshot(file, LayoutFingerprint(other), kHash);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("layout fingerprint"), std::string::npos);
  auto wrong = DecodeSnapshot(file, LayoutFingerprint(layout), kParent);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("block hash"), std::string::npos);
}

// Rewrites a header field and its checksum, as a hostile writer would.
void PatchHeaderU32(std::vector<uint8_t>& file, size_t offset, uint32_t v) {
  std::memcpy(file.data() + offset, &v, 4);  // tests run on little-endian hosts
  const uint64_t sum = XXH3_64bits(file.data(), kSnapshotHeaderBytes - 8);
  std::memcpy(file.data() + kSnapshotHeaderBytes - 8, &sum, 8);
}

void PatchDescriptor0U64(std::vector<uint8_t>& file, size_t field, uint64_t v) {
  uint8_t* d = file.data() + kSnapshotHeaderBytes;
  std::memcpy(d + field, &v, 8);
  const uint64_t sum = XXH3_64bits(d, kSectionDescriptorBytes - 8);
  std::memcpy(d + kSectionDescriptorBytes - 8, &sum, 8);
}

TEST(SnapshotFile, HostileCountsAndLengthsWithValidChecksums) {
  const SnapshotLayout layout = SmallLayout();
  const Fingerprint128 fp = LayoutFingerprint(layout);
  const std::vector<uint8_t> file = EncodeBlock(layout, kHash, kParent);
  std::vector<uint8_t> many = file;
  PatchHeaderU32(many, 68, 0xffffffffu);  // n_sections
  EXPECT_FALSE(DecodeSnapshot(many, fp, kHash).ok());
  std::vector<uint8_t> more = file;
  PatchHeaderU32(more, 68, 4);  // one more section than the file holds
  auto truncated = DecodeSnapshot(more, fp, kHash);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  std::vector<uint8_t> zero_tokens = file;
  PatchHeaderU32(zero_tokens, 64, 0);
  EXPECT_FALSE(DecodeSnapshot(zero_tokens, fp, kHash).ok());
  for (uint64_t length : {uint64_t{0}, uint64_t{33}, ~uint64_t{0}, ~uint64_t{0} - 3}) {
    std::vector<uint8_t> bad = file;
    PatchDescriptor0U64(bad, 40, length);  // byte_length disagrees with the geometry
    auto snap = DecodeSnapshot(bad, fp, kHash);
    EXPECT_FALSE(snap.ok()) << length;
  }
}

TEST(SnapshotFile, EncodeRejectsBytesThatDoNotMatchTheGeometry) {
  const SnapshotLayout layout = SmallLayout();
  const std::vector<uint8_t> short_page(31);
  SnapshotHeader header;
  header.layout = LayoutFingerprint(layout);
  header.n_tokens = 2;
  const SnapshotSection section = KvPageSection(layout, 0, short_page);
  auto encoded = EncodeSnapshot(header, std::span(&section, 1));
  ASSERT_FALSE(encoded.ok());
  EXPECT_EQ(encoded.status().code(), StatusCode::kInvalidArgument);
  header.n_tokens = 0;
  EXPECT_FALSE(EncodeSnapshot(header, {}).ok());
}

// A q8_0 kv_page counts 34 bytes per 32 elements and needs whole blocks per row; q8_0 is
// not a dtype for logits.
TEST(SnapshotFile, Q8_0SectionsAreWholeBlocks) {
  SnapshotSection s;
  s.kind = SectionKind::kKvPage;
  s.layer_begin = 0;
  s.layer_end = 3;
  s.dtype = SnapshotDType::kQ8_0;
  s.dims = {2, 1, 64, 1};
  auto bytes = SectionPayloadBytes(s);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(*bytes, 2u * 3 * 2 * 64 / 32 * 34);
  s.dims = {2, 1, 48, 1};
  EXPECT_EQ(SectionPayloadBytes(s).status().code(), StatusCode::kInvalidData);
  s.kind = SectionKind::kLogits;
  s.dims = {64, 1, 1, 1};
  EXPECT_EQ(SectionPayloadBytes(s).status().code(), StatusCode::kInvalidData);
  // The 4- and 5-bit types likewise, with their block sizes.
  const std::pair<SnapshotDType, uint64_t> kBlocks[] = {{SnapshotDType::kQ4_0, 18},
                                                        {SnapshotDType::kQ4_1, 20},
                                                        {SnapshotDType::kQ5_0, 22},
                                                        {SnapshotDType::kQ5_1, 24},
                                                        {SnapshotDType::kIq4Nl, 18}};
  for (const auto& [dtype, block] : kBlocks) {
    s.kind = SectionKind::kKvPage;
    s.dtype = dtype;
    s.dims = {2, 1, 64, 1};
    auto block_bytes = SectionPayloadBytes(s);
    ASSERT_TRUE(block_bytes.ok()) << block_bytes.status().message();
    EXPECT_EQ(*block_bytes, 2u * 3 * 2 * 64 / 32 * block);
    s.dims = {2, 1, 48, 1};
    EXPECT_EQ(SectionPayloadBytes(s).status().code(), StatusCode::kInvalidData);
    s.kind = SectionKind::kRecurrentState;
    s.dims = {64, 1, 1, 1};
    EXPECT_EQ(SectionPayloadBytes(s).status().code(), StatusCode::kInvalidData);
  }
}

TEST(SnapshotLayout, AKvPageSectionIsExactlyAPoolPage) {
  for (KvType kv_type : {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0, KvType::kQ4_1,
                         KvType::kQ5_0, KvType::kQ5_1, KvType::kIq4Nl}) {
    SnapshotLayout layout = SmallLayout();
    layout.kv_type = kv_type;
    if (kv_type != KvType::kF32 && kv_type != KvType::kF16) layout.head_dim = 64;  // blocks of 32
    layout.n_kv_heads = 3;
    for (int stage_idx = 0; stage_idx < 2; ++stage_idx) {
      PagePoolConfig config;
      config.n_pages = 2;
      config.page_tokens = layout.page_tokens;
      config.n_layers = layout.stages[stage_idx].layer_end - layout.stages[stage_idx].layer_begin;
      config.n_kv_heads = layout.n_kv_heads;
      config.head_dim = layout.head_dim;
      config.kv_type = kv_type;
      auto pool = PagePool::Create(config);
      ASSERT_TRUE(pool.ok());
      uint8_t* page = (*pool)->page_data(1);
      for (size_t i = 0; i < (*pool)->page_bytes(); ++i) page[i] = static_cast<uint8_t>(i * 7);
      const SnapshotSection section =
          KvPageSection(layout, stage_idx, std::span(page, (*pool)->page_bytes()));
      auto want = SectionPayloadBytes(section);
      ASSERT_TRUE(want.ok());
      EXPECT_EQ(*want, (*pool)->page_bytes()) << KvTypeName(kv_type) << " stage " << stage_idx;
      SnapshotHeader header;
      header.layout = LayoutFingerprint(layout);
      header.block_hash = kHash;
      header.n_tokens = layout.page_tokens;
      auto file = EncodeSnapshot(header, std::span(&section, 1));
      ASSERT_TRUE(file.ok()) << file.status().message();
      auto snap = DecodeSnapshot(*file, header.layout, kHash);
      ASSERT_TRUE(snap.ok());
      EXPECT_TRUE(CheckKvPageSection(layout, stage_idx, snap->sections[0]).ok());
      EXPECT_TRUE(SameBytes(snap->sections[0].bytes, section.bytes));
    }
  }
}

TEST(SnapshotLayout, FingerprintChangesWithEveryInput) {
  const SnapshotLayout base = SmallLayout();
  const Fingerprint128 fp = LayoutFingerprint(base);
  EXPECT_EQ(LayoutFingerprint(SmallLayout()), fp);
  std::vector<SnapshotLayout> variants(7, base);
  variants[0].model.hi ^= 1;
  variants[1].stages = {{0, 2}, {2, 3}};
  variants[2].stages = {{0, 3}};
  variants[3].page_tokens = 4;
  variants[4].n_kv_heads = 2;
  variants[5].head_dim = 4;
  variants[6].kv_type = KvType::kF16;
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(LayoutFingerprint(variants[i]), fp) << "variant " << i;
  }
}

}  // namespace
}  // namespace shardlm
