// Test helpers shared by the snapshot and disk store tests: a small two-stage layout and
// snapshots of it with deterministic contents.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/snapshot_file.h"
#include "cache/snapshot_layout.h"

namespace shardlm::testing_util {

// Two stages over three layers, two-token pages: stage 0 pages are 32 bytes, stage 1's 64.
inline SnapshotLayout SmallLayout() {
  SnapshotLayout layout;
  layout.model = Fingerprint128{0x1111, 0x2222};
  layout.stages = {{0, 1}, {1, 3}};
  layout.page_tokens = 2;
  layout.n_kv_heads = 1;
  layout.head_dim = 2;
  layout.kv_type = KvType::kF32;
  return layout;
}

inline std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 31 * i);
  return v;
}

// The page contents of each stage for a block, derived from `seed`.
struct BlockPages {
  std::vector<uint8_t> stage0;
  std::vector<uint8_t> stage1;
  std::vector<uint8_t> logits;  // 3 floats: exercises the padding
  explicit BlockPages(uint8_t seed = 0)
      : stage0(Pattern(32, seed + 1)), stage1(Pattern(64, seed + 2)), logits(Pattern(12, seed)) {}
};

inline std::vector<SnapshotSection> Sections(const SnapshotLayout& layout, const BlockPages& pages,
                                             bool with_logits) {
  std::vector<SnapshotSection> sections{KvPageSection(layout, 0, pages.stage0),
                                        KvPageSection(layout, 1, pages.stage1)};
  if (with_logits) {
    SnapshotSection logits;
    logits.kind = SectionKind::kLogits;
    logits.stage_idx = 1;
    logits.layer_begin = 3;
    logits.layer_end = 3;
    logits.dims = {3, 1, 1, 1};
    logits.bytes = pages.logits;
    sections.push_back(logits);
  }
  return sections;
}

inline std::vector<uint8_t> EncodeBlock(const SnapshotLayout& layout, const BlockHash& hash,
                                        const BlockHash& parent, uint8_t seed = 0,
                                        bool with_logits = true) {
  const BlockPages pages(seed);
  SnapshotHeader header;
  header.layout = LayoutFingerprint(layout);
  header.block_hash = hash;
  header.parent_hash = parent;
  header.n_tokens = layout.page_tokens;
  auto encoded = EncodeSnapshot(header, Sections(layout, pages, with_logits));
  return encoded.ok() ? std::move(encoded).value() : std::vector<uint8_t>{};
}

}  // namespace shardlm::testing_util
