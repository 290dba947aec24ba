// Shared KV layout: the pool, then the key summaries (see shared_kv_layout.h).
#include "kv/shared_kv_layout.h"

#include "kv/key_summaries.h"

namespace shardlm {

bool SharedKvHoldsSummaries(const KvGeometry& kv) { return kv.bounded() && kv.key_summaries; }

size_t SharedKvSummariesOffset(const PagePoolConfig& pool) {
  constexpr size_t kLine = 64;
  return (KvPageBytes(pool) * size_t(pool.n_pages) + kLine - 1) / kLine * kLine;
}

size_t SharedKvRegionBytes(const PagePoolConfig& pool, const KvGeometry& kv) {
  if (!SharedKvHoldsSummaries(kv)) return KvPageBytes(pool) * size_t(pool.n_pages);
  return SharedKvSummariesOffset(pool) + KeySummaries::Bytes(pool, kv.n_pages);
}

}  // namespace shardlm
