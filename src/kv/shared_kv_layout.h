// Shared KV layout: how a stage's pages (and, under a bounded pool, its key summaries) lie in
// the shared-memory region a prefill worker maps, so that the stage that makes the region, the
// worker that maps it and the shard protocol that checks its size agree on every offset.
//
// A region holds the stage's pool (its pages, or a bounded pool's frames) from offset 0; under a
// bounded pool with the `qk` selection the key summaries of every logical page follow at the
// next cache line: the worker summarizes the keys it writes, the decode side scores pages with
// them.
//
// Goals: one place for the arithmetic. Non-goals: making or mapping regions (ipc/shm_region.h),
// the pool's own layout (page_pool.h).
//
// Thread safety: pure functions. Lifetime: values only.
#pragma once

#include <cstddef>

#include "kv/page_pool.h"

namespace shardlm {

// Whether a region of `kv` holds key summaries after the pool.
bool SharedKvHoldsSummaries(const KvGeometry& kv);
// Where the summaries start in the region of a pool shaped `pool` (its n_pages being the frames).
size_t SharedKvSummariesOffset(const PagePoolConfig& pool);
// Bytes of the region of a pool shaped `pool` under `kv`.
size_t SharedKvRegionBytes(const PagePoolConfig& pool, const KvGeometry& kv);

}  // namespace shardlm
