// SnapshotLayout: what must match for a saved KV page to be usable by this server — the
// model, how its layers are split into stages, the page geometry and the KV type — and the
// 128-bit layout fingerprint that names it in every snapshot file and cache folder.
//
// Goals: one fingerprint that changes whenever any of those inputs changes, so a file
// written for another model, split, page size or KV type is never used;
// one helper that describes a stage's KV page as a snapshot section, one for a stage's
// recurrent state (the disk tier's state files and slot files hold the same section), and one
// for the bounded pool's page selection.
// Non-goals: logits geometry.
//
// Thread safety: pure functions and value types. Lifetime: sections are views; the bytes
// they point to must outlive them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/snapshot_file.h"
#include "gguf/fingerprint.h"
#include "kv/page_pool.h"
#include "kv/paging.h"

namespace shardlm {

// One stage's layer range [layer_begin, layer_end) of the model.
struct StageLayers {
  int layer_begin = 0;
  int layer_end = 0;
  // Layers of the range with KV pages (a model with recurrent layers, or windowed layers kept
  // in rings, has fewer; a stage of those only has none and writes no kv_page section); -1:
  // every layer.
  int kv_layers = -1;
  // One sequence's state in the range (ForwardPass::ExportState: recurrent layers' floats, then
  // window rings' K and V rows), in 4-byte words; 0: none. Not part of the fingerprint: the
  // model, the range, the KV type and kv_layers fix it.
  uint64_t state_floats = 0;
  int n_kv_layers() const { return kv_layers < 0 ? layer_end - layer_begin : kv_layers; }
  uint64_t state_bytes() const { return state_floats * sizeof(float); }
  friend bool operator==(const StageLayers&, const StageLayers&) = default;
};

struct SnapshotLayout {
  Fingerprint128 model;
  std::vector<StageLayers> stages;  // in pipeline order
  int page_tokens = kDefaultPageTokens;
  // The rows of every KV layer. A model whose KV layers differ in shape but not in elements
  // per position (gemma4's 2 × 16 and 1 × 32 heads) has rows of 1 × those elements here and
  // its layers' own shapes in layer_shapes (in model order, fingerprinted); a model whose
  // layers differ in elements has n_kv_heads 0: no page of it can be described yet.
  int n_kv_heads = 0;
  int head_dim = 0;
  KvType kv_type = KvType::kF32;
  std::vector<KvLayerShape> layer_shapes;  // empty: every layer n_kv_heads × head_dim

  bool describable() const { return n_kv_heads > 0 && head_dim > 0; }
};

// xxh3-128 over a format tag and every field above (little-endian, stages in order).
Fingerprint128 LayoutFingerprint(const SnapshotLayout& layout);

// The section dtype of a KV type.
SnapshotDType SnapshotDTypeOf(KvType kv_type);

// The section that carries stage `stage_idx`'s part of `n_pages` pages: `pages` is their
// bytes in that stage's pool (PagePool byte layout, PagePool::page_bytes() each), back to
// back. A cache block has one page.
SnapshotSection KvPageSection(const SnapshotLayout& layout, int stage_idx,
                              std::span<const uint8_t> pages, int n_pages = 1);

// Checks that a decoded section is stage `stage_idx`'s part of `n_pages` KV pages under
// `layout`: same layer range, geometry, page count and dtype. InvalidData naming the field
// otherwise.
Status CheckKvPageSection(const SnapshotLayout& layout, int stage_idx,
                          const SnapshotSection& section, int n_pages = 1);

// Whether any stage has recurrent layers (a sequence then needs its state besides its pages).
bool HasRecurrentState(const SnapshotLayout& layout);

// The recurrent_state section of stage `stage_idx` (which has recurrent layers): `state` is one
// sequence's state in the stage's layers, its state_bytes() long; layers the stage's range;
// dims {state_floats}, f32.
SnapshotSection RecurrentStateSection(const SnapshotLayout& layout, int stage_idx,
                                      std::span<const uint8_t> state);

// Checks that a decoded section is stage `stage_idx`'s recurrent state under `layout` (kind,
// stage, layer range, dtype, size). InvalidData naming the field otherwise.
Status CheckRecurrentStateSection(const SnapshotLayout& layout, int stage_idx,
                                  const SnapshotSection& section);

// The page_selection section of `selection` (its bytes, n_pages scores then n_pages ranks,
// are written into *storage, which the section views).
SnapshotSection PageSelectionSection(const PageSelection& selection, std::vector<uint8_t>* storage);
// The selection a decoded page_selection section holds. InvalidData when a rank is not an
// integer in [0, n_pages) or a score is NaN or +inf.
Result<PageSelection> DecodePageSelectionSection(const SnapshotSection& section);

}  // namespace shardlm
