// WindowRings: per-sequence rings of windowed layers' KV (see window_ring.h).
#include "kv/window_ring.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace shardlm {

namespace {

// Bytes of one head's row of `shape` stored as `kv_type`.
size_t RowBytes(const WindowRingLayer& layer, KvType kv_type) {
  return KvRowBytes(kv_type, size_t(layer.shape.head_dim));
}

}  // namespace

size_t WindowRings::StateBytes(std::span<const WindowRingLayer> layers, KvType kv_type) {
  size_t bytes = 0;
  for (const WindowRingLayer& layer : layers) {
    bytes +=
        2 * size_t(layer.shape.n_kv_heads) * size_t(layer.window - 1) * RowBytes(layer, kv_type);
  }
  return bytes;
}

namespace {

// The widest window of `layers` (1 when there are none).
int WidestWindow(std::span<const WindowRingLayer> layers) {
  int widest = 1;
  for (const WindowRingLayer& layer : layers) widest = std::max(widest, layer.window);
  return widest;
}

}  // namespace

int WindowRings::RingPages(std::span<const WindowRingLayer> layers, int page_tokens,
                           int max_batch_tokens, int max_sequence_pages) {
  const int span = WidestWindow(layers) - 1 + std::max(max_batch_tokens, page_tokens);
  const int pages = (span + page_tokens - 1) / page_tokens + 1;
  return max_sequence_pages > 0 ? std::min(pages, max_sequence_pages) : pages;
}

namespace {

// The page pool of one slot's ring: its layers in their shapes, R pages.
PagePoolConfig RingPoolConfig(std::span<const WindowRingLayer> layers, int ring_pages,
                              int page_tokens, KvType kv_type) {
  PagePoolConfig config;
  config.n_pages = ring_pages;
  config.page_tokens = page_tokens;
  config.n_layers = int(layers.size());
  config.kv_type = kv_type;
  for (const WindowRingLayer& layer : layers) {
    config.layer_shapes.push_back(layer.shape);
    config.n_kv_heads = std::max(config.n_kv_heads, layer.shape.n_kv_heads);
    config.head_dim = std::max(config.head_dim, layer.shape.head_dim);
  }
  return config;
}

}  // namespace

size_t WindowRings::SlotBytes(std::span<const WindowRingLayer> layers, int page_tokens,
                              KvType kv_type, int max_batch_tokens, int max_sequence_pages) {
  if (layers.empty()) return 0;
  const int ring_pages = RingPages(layers, page_tokens, max_batch_tokens, max_sequence_pages);
  return KvPageBytes(RingPoolConfig(layers, ring_pages, page_tokens, kv_type)) * size_t(ring_pages);
}

WindowRings::WindowRings(std::vector<WindowRingLayer> layers, int page_tokens, KvType kv_type,
                         int max_batch_tokens, int max_sequence_pages)
    : layers_(std::move(layers)),
      page_tokens_(page_tokens),
      kv_type_(kv_type),
      widest_(WidestWindow(layers_)),
      ring_pages_(RingPages(layers_, page_tokens, max_batch_tokens, max_sequence_pages)),
      state_bytes_(StateBytes(layers_, kv_type)) {
  SHARDLM_CHECK(page_tokens > 0 && max_batch_tokens > 0);
  for (const WindowRingLayer& layer : layers_) SHARDLM_CHECK(layer.window >= 1);
}

Status WindowRings::EnsureSlot(int slot) {
  if (slot < 0) return InvalidArgument("window ring: slot {} is negative", slot);
  if (size_t(slot) >= rings_.size()) {
    rings_.resize(size_t(slot) + 1);
    positions_.resize(size_t(slot) + 1, 0);
  }
  if (rings_[size_t(slot)] != nullptr) return Status::Ok();
  const PagePoolConfig config = RingPoolConfig(layers_, ring_pages_, page_tokens_, kv_type_);
  Result<std::unique_ptr<PagePool>> pool = PagePool::Create(config);
  if (!pool.ok()) return pool.status().WithContext("window ring of slot " + std::to_string(slot));
  rings_[size_t(slot)] = std::move(pool).value();
  return Status::Ok();
}

void WindowRings::EnsurePages(size_t n_logical) {
  while (page_of_logical_.size() < n_logical) {
    page_of_logical_.push_back(PageId(page_of_logical_.size() % size_t(ring_pages_)));
  }
}

int32_t WindowRings::position(int slot) const {
  return size_t(slot) < positions_.size() ? positions_[size_t(slot)] : 0;
}

int32_t WindowRings::OldestHeld(int slot) const {
  const int32_t live = position(slot);
  if (live == 0) return 0;
  const int32_t last_page = (live - 1) / page_tokens_;
  return std::max(0, (last_page - ring_pages_ + 1) * page_tokens_);
}

template <typename Fn>
void WindowRings::ForEachStateRow(int32_t position, Fn&& fn) const {
  size_t offset = 0;
  for (int l = 0; l < n_layers(); ++l) {
    const WindowRingLayer& layer = layers_[size_t(l)];
    const size_t row = RowBytes(layer, kv_type_);
    for (int kv = 0; kv < 2; ++kv) {
      for (int h = 0; h < layer.shape.n_kv_heads; ++h) {
        for (int32_t p = position - layer.window + 1; p < position; ++p) {
          fn(l, kv, h, p, offset, row);
          offset += row;
        }
      }
    }
  }
}

Status WindowRings::Export(int slot, int32_t position, std::span<uint8_t> dst) const {
  if (dst.size() != state_bytes_) {
    return InvalidArgument("a window state of {} bytes does not fit {}", state_bytes_, dst.size());
  }
  const bool held = slot >= 0 && size_t(slot) < rings_.size() && rings_[size_t(slot)] != nullptr &&
                    position >= 0 && position <= positions_[size_t(slot)] &&
                    std::max(0, position - widest_ + 1) >= OldestHeld(slot);
  if (!held) {
    return NotFound("slot {}'s window ring does not hold the window before position {}", slot,
                    position);
  }
  const PagePool& ring = pool(slot);
  ForEachStateRow(position, [&](int l, int kv, int h, int32_t p, size_t offset, size_t row) {
    if (p < 0) {
      std::memset(dst.data() + offset, 0, row);
      return;
    }
    const PageId page = RingPage(p);
    const void* src = kv == 0 ? ring.KeyRow(page, l, h, p % page_tokens_)
                              : ring.ValueRow(page, l, h, p % page_tokens_);
    std::memcpy(dst.data() + offset, src, row);
  });
  return Status::Ok();
}

Status WindowRings::Import(int slot, int32_t position, std::span<const uint8_t> src) {
  if (src.size() != state_bytes_ || position < 0) {
    return InvalidArgument("window state: {} bytes at position {} (a slot holds {} bytes)",
                           src.size(), position, state_bytes_);
  }
  SHARDLM_TRY(EnsureSlot(slot));
  PagePool& ring = pool(slot);
  ForEachStateRow(position, [&](int l, int kv, int h, int32_t p, size_t offset, size_t row) {
    if (p < 0) return;
    const PageId page = RingPage(p);
    void* dst = kv == 0 ? ring.KeyRow(page, l, h, p % page_tokens_)
                        : ring.ValueRow(page, l, h, p % page_tokens_);
    std::memcpy(dst, src.data() + offset, row);
  });
  positions_[size_t(slot)] = position;
  return Status::Ok();
}

}  // namespace shardlm
