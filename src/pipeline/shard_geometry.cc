// Shard geometry: page bytes, Hello bounds, region layout (see shard_geometry.h).
#include "pipeline/shard_geometry.h"

#include <unistd.h>

#include <cstdio>

#include "kv/shared_kv_layout.h"
#include "model/model.h"

namespace shardlm {
namespace {

Status CheckRange(const char* field, int64_t value, int64_t max) {
  if (value <= 0 || value > max) {
    return InvalidArgument("{} {} is out of range (1..{})", field, value, max);
  }
  return Status::Ok();
}

size_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return SIZE_MAX;
  return size_t(pages) * size_t(page_size);
}

// Hello.shared_kv and share_kv (shard_geometry.h: ValidateShardGeometry).
Status ValidateSharedKv(const ShardHello& hello) {
  if (hello.shared_kv.empty() && !hello.share_kv) return Status::Ok();
  if (hello.shared_kv.empty()) return Status::Ok();
  if (hello.share_kv) {
    return InvalidArgument("a Hello cannot both lay its pages over the server's and share its own");
  }
  int begin = hello.layer_begin;
  for (const ShardSharedKv& region : hello.shared_kv) {
    if (region.layer_end <= begin || region.layer_end > hello.layer_end) {
      return InvalidArgument(
          "shared KV region ending at layer {} ({} bytes) does not follow layer {} inside [{}, {})",
          region.layer_end, region.bytes, begin, hello.layer_begin, hello.layer_end);
    }
    begin = region.layer_end;
  }
  if (begin != hello.layer_end) {
    return InvalidArgument("the shared KV regions end at layer {}, the stage at {}", begin,
                           hello.layer_end);
  }
  return Status::Ok();
}

}  // namespace

std::vector<LayerRange> ShardKvRanges(const ShardHello& hello) {
  if (hello.shared_kv.empty()) return {LayerRange{hello.layer_begin, hello.layer_end}};
  std::vector<LayerRange> ranges;
  int begin = hello.layer_begin;
  for (const ShardSharedKv& region : hello.shared_kv) {
    ranges.push_back({begin, region.layer_end});
    begin = region.layer_end;
  }
  return ranges;
}

size_t ShardRangePageBytes(const ModelConfig& config, const ShardHello& hello, LayerRange layers) {
  return KvPageBytes(StageKvPoolConfig(config, layers, 1, hello.page_tokens,
                                       static_cast<KvType>(hello.kv_type),
                                       static_cast<WindowKv>(hello.window_kv)));
}

size_t ShardSharedKvBytes(const ModelConfig& config, const ShardHello& hello, LayerRange layers) {
  KvGeometry kv;
  kv.n_pages = hello.n_pages;
  kv.n_frames = hello.n_frames;
  kv.key_summaries = hello.key_summaries;
  const PagePoolConfig pool =
      StageKvPoolConfig(config, layers, kv.frames(), hello.page_tokens,
                        static_cast<KvType>(hello.kv_type), static_cast<WindowKv>(hello.window_kv));
  return SharedKvRegionBytes(pool, kv);
}

size_t ShardPageBytes(const ModelConfig& config, const ShardHello& hello) {
  size_t bytes = 0;
  for (LayerRange layers : ShardKvRanges(hello))
    bytes += ShardRangePageBytes(config, hello, layers);
  return bytes;
}

size_t ShardStateBytes(const ModelConfig& config, const ShardHello& hello) {
  return StageStateBytes(config, {hello.layer_begin, hello.layer_end},
                         static_cast<KvType>(hello.kv_type),
                         static_cast<WindowKv>(hello.window_kv));
}

Status ValidateShardGeometry(const ShardHello& hello) {
  if (hello.magic != kShardMagic) {
    return InvalidArgument("bad magic 0x{:08x} (expected 0x{:08x})", hello.magic, kShardMagic);
  }
  SHARDLM_TRY(CheckRange("n_layers", hello.n_layers, 1 << 16));
  SHARDLM_TRY(CheckRange("n_embd", hello.n_embd, 1 << 20));
  SHARDLM_TRY(CheckRange("n_vocab", hello.n_vocab, 1 << 24));
  SHARDLM_TRY(CheckRange("n_pages", hello.n_pages, kShardMaxPages));
  SHARDLM_TRY(CheckRange("page_tokens", hello.page_tokens, kShardMaxPageTokens));
  SHARDLM_TRY(CheckRange("max_batch_tokens", hello.max_batch_tokens, kShardMaxBatchTokens));
  SHARDLM_TRY(CheckRange("max_logit_rows", hello.max_logit_rows, kShardMaxLogitRows));
  if (hello.max_logit_rows > hello.max_batch_tokens) {
    return InvalidArgument("max_logit_rows {} exceeds max_batch_tokens {}", hello.max_logit_rows,
                           hello.max_batch_tokens);
  }
  if (hello.max_embedding_rows < 0 || hello.max_embedding_rows > hello.max_batch_tokens) {
    return InvalidArgument("max_embedding_rows {} is out of range (0..max_batch_tokens {})",
                           hello.max_embedding_rows, hello.max_batch_tokens);
  }
  if (hello.threads < 0 || hello.threads > kShardMaxThreads) {
    return InvalidArgument("threads {} is out of range (0..{})", hello.threads, kShardMaxThreads);
  }
  if (hello.kv_type >= static_cast<uint32_t>(KvType::kSentinel)) {
    return InvalidArgument("kv_type {} is not a KV cache type", hello.kv_type);
  }
  if (hello.window_kv >= static_cast<uint32_t>(WindowKv::kSentinel)) {
    return InvalidArgument("window_kv {} is not a window KV placement", hello.window_kv);
  }
  if (hello.n_frames < 0 || hello.n_frames > hello.n_pages) {
    return InvalidArgument("n_frames {} is out of range (0..n_pages {})", hello.n_frames,
                           hello.n_pages);
  }
  if (hello.tier_kind > static_cast<uint32_t>(KvTierSpec::Kind::kFile) ||
      (hello.tier_kind == static_cast<uint32_t>(KvTierSpec::Kind::kFile) && hello.n_frames > 0 &&
       hello.tier_dir.empty())) {
    return InvalidArgument("KV tier kind {} (dir '{}') is not a tier", hello.tier_kind,
                           hello.tier_dir);
  }
  if (hello.layer_begin < 0 || hello.layer_begin >= hello.layer_end ||
      hello.layer_end > hello.n_layers) {
    return InvalidArgument("layer range [{}, {}) is not inside the model's {} layers",
                           hello.layer_begin, hello.layer_end, hello.n_layers);
  }
  return ValidateSharedKv(hello);
}

Result<ShardRegionLayout> ShardLayout(const ShardHello& hello, size_t page_bytes,
                                      size_t state_bytes) {
  SHARDLM_TRY(ValidateShardGeometry(hello));
  const size_t memory = PhysicalMemoryBytes();
  // page_bytes and n_pages are bounded (ValidateShardGeometry, the file's config), so the
  // double product is exact enough to compare against the memory size. A bounded pool holds
  // its frames; the tier holds the rest.
  const int resident_pages = hello.n_frames > 0 ? hello.n_frames : hello.n_pages;
  const double pool_bytes = double(page_bytes) * double(resident_pages);
  if (pool_bytes > double(memory)) {
    return OutOfRange("KV pool of {} pages × {} bytes exceeds this machine's {} bytes of memory",
                      resident_pages, page_bytes, memory);
  }
  const ShardRegionLayout layout =
      ComputeRegionLayout(hello, page_bytes, kShardPagesPerTransfer, state_bytes);
  if (layout.total_bytes == 0 || layout.total_bytes > memory) {
    return OutOfRange(
        "shared region of {} bytes (max_batch_tokens {}, max_logit_rows {}) exceeds this "
        "machine's {} bytes of memory",
        layout.total_bytes, hello.max_batch_tokens, hello.max_logit_rows, memory);
  }
  return layout;
}

size_t ProcessRssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long total = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &total, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return size_t(resident) * size_t(::sysconf(_SC_PAGESIZE));
}

}  // namespace shardlm
