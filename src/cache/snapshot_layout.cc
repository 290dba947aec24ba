#include "cache/snapshot_layout.h"

#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include "base/check.h"
#include "cache/little_endian.h"

namespace shardlm {

Fingerprint128 LayoutFingerprint(const SnapshotLayout& layout) {
  // The tag versions the encoding below and the byte layout of a page: a change to either
  // must change the tag (v2: head-major pages, so files of v1 are foreign).
  constexpr std::string_view kTag = "shardlm-snapshot-layout-v2";
  std::vector<uint8_t> bytes(kTag.begin(), kTag.end());
  AppendLe(bytes, layout.model.hi);
  AppendLe(bytes, layout.model.lo);
  AppendLe(bytes, static_cast<uint32_t>(layout.stages.size()));
  for (const StageLayers& stage : layout.stages) {
    AppendLe(bytes, static_cast<int32_t>(stage.layer_begin));
    AppendLe(bytes, static_cast<int32_t>(stage.layer_end));
    // Only where it differs from the range, so the files of models whose every layer has KV
    // keep their fingerprint.
    if (stage.n_kv_layers() != stage.layer_end - stage.layer_begin) {
      AppendLe(bytes, static_cast<int32_t>(stage.n_kv_layers()));
    }
  }
  AppendLe(bytes, static_cast<int32_t>(layout.page_tokens));
  AppendLe(bytes, static_cast<int32_t>(layout.n_kv_heads));
  AppendLe(bytes, static_cast<int32_t>(layout.head_dim));
  AppendLe(bytes, static_cast<int32_t>(layout.kv_type));
  // Only when given, so the files of models with one KV shape keep their fingerprint.
  for (const KvLayerShape& shape : layout.layer_shapes) {
    AppendLe(bytes, static_cast<int32_t>(shape.n_kv_heads));
    AppendLe(bytes, static_cast<int32_t>(shape.head_dim));
  }
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return Fingerprint128{h.high64, h.low64};
}

SnapshotDType SnapshotDTypeOf(KvType kv_type) {
  switch (kv_type) {
    case KvType::kF32:
      return SnapshotDType::kF32;
    case KvType::kF16:
      return SnapshotDType::kF16;
    case KvType::kQ8_0:
      return SnapshotDType::kQ8_0;
    case KvType::kQ4_0:
      return SnapshotDType::kQ4_0;
    case KvType::kQ4_1:
      return SnapshotDType::kQ4_1;
    case KvType::kQ5_0:
      return SnapshotDType::kQ5_0;
    case KvType::kQ5_1:
      return SnapshotDType::kQ5_1;
    case KvType::kIq4Nl:
      return SnapshotDType::kIq4Nl;
    case KvType::kSentinel:
      break;
  }
  SHARDLM_CHECK_MSG(false, "unknown KV type %d", static_cast<int>(kv_type));
  return SnapshotDType::kSentinel;
}

SnapshotSection KvPageSection(const SnapshotLayout& layout, int stage_idx,
                              std::span<const uint8_t> pages, int n_pages) {
  SHARDLM_CHECK(stage_idx >= 0 && stage_idx < static_cast<int>(layout.stages.size()));
  SHARDLM_CHECK(n_pages >= 1);
  SnapshotSection s;
  s.kind = SectionKind::kKvPage;
  s.stage_idx = stage_idx;
  // The section counts the stage's layers with KV from its first layer (their K and V in
  // layer order, as the stage's pages hold them).
  s.layer_begin = layout.stages[stage_idx].layer_begin;
  s.layer_end = s.layer_begin + layout.stages[stage_idx].n_kv_layers();
  s.dtype = SnapshotDTypeOf(layout.kv_type);
  s.dims = {static_cast<uint32_t>(layout.page_tokens), static_cast<uint32_t>(layout.n_kv_heads),
            static_cast<uint32_t>(layout.head_dim), static_cast<uint32_t>(n_pages)};
  s.bytes = pages;
  return s;
}

Status CheckKvPageSection(const SnapshotLayout& layout, int stage_idx,
                          const SnapshotSection& section, int n_pages) {
  SHARDLM_CHECK(stage_idx >= 0 && stage_idx < static_cast<int>(layout.stages.size()));
  const SnapshotSection want = KvPageSection(layout, stage_idx, {}, n_pages);
  if (section.kind != want.kind) {
    return InvalidData("stage {}: a {} section where a kv_page was expected", stage_idx,
                       SectionKindName(section.kind));
  }
  if (section.stage_idx != stage_idx || section.layer_begin != want.layer_begin ||
      section.layer_end != want.layer_end) {
    return InvalidData("kv_page of stage {} layers [{}, {}), expected stage {} layers [{}, {})",
                       section.stage_idx, section.layer_begin, section.layer_end, stage_idx,
                       want.layer_begin, want.layer_end);
  }
  if (section.dims[3] != want.dims[3]) {
    return InvalidData("stage {}: {} kv pages, expected {}", stage_idx, section.dims[3],
                       want.dims[3]);
  }
  if (section.dtype != want.dtype || section.dims != want.dims) {
    return InvalidData("stage {}: kv_page geometry or dtype differs from this server's", stage_idx);
  }
  return Status::Ok();
}

bool HasRecurrentState(const SnapshotLayout& layout) {
  for (const StageLayers& stage : layout.stages) {
    if (stage.state_floats > 0) return true;
  }
  return false;
}

SnapshotSection RecurrentStateSection(const SnapshotLayout& layout, int stage_idx,
                                      std::span<const uint8_t> state) {
  SHARDLM_CHECK(stage_idx >= 0 && stage_idx < static_cast<int>(layout.stages.size()));
  const StageLayers& stage = layout.stages[size_t(stage_idx)];
  SHARDLM_CHECK_MSG(
      stage.state_floats > 0 && stage.state_floats <= std::numeric_limits<uint32_t>::max(),
      "stage %d: a recurrent state of %llu floats", stage_idx,
      static_cast<unsigned long long>(stage.state_floats));
  SnapshotSection s;
  s.kind = SectionKind::kRecurrentState;
  s.stage_idx = stage_idx;
  s.layer_begin = stage.layer_begin;
  s.layer_end = stage.layer_end;
  s.dtype = SnapshotDType::kF32;
  s.dims = {static_cast<uint32_t>(stage.state_floats), 1, 1, 1};
  s.bytes = state;
  return s;
}

Status CheckRecurrentStateSection(const SnapshotLayout& layout, int stage_idx,
                                  const SnapshotSection& section) {
  SHARDLM_CHECK(stage_idx >= 0 && stage_idx < static_cast<int>(layout.stages.size()));
  const SnapshotSection want = RecurrentStateSection(layout, stage_idx, {});
  if (section.kind != want.kind) {
    return InvalidData("stage {}: a {} section where a recurrent_state was expected", stage_idx,
                       SectionKindName(section.kind));
  }
  if (section.stage_idx != stage_idx || section.layer_begin != want.layer_begin ||
      section.layer_end != want.layer_end) {
    return InvalidData(
        "recurrent_state of stage {} layers [{}, {}), expected stage {} layers [{}, {})",
        section.stage_idx, section.layer_begin, section.layer_end, stage_idx, want.layer_begin,
        want.layer_end);
  }
  if (section.dtype != want.dtype || section.dims != want.dims) {
    return InvalidData("stage {}: a recurrent state of {} floats, this server's holds {}",
                       stage_idx, section.dims[0], want.dims[0]);
  }
  return Status::Ok();
}

SnapshotSection PageSelectionSection(const PageSelection& selection,
                                     std::vector<uint8_t>* storage) {
  const size_t n = size_t(selection.n_pages());
  SHARDLM_CHECK(n >= 1 && selection.recency.size() == n);
  std::vector<float> values(2 * n);
  for (size_t i = 0; i < n; ++i) {
    values[i] = selection.scores[i];
    values[n + i] = float(selection.recency[i]);
  }
  storage->resize(values.size() * sizeof(float));
  std::memcpy(storage->data(), values.data(), storage->size());
  SnapshotSection s;
  s.kind = SectionKind::kPageSelection;
  s.dtype = SnapshotDType::kF32;
  s.dims = {static_cast<uint32_t>(n), 2, 1, 1};
  s.bytes = *storage;
  return s;
}

Result<PageSelection> DecodePageSelectionSection(const SnapshotSection& section) {
  if (section.kind != SectionKind::kPageSelection || section.dtype != SnapshotDType::kF32 ||
      section.dims[1] != 2 || section.bytes.size() != size_t(section.dims[0]) * 2 * sizeof(float)) {
    return InvalidData("not a page_selection section ({}, {} bytes)", SectionKindName(section.kind),
                       section.bytes.size());
  }
  const size_t n = section.dims[0];
  std::vector<float> values(2 * n);
  std::memcpy(values.data(), section.bytes.data(), section.bytes.size());
  PageSelection selection;
  selection.scores.assign(values.begin(), values.begin() + ptrdiff_t(n));
  selection.recency.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float score = values[i];
    const float rank = values[n + i];
    if (std::isnan(score) || score == std::numeric_limits<float>::infinity()) {
      return InvalidData("page_selection: page {} has score {}", i, score);
    }
    if (!(rank >= 0.0f && rank < float(n)) || rank != std::floor(rank)) {
      return InvalidData("page_selection: page {} has rank {} (of {} pages)", i, rank, n);
    }
    selection.recency[i] = int32_t(rank);
  }
  return selection;
}

}  // namespace shardlm
