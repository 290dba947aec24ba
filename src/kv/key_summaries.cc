// KeySummaries: channel boxes of stored keys and the q·k bound they give (see key_summaries.h).
#include "kv/key_summaries.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

// Σ_c max(q_c·lo_c, q_c·hi_c) in kLanes float lanes (lane l sums channels l, l + kLanes, ...
// of the whole groups), then the leftover channels, then the lanes in order. Compiled for
// AVX2 and for the baseline, picked when the program loads: a product, a maximum and a sum
// per term (nothing to fuse), in the same order in both, so the bound is the same bitwise
// on every machine. Scoring a 128K context bounds 8192 pages per head and layer: in one
// scalar sum this was a tenth of decode time.
constexpr int kLanes = 8;
__attribute__((target_clones("avx2", "default"))) float BoxBound(const float* __restrict q,
                                                                 const float* __restrict lo,
                                                                 const float* __restrict hi,
                                                                 int n) {
  float lanes[kLanes] = {};
  int c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      lanes[l] += std::max(q[c + l] * lo[c + l], q[c + l] * hi[c + l]);
    }
  }
  float bound = 0.0f;
  for (; c < n; ++c) bound += std::max(q[c] * lo[c], q[c] * hi[c]);
  for (float lane : lanes) bound += lane;
  return bound;
}

}  // namespace

Status KeySummaries::CheckShape(const PagePoolConfig& frames, int n_pages) {
  if (n_pages <= 0 || frames.n_layers < 0 || frames.n_kv_heads <= 0 || frames.head_dim <= 0 ||
      frames.head_dim > 512 || frames.page_tokens > std::numeric_limits<uint16_t>::max()) {
    return InvalidArgument("key summaries: bad shape ({} pages, {} layers, {} heads, dim {})",
                           n_pages, frames.n_layers, frames.n_kv_heads, frames.head_dim);
  }
  return Status::Ok();
}

Result<std::unique_ptr<KeySummaries>> KeySummaries::Create(const PagePoolConfig& frames,
                                                           int n_pages) {
  SHARDLM_TRY(CheckShape(frames, n_pages));
  std::unique_ptr<KeySummaries> summaries(new KeySummaries(frames, n_pages));
  const size_t boxes = summaries->n_boxes();
  summaries->own_counts_.assign(boxes, 0);
  summaries->counts_ = summaries->own_counts_.data();
  if (boxes == 0) return summaries;  // a stage without KV layers: nothing to summarize
  summaries->own_boxes_ = AllocateHugePages(boxes * 2 * frames.head_dim * sizeof(float));
  if (!summaries->own_boxes_) {
    return ResourceExhausted("key summaries of {} pages ({} bytes): out of memory", n_pages,
                             boxes * 2 * frames.head_dim * sizeof(float));
  }
  summaries->boxes_ = reinterpret_cast<float*>(summaries->own_boxes_.get());
  return summaries;
}

// The boxes first (floats, kept at the memory's alignment), then the counts.
size_t KeySummaries::Bytes(const PagePoolConfig& frames, int n_pages) {
  const size_t boxes = size_t(std::max(n_pages, 0)) * size_t(std::max(frames.n_layers, 0)) *
                       size_t(std::max(frames.n_kv_heads, 0));
  return boxes * (2 * size_t(std::max(frames.head_dim, 0)) * sizeof(float) + sizeof(uint16_t));
}

Result<std::unique_ptr<KeySummaries>> KeySummaries::CreateOn(const PagePoolConfig& frames,
                                                             int n_pages,
                                                             std::span<uint8_t> memory) {
  SHARDLM_TRY(CheckShape(frames, n_pages));
  const size_t bytes = Bytes(frames, n_pages);
  if (memory.size() < bytes || reinterpret_cast<uintptr_t>(memory.data()) % alignof(float) != 0) {
    return InvalidArgument("key summaries of {} pages need {} aligned bytes, given {}", n_pages,
                           bytes, memory.size());
  }
  std::unique_ptr<KeySummaries> summaries(new KeySummaries(frames, n_pages));
  const size_t boxes = summaries->n_boxes();
  summaries->boxes_ = reinterpret_cast<float*>(memory.data());
  summaries->counts_ = reinterpret_cast<uint16_t*>(
      memory.data() + boxes * 2 * size_t(frames.head_dim) * sizeof(float));
  return summaries;
}

KeySummaries::KeySummaries(const PagePoolConfig& shape, int n_pages)
    : n_pages_(n_pages),
      n_layers_(shape.n_layers),
      n_kv_heads_(shape.n_kv_heads),
      head_dim_(shape.head_dim),
      kv_type_(shape.kv_type) {
  for (int layer = 0; layer < n_layers_; ++layer) layers_.push_back(shape.layer_shape(layer));
}

void KeySummaries::AddRow(size_t index, const float* row, int head_dim, bool first) {
  float* lo = Box(index);
  float* hi = lo + head_dim_;
  if (first) {
    std::memcpy(lo, row, sizeof(float) * size_t(head_dim));
    std::memcpy(hi, row, sizeof(float) * size_t(head_dim));
    return;
  }
  for (int c = 0; c < head_dim; ++c) {
    lo[c] = std::min(lo[c], row[c]);
    hi[c] = std::max(hi[c], row[c]);
  }
}

void KeySummaries::Update(PageId page, const uint8_t* bytes, const PagePool& layout, int layer,
                          int head, int offset) {
  SHARDLM_DCHECK(page >= 0 && page < n_pages_);
  const size_t index = Index(page, layer, head);
  const TypeTraits& element = *GetTypeTraits(KvElementType(kv_type_));
  float row[512];
  // Not the continuation of the summarized rows: start over from the stored rows.
  const int from = counts_[index] == offset ? offset : 0;
  const int head_dim = layers_[size_t(layer)].head_dim;
  for (int o = from; o <= offset; ++o) {
    element.dequantize_row(bytes + layout.RowOffset(layer, 0, head, o), row, head_dim);
    AddRow(index, row, head_dim, o == 0);
  }
  counts_[index] = uint16_t(offset + 1);
}

void KeySummaries::Rebuild(PageId page, const uint8_t* bytes, const PagePool& layout, int n_valid) {
  for (int layer = 0; layer < n_layers_; ++layer) {
    for (int head = 0; head < layers_[size_t(layer)].n_kv_heads; ++head) {
      counts_[Index(page, layer, head)] = 0;
      if (n_valid > 0) Update(page, bytes, layout, layer, head, n_valid - 1);
    }
  }
}

void KeySummaries::Copy(PageId src, PageId dst) {
  const size_t per_page = size_t(n_layers_) * n_kv_heads_;
  std::memcpy(Box(Index(dst, 0, 0)), Box(Index(src, 0, 0)),
              per_page * 2 * size_t(head_dim_) * sizeof(float));
  std::copy_n(counts_ + Index(src, 0, 0), per_page, counts_ + Index(dst, 0, 0));
}

void KeySummaries::Forget(PageId page) {
  std::fill_n(counts_ + Index(page, 0, 0), size_t(n_layers_) * n_kv_heads_, 0);
}

float KeySummaries::UpperBound(PageId page, int layer, int head, const float* q) const {
  const size_t index = Index(page, layer, head);
  if (counts_[index] == 0) return -std::numeric_limits<float>::infinity();
  const float* lo = Box(index);
  return BoxBound(q, lo, lo + head_dim_, layers_[size_t(layer)].head_dim);
}

}  // namespace shardlm
