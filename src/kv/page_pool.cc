// PagePool: page storage of one stage (see page_pool.h).
#include "kv/page_pool.h"

#include <cstring>
#include <limits>

#include "base/check.h"
#include "tensor/type_traits.h"

namespace shardlm {

namespace {

// Each KV type with its name and the GGUF type of its rows.
struct KvTypeRow {
  KvType type;
  const char* name;
  GgmlType element;
};
constexpr KvTypeRow kKvTypes[] = {
    {KvType::kF32, "f32", GgmlType::kF32},    {KvType::kF16, "f16", GgmlType::kF16},
    {KvType::kQ8_0, "q8_0", GgmlType::kQ8_0}, {KvType::kQ4_0, "q4_0", GgmlType::kQ4_0},
    {KvType::kQ4_1, "q4_1", GgmlType::kQ4_1}, {KvType::kQ5_0, "q5_0", GgmlType::kQ5_0},
    {KvType::kQ5_1, "q5_1", GgmlType::kQ5_1}, {KvType::kIq4Nl, "iq4_nl", GgmlType::kIq4Nl},
};

const KvTypeRow* FindKvType(KvType type) {
  for (const KvTypeRow& row : kKvTypes) {
    if (row.type == type) return &row;
  }
  return nullptr;
}

}  // namespace

const char* KvTypeName(KvType type) {
  const KvTypeRow* row = FindKvType(type);
  return row ? row->name : "invalid";
}

Result<KvType> ParseKvType(const std::string& name) {
  for (const KvTypeRow& row : kKvTypes) {
    if (name == row.name) return row.type;
  }
  return InvalidArgument(
      "unknown KV cache type '{}' (use f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl)", name);
}

const char* WindowKvName(WindowKv window_kv) {
  switch (window_kv) {
    case WindowKv::kRing:
      return "ring";
    case WindowKv::kFull:
      return "full";
    case WindowKv::kSentinel:
      break;
  }
  return "invalid";
}

Result<WindowKv> ParseWindowKv(const std::string& name) {
  if (name == "ring") return WindowKv::kRing;
  if (name == "full") return WindowKv::kFull;
  return InvalidArgument("unknown window KV placement '{}' (use ring or full)", name);
}

GgmlType KvElementType(KvType type) {
  const KvTypeRow* row = FindKvType(type);
  SHARDLM_CHECK_MSG(row != nullptr, "invalid KV type %d", static_cast<int>(type));
  return row->element;
}

void KvStoreRow(KvType type, const float* src, void* dst, int64_t n) {
  const TypeTraits& element = *GetTypeTraits(KvElementType(type));
  if (type == KvType::kF32 || type == KvType::kF16 || type == KvType::kQ8_0) {
    element.quantize_act(src, dst, n);
  } else {
    element.quantize_row(src, dst, n);
  }
}

size_t KvRowBytes(KvType type, size_t n) {
  const GgmlTypeInfo info = *LookupGgmlType(static_cast<uint32_t>(KvElementType(type)));
  SHARDLM_CHECK(int64_t(n) % info.block_size == 0);
  return size_t(RowBytes(info, int64_t(n)));
}

Status CheckKvRows(KvType type, int head_dim) {
  if (int(type) < 0 || type >= KvType::kSentinel) {
    return InvalidArgument("invalid KV cache type {}", int(type));
  }
  const int64_t block = LookupGgmlType(static_cast<uint32_t>(KvElementType(type)))->block_size;
  if (head_dim % block != 0) {
    return InvalidArgument("a {} KV cache needs head_dim % {} == 0; this model's is {}",
                           KvTypeName(type), block, head_dim);
  }
  return Status::Ok();
}

PagePool::PagePool(const PagePoolConfig& config) : config_(config) {}

bool PagePoolConfig::uniform() const {
  for (const KvLayerShape& shape : layer_shapes) {
    if (shape != KvLayerShape{n_kv_heads, head_dim}) return false;
  }
  return true;
}

size_t KvPageBytes(const PagePoolConfig& config) {
  size_t bytes = 0;
  for (int layer = 0; layer < config.n_layers; ++layer) {
    const KvLayerShape shape = config.layer_shape(layer);
    bytes += KvRowBytes(config.kv_type, size_t(shape.head_dim)) * size_t(shape.n_kv_heads) *
             size_t(config.page_tokens) * 2;
  }
  return bytes;
}

Result<std::unique_ptr<PagePool>> PagePool::Layout(const PagePoolConfig& config) {
  if (config.n_pages <= 0 || config.page_tokens <= 0 || config.n_layers < 0 ||
      config.n_kv_heads <= 0 || config.head_dim <= 0) {
    return InvalidArgument(
        "KV pool: every size must be positive, n_layers at least 0 (n_pages {}, page_tokens {}, "
        "n_layers {}, "
        "n_kv_heads {}, head_dim {})",
        config.n_pages, config.page_tokens, config.n_layers, config.n_kv_heads, config.head_dim);
  }
  if (!config.layer_shapes.empty() && config.layer_shapes.size() != size_t(config.n_layers)) {
    return InvalidArgument("KV pool: {} layer shapes for {} layers", config.layer_shapes.size(),
                           config.n_layers);
  }
  for (int layer = 0; layer < config.n_layers; ++layer) {
    const KvLayerShape shape = config.layer_shape(layer);
    if (shape.n_kv_heads <= 0 || shape.n_kv_heads > config.n_kv_heads || shape.head_dim <= 0 ||
        shape.head_dim > config.head_dim) {
      return InvalidArgument("KV pool: layer {} has {} kv heads of {} (at most {} of {})", layer,
                             shape.n_kv_heads, shape.head_dim, config.n_kv_heads, config.head_dim);
    }
    SHARDLM_TRY(CheckKvRows(config.kv_type, shape.head_dim).WithContext("KV pool"));
  }
  SHARDLM_TRY(CheckKvRows(config.kv_type, config.head_dim).WithContext("KV pool"));
  // Every product below stays far from overflow when the total is bounded this way (4 bytes
  // per element bounds every type; the widest shape bounds every layer's).
  constexpr double kMaxPoolBytes = double(std::numeric_limits<int64_t>::max()) / 4;
  const double total = double(config.n_pages) * config.page_tokens * config.n_layers * 2 *
                       config.n_kv_heads * config.head_dim * 4;
  if (total > kMaxPoolBytes) {
    return InvalidArgument("KV pool of {:.0f} bytes is too large (reduce the number of pages)",
                           total);
  }
  std::unique_ptr<PagePool> pool(new PagePool(config));
  size_t offset = 0;
  for (int layer = 0; layer < config.n_layers; ++layer) {
    const KvLayerShape shape = config.layer_shape(layer);
    const size_t row_bytes = KvRowBytes(config.kv_type, size_t(shape.head_dim));
    pool->layers_.push_back({offset, shape, row_bytes});
    offset += row_bytes * size_t(shape.n_kv_heads) * size_t(config.page_tokens) * 2;
  }
  pool->page_bytes_ = offset;
  SHARDLM_CHECK(pool->page_bytes_ == KvPageBytes(config));
  return pool;
}

Result<std::unique_ptr<PagePool>> PagePool::Create(const PagePoolConfig& config) {
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<PagePool> pool, Layout(config));
  const size_t total_bytes = pool->page_bytes_ * size_t(config.n_pages);
  // A stage whose layers keep no KV (recurrent layers only) has pages of no bytes: its
  // pages exist in the block tables like every stage's, and hold nothing here.
  if (total_bytes == 0) return pool;
  // Huge pages: a decode step of 8 streams at a few hundred positions reads more K/V bytes
  // than weights, and with 4 KiB pages every 4 KiB of a head's run was a TLB miss.
  pool->storage_ = AllocateHugePages(total_bytes);
  if (!pool->storage_) {
    return OutOfRange("KV pool: cannot allocate {} bytes for {} pages (reduce --kv-pages)",
                      total_bytes, config.n_pages);
  }
  pool->base_ = pool->storage_.get();
  // Not zeroed: a position is read only after it was written, and untouched pages of a
  // large pool stay uncommitted until used.
  return pool;
}

Result<std::unique_ptr<PagePool>> PagePool::CreateOn(const PagePoolConfig& config,
                                                     std::span<uint8_t> memory,
                                                     std::shared_ptr<void> owner) {
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<PagePool> pool, Layout(config));
  const size_t total_bytes = pool->page_bytes_ * size_t(config.n_pages);
  if (memory.size() < total_bytes || (total_bytes > 0 && memory.data() == nullptr)) {
    return InvalidArgument("KV pool: {} bytes of memory for {} pages of {} bytes", memory.size(),
                           config.n_pages, pool->page_bytes_);
  }
  pool->base_ = total_bytes > 0 ? memory.data() : nullptr;
  pool->owner_ = std::move(owner);
  return pool;
}

void PagePool::CopyPage(PageId src, PageId dst) {
  SHARDLM_CHECK(src >= 0 && src < config_.n_pages && dst >= 0 && dst < config_.n_pages);
  if (src == dst || page_bytes_ == 0) return;
  std::memcpy(page_data(dst), page_data(src), page_bytes_);
}

uint8_t* PagePool::page_data(PageId page) {
  SHARDLM_CHECK(page >= 0 && page < config_.n_pages);
  return base_ + size_t(page) * page_bytes_;
}

const uint8_t* PagePool::page_data(PageId page) const {
  return const_cast<PagePool*>(this)->page_data(page);
}

size_t PagePool::RowOffset(int layer_idx, int kv, int kv_head, int offset) const {
  SHARDLM_DCHECK(layer_idx >= 0 && layer_idx < config_.n_layers);
  const LayerRows& layer = layers_[size_t(layer_idx)];
  SHARDLM_DCHECK(kv_head >= 0 && kv_head < layer.shape.n_kv_heads);
  SHARDLM_DCHECK(offset >= 0 && offset < config_.page_tokens);
  const size_t row =
      (size_t(kv) * layer.shape.n_kv_heads + kv_head) * config_.page_tokens + size_t(offset);
  return layer.offset + row * layer.head_row_bytes;
}

void* PagePool::RowPtr(PageId page, int layer_idx, int kv, int kv_head, int offset) {
  SHARDLM_DCHECK(page >= 0 && page < config_.n_pages);
  return base_ + size_t(page) * page_bytes_ + RowOffset(layer_idx, kv, kv_head, offset);
}

}  // namespace shardlm
