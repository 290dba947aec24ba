// PagePool: the KV page storage of one stage, a fixed number of equally sized pages.
//
// A page holds `page_tokens` consecutive positions of K and V for every layer of the stage.
// Byte layout of one page (rows of head_dim elements of `kv_type`, KvRowBytes each):
//   for layer_idx in [0, n_layers):            (stage-local layer index)
//     K: [n_kv_heads][page_tokens][head_dim]
//     V: [n_kv_heads][page_tokens][head_dim]
// with each layer's own n_kv_heads and head_dim where the layers differ (gemma4's windowed
// and global layers: PagePoolConfig::layer_shapes).
// Head-major: attention reads one kv head over a run of positions, and those rows are one
// contiguous stretch (16 KiB for 64 F16 positions of head_dim 128) that the hardware
// prefetcher streams; position-major rows of a head sat n_kv_heads × head_dim elements
// apart and missed one by one. page_data(page) is the whole page as page_bytes()
// contiguous bytes (export and import of pages: shard protocol, disk cache).
//
// Page ids are handed out by a PageAllocator (kv/page_allocator.h) that serves every stage
// of a pipeline: each stage's pool stores the same logical page under the same id. The pool
// itself knows nothing of which pages are in use.
//
// Goals: memory bounded by configuration (n_pages, allocated once and validated against
// overflow); row access for the forward pass; whole-page copy (copy-on-write) and bytes.
// Non-goals: allocation and refcounts (PageAllocator), eviction to a slower tier (a
// bounded pool's frames are a PagePool; kv/page_residency.h moves pages), content hashing
// (cache/).
//
// Thread safety: not thread-safe; the stage's owner thread copies pages between batches.
// During a forward pass worker threads read and write page contents through
// KeyRow/ValueRow, each (page, layer, position) written by exactly one task.
// Lifetime: page memory lives as long as the pool; its contents are meaningful only for the
// pages the allocator has handed out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/huge_pages.h"
#include "base/status.h"
#include "gguf/ggml_type.h"

namespace shardlm {

using PageId = int32_t;
inline constexpr PageId kNoPage = -1;

// One sequence's pages in a stage's pool: logical page index → page id. Every stage of a
// pipeline maps the same logical pages to the same ids (one allocator, one storage each).
using PageList = std::span<const PageId>;

// Copy-on-write of a shared page: every stage copies the contents of src into dst before
// the batch that made the copy necessary runs.
struct PageCopy {
  PageId src = kNoPage;
  PageId dst = kNoPage;
  friend bool operator==(const PageCopy&, const PageCopy&) = default;
};

// Element type of the K and V cache (`--kv-type`). F32 reproduces llama.cpp's goldens
// (F32 cache); F16 halves the memory; Q8_0 (blocks of 32 int8 with an F16 scale, as
// llama.cpp's `-ctk q8_0 -ctv q8_0`) takes 34 bytes per 32 elements: 53% of F16, so
// attention reads about half the bytes and a pool holds 1.9× the positions. The 4- and 5-bit
// types of llama.cpp's -ctk/-ctv set (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: 18 to 24 bytes per 32)
// hold 2.7× to 3.6× F16's positions at a larger error. Block types need head_dim % 32 == 0.
enum class KvType {
  kF32 = 0,
  kF16 = 1,
  kQ8_0 = 2,
  kQ4_0 = 3,
  kQ4_1 = 4,
  kQ5_0 = 5,
  kQ5_1 = 6,
  kIq4Nl = 7,
  kSentinel = 8
};
const char* KvTypeName(KvType type);
// "f32" | "f16" | "q8_0" | "q4_0" | "q4_1" | "q5_0" | "q5_1" | "iq4_nl"
Result<KvType> ParseKvType(const std::string& name);
// The GGUF element type a KV cache type stores: its TypeTraits convert the rows (KvStoreRow
// writes them, dequantize_row reads them) and give their size.
GgmlType KvElementType(KvType type);
// Writes one row of n elements as `type` stores them: F32, F16 and Q8_0 as activations are
// converted for a matmul (the same bytes on every ISA); the 4- and 5-bit types with their
// reference quantizers, as llama.cpp writes its cache.
void KvStoreRow(KvType type, const float* src, void* dst, int64_t n);
// Bytes of `n` elements stored as `type` (n % 32 == 0 for Q8_0).
size_t KvRowBytes(KvType type, size_t n);
// Whether rows of head_dim elements can be stored as `type`: a valid type, and whole Q8_0
// blocks.
Status CheckKvRows(KvType type, int head_dim);

// Where windowed layers (gemma3, gemma4) keep their KV (`--window-kv`).
//  - kRing: only each sequence's window, in a ring of pages per sequence that the forward pass
//    owns (kv/window_ring.h); the page pool holds the other layers alone, so a long context
//    costs a fraction of the memory. The window is part of the sequence's state (like a
//    recurrent layer's): a cached prefix resumes only where a state was kept.
//  - kFull: every position in the page pool, as for a global layer: any cached prefix of
//    whole pages resumes, at the cost of storing what no token reads any more.
enum class WindowKv { kRing = 0, kFull = 1, kSentinel = 2 };
const char* WindowKvName(WindowKv window_kv);
Result<WindowKv> ParseWindowKv(const std::string& name);  // "ring" | "full"

// Default positions per page: large enough that the per-page bookkeeping (block table
// entries, prefix hashes) is negligible, small enough that a short sequence wastes little.
inline constexpr int kDefaultPageTokens = 64;

// The KV geometry of a pipeline, the same in every stage: the pages (ids shared by all
// stages), the positions a page holds, the element type of K and V, and the most tokens one
// batch writes (activations are sized for it). Made once from the flags
// (SchedulerOptions::ToPipelineOptions) and carried whole to every stage's pool, local or
// remote.
//
// Bounded pool (`--kv-pool`): the pages are logical and each stage stores n_frames of them
// in its pool, the others in its tier (kv/page_residency.h); key_summaries when the pages
// are selected by q·k bounds (kv/key_summaries.h).
struct KvTierSpec {
  enum class Kind { kRam = 0, kFile = 1 };
  Kind kind = Kind::kRam;
  std::string dir;  // kFile only
  friend bool operator==(const KvTierSpec&, const KvTierSpec&) = default;
};

struct KvGeometry {
  int n_pages = 0;
  int page_tokens = kDefaultPageTokens;
  KvType kv_type = KvType::kF32;
  WindowKv window_kv = WindowKv::kRing;
  int max_batch_tokens = 512;
  int n_frames = 0;  // 0: unbounded, every page resident (n_pages frames)
  KvTierSpec tier = {};
  bool key_summaries = false;
  bool bounded() const { return n_frames > 0; }
  int frames() const { return bounded() ? n_frames : n_pages; }
};

// The KV row shape of one layer: kv heads of head_dim elements each (keys and values alike).
struct KvLayerShape {
  int n_kv_heads = 0;
  int head_dim = 0;
  friend bool operator==(const KvLayerShape&, const KvLayerShape&) = default;
};

struct PagePoolConfig {
  int n_pages = 0;
  int page_tokens = kDefaultPageTokens;
  // The stage's layers with KV of their own in this pool (0: a stage of recurrent layers, or of
  // windowed layers whose KV is in rings).
  int n_layers = 0;
  // Every layer's shape, unless layer_shapes gives one per layer ([n_layers]; then these two
  // are the widest, which bound the attention scratch).
  int n_kv_heads = 0;
  int head_dim = 0;
  KvType kv_type = KvType::kF32;
  std::vector<KvLayerShape> layer_shapes;
  // kRing: the stage's windowed layers are not in this pool (the forward pass rings them).
  WindowKv window_kv = WindowKv::kRing;

  KvLayerShape layer_shape(int layer_idx) const {
    return layer_shapes.empty() ? KvLayerShape{n_kv_heads, head_dim}
                                : layer_shapes[size_t(layer_idx)];
  }
  // Whether the layers differ in shape (disk snapshots describe only uniform pages so far).
  bool uniform() const;
};

// Bytes of one page of `config` (K and V of every layer, page_tokens positions).
size_t KvPageBytes(const PagePoolConfig& config);

class PagePool {
 public:
  // Validates the config (positive sizes, no overflow) and allocates all pages up front.
  static Result<std::unique_ptr<PagePool>> Create(const PagePoolConfig& config);
  // The same pool over memory the caller provides, at least n_pages × page_bytes long: a
  // shared-memory region another process maps too, so that a page one process writes is the
  // page the other reads, with nothing copied. `owner` keeps that memory alive (the pool
  // holds it). Errors: Create's, and InvalidArgument when the memory is too short.
  static Result<std::unique_ptr<PagePool>> CreateOn(const PagePoolConfig& config,
                                                    std::span<uint8_t> memory,
                                                    std::shared_ptr<void> owner);
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  const PagePoolConfig& config() const { return config_; }
  int page_tokens() const { return config_.page_tokens; }
  int n_pages() const { return config_.n_pages; }
  size_t page_bytes() const { return page_bytes_; }
  KvLayerShape layer_shape(int layer_idx) const { return layers_[size_t(layer_idx)].shape; }

  // Copies the contents of `src` into `dst` (copy-on-write of a shared page).
  void CopyPage(PageId src, PageId dst);

  // The whole page: page_bytes() bytes in the layout above.
  uint8_t* page_data(PageId page);
  const uint8_t* page_data(PageId page) const;

  // K or V of one kv head at (layer_idx, position offset inside the page): head_dim
  // elements of kv_type; the next offset's row of the same head follows directly
  // (head_dim elements later). layer_idx is stage-local.
  void* KeyRow(PageId page, int layer_idx, int kv_head, int offset) {
    return RowPtr(page, layer_idx, 0, kv_head, offset);
  }
  void* ValueRow(PageId page, int layer_idx, int kv_head, int offset) {
    return RowPtr(page, layer_idx, 1, kv_head, offset);
  }
  const void* KeyRow(PageId page, int layer_idx, int kv_head, int offset) const {
    return const_cast<PagePool*>(this)->RowPtr(page, layer_idx, 0, kv_head, offset);
  }
  const void* ValueRow(PageId page, int layer_idx, int kv_head, int offset) const {
    return const_cast<PagePool*>(this)->RowPtr(page, layer_idx, 1, kv_head, offset);
  }
  // Where K (kv 0) or V (kv 1) of (layer_idx, kv_head, offset) starts inside a page's
  // bytes: a page held elsewhere (the tier, a file) has the same layout.
  size_t RowOffset(int layer_idx, int kv, int kv_head, int offset) const;

 private:
  explicit PagePool(const PagePoolConfig& config);
  // A pool of `config`'s layout (validated), without memory yet.
  static Result<std::unique_ptr<PagePool>> Layout(const PagePoolConfig& config);
  void* RowPtr(PageId page, int layer_idx, int kv, int kv_head, int offset);

  // Where each layer's rows start inside a page, its shape and the bytes of one head's row.
  struct LayerRows {
    size_t offset = 0;
    KvLayerShape shape;
    size_t head_row_bytes = 0;
  };
  PagePoolConfig config_;
  std::vector<LayerRows> layers_;  // [n_layers]
  size_t page_bytes_ = 0;
  HugePageBuffer storage_;       // Create's memory, on huge pages where the kernel allows
  std::shared_ptr<void> owner_;  // CreateOn's memory
  uint8_t* base_ = nullptr;      // [n_pages][page_bytes]: either of them
};

}  // namespace shardlm
