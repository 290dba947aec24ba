// WindowRings: ring size, positions mapped to ring pages, and the window state exported and
// imported at page boundaries (what a cached prefix, a disk block or a slot file carries).
#include "kv/window_ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace shardlm {
namespace {

namespace window_ring_test {

// Two layers of different shapes and windows, F32 rows (bytes are easy to check).
std::vector<WindowRingLayer> Layers() { return {{{2, 4}, 5}, {{1, 8}, 3}}; }

// Writes a value that names (layer, kv, head, position) into every element of that row.
void Fill(WindowRings& rings, int slot, int32_t begin, int32_t end) {
  PagePool& pool = rings.pool(slot);
  rings.EnsurePages(size_t(end / pool.page_tokens() + 1));
  for (int32_t p = begin; p < end; ++p) {
    const PageId page = rings.pages()[size_t(p / pool.page_tokens())];
    for (int l = 0; l < 2; ++l) {
      const KvLayerShape shape = pool.layer_shape(l);
      for (int kv = 0; kv < 2; ++kv) {
        for (int h = 0; h < shape.n_kv_heads; ++h) {
          float* row = static_cast<float*>(kv == 0 ? pool.KeyRow(page, l, h, p % 4)
                                                   : pool.ValueRow(page, l, h, p % 4));
          for (int i = 0; i < shape.head_dim; ++i)
            row[i] = float(l * 100000 + kv * 10000 + h * 1000 + p);
        }
      }
    }
  }
  rings.set_position(slot, end);
}

}  // namespace window_ring_test

using window_ring_test::Fill;
using window_ring_test::Layers;

TEST(WindowRingsTest, RingHoldsTheWindowAndABatchPastIt) {
  // Widest window 5, batches of 6, pages of 4: ceil((4 + 6) / 4) + 1 = 4 pages.
  WindowRings rings(Layers(), 4, KvType::kF32, 6);
  EXPECT_EQ(rings.ring_pages(), 4);
  EXPECT_EQ(WindowRings::RingPages(Layers(), 4, 6), 4);
  // A page of both layers: (2 heads × 4 + 1 head × 8) floats × 4 positions × K and V.
  EXPECT_EQ(WindowRings::SlotBytes(Layers(), 4, KvType::kF32, 6), 4 * (16 * 4 * 2 * 4u));
  EXPECT_EQ(WindowRings::SlotBytes({}, 4, KvType::kF32, 6), 0u);
  // A sequence of at most 2 pages never wraps a ring of 2.
  EXPECT_EQ(WindowRings::RingPages(Layers(), 4, 6, 2), 2);
  EXPECT_EQ(WindowRings::RingPages(Layers(), 4, 6, 100), 4);
  rings.EnsurePages(10);
  ASSERT_GE(rings.pages().size(), 10u);
  for (size_t j = 0; j < 10; ++j) EXPECT_EQ(rings.pages()[j], PageId(j % 4));
  // A batch smaller than a page still leaves room for a whole page past the window:
  // ceil((4 + 4) / 4) + 1 = 3 pages.
  EXPECT_EQ(WindowRings(Layers(), 4, KvType::kF32, 1).ring_pages(), 3);
}

TEST(WindowRingsTest, StateIsTheWindowBeforeTheBoundaryOfEveryLayer) {
  // (5 − 1) positions × 2 heads × 4 floats + (3 − 1) × 1 × 8, for K and V.
  EXPECT_EQ(WindowRings::StateBytes(Layers(), KvType::kF32), 2 * (4 * 2 * 4 + 2 * 8) * 4u);
  EXPECT_EQ(WindowRings::StateBytes(Layers(), KvType::kF16), 2 * (4 * 2 * 4 + 2 * 8) * 2u);
  WindowRings rings(Layers(), 4, KvType::kF32, 6);
  ASSERT_TRUE(rings.EnsureSlot(1).ok());
  Fill(rings, 1, 0, 11);
  std::vector<uint8_t> state(rings.state_bytes());
  ASSERT_TRUE(rings.Export(1, 8, state).ok());
  const float* f = reinterpret_cast<const float*>(state.data());
  // Layer 0, K, head 0: positions 4..7; head 1 follows; then V.
  EXPECT_EQ(f[0], 4.0f);
  EXPECT_EQ(f[3 * 4], 7.0f);
  EXPECT_EQ(f[4 * 4], 1004.0f);
  EXPECT_EQ(f[2 * 4 * 4], 10004.0f);
  // Layer 1 (window 3): positions 6, 7.
  EXPECT_EQ(f[4 * 4 * 4], 100006.0f);
  EXPECT_EQ(f[4 * 4 * 4 + 8], 100007.0f);
}

TEST(WindowRingsTest, StateBeforeTheWindowFillsIsZeroBeforePositionZero) {
  WindowRings rings(Layers(), 4, KvType::kF32, 6);
  ASSERT_TRUE(rings.EnsureSlot(0).ok());
  Fill(rings, 0, 0, 3);
  std::vector<uint8_t> state(rings.state_bytes(), 0xff);
  ASSERT_TRUE(rings.Export(0, 2, state).ok());
  const float* f = reinterpret_cast<const float*>(state.data());
  EXPECT_EQ(f[0], 0.0f);  // position −2
  EXPECT_EQ(f[4], 0.0f);  // position −1
  EXPECT_EQ(f[8], 0.0f);  // position 0
  EXPECT_EQ(f[12], 1.0f);
}

TEST(WindowRingsTest, ExportRefusesWhatTheRingNoLongerOrNotYetHolds) {
  WindowRings rings(Layers(), 4, KvType::kF32, 6);
  std::vector<uint8_t> state(rings.state_bytes());
  EXPECT_EQ(rings.Export(0, 4, state).code(), StatusCode::kNotFound);  // no ring yet
  ASSERT_TRUE(rings.EnsureSlot(0).ok());
  Fill(rings, 0, 0, 30);
  // 4 pages of 4 hold positions [16, 30) after position 29 (page 7 is the last written).
  EXPECT_EQ(rings.Export(0, 32, state).code(), StatusCode::kNotFound);  // not yet there
  EXPECT_EQ(rings.Export(0, 16, state).code(), StatusCode::kNotFound);  // needs 12..15
  EXPECT_TRUE(rings.Export(0, 20, state).ok());                         // needs 16..19
  EXPECT_TRUE(rings.Export(0, 24, state).ok());
  EXPECT_TRUE(rings.Export(0, 28, state).ok());
  std::vector<uint8_t> wrong(state.size() + 4);
  EXPECT_EQ(rings.Export(0, 28, wrong).code(), StatusCode::kInvalidArgument);
}

TEST(WindowRingsTest, ImportRestoresAWindowTheRingHasOverwritten) {
  WindowRings rings(Layers(), 4, KvType::kF32, 6);
  ASSERT_TRUE(rings.EnsureSlot(0).ok());
  Fill(rings, 0, 0, 14);
  std::vector<uint8_t> at12(rings.state_bytes());
  ASSERT_TRUE(rings.Export(0, 12, at12).ok());
  Fill(rings, 0, 14, 40);  // wraps: positions 8..11 are overwritten
  std::vector<uint8_t> other(rings.state_bytes());
  ASSERT_EQ(rings.Export(0, 12, other).code(), StatusCode::kNotFound);
  // Into another slot, and back into this one: both give the same bytes back.
  ASSERT_TRUE(rings.Import(3, 12, at12).ok());
  EXPECT_EQ(rings.position(3), 12);
  ASSERT_TRUE(rings.Export(3, 12, other).ok());
  EXPECT_EQ(other, at12);
  ASSERT_TRUE(rings.Import(0, 12, at12).ok());
  EXPECT_EQ(rings.position(0), 12);
  ASSERT_TRUE(rings.Export(0, 12, other).ok());
  EXPECT_EQ(other, at12);
  EXPECT_EQ(rings.Import(0, 12, std::vector<uint8_t>(7)).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardlm
