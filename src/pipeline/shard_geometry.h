// Shard geometry: what both ends of a shard session (remote_stage.h, shard_service.h)
// compute identically from a Hello — the bytes of one KV page of the stage, the most pages
// one ExportPages/ImportPages moves, the shared region's layout — and the bounds a Hello
// must respect.
//
// Goals: one place for the arithmetic, so a client and a daemon built from the same source
// never disagree on a region size; bounds that keep every product far from overflow and
// refuse absurd requests (a pool or region larger than this machine's memory) with a
// message that names the value and the limit.
// Non-goals: the wire format (ipc/shard_protocol.h), checking the Hello against a model
// file (the daemon does that: shard_service.cc).
//
// Thread safety: pure functions. Lifetime: values only.
#pragma once

#include <cstddef>

#include "base/status.h"
#include "ipc/shard_protocol.h"
#include "kv/page_pool.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace shardlm {

// Pages one ExportPages/ImportPages moves at most. 16 pages of a 0.6B-shaped stage
// (14 layers × 2 × 64 positions × 1024 floats) are 14 MiB: large enough that a transfer's
// round trip is negligible against the copy, small enough not to grow the region much.
inline constexpr int kShardPagesPerTransfer = 16;

// Bounds on a Hello's geometry. Far above any real use (a 1M-token context at 64 positions
// per page is 16K pages), low enough that their products fit comfortably in 64 bits.
inline constexpr int kShardMaxPages = 1 << 22;
inline constexpr int kShardMaxPageTokens = 1 << 16;
inline constexpr int kShardMaxBatchTokens = 1 << 16;
inline constexpr int kShardMaxLogitRows = kShardMaxBatchTokens;
inline constexpr int kShardMaxThreads = 1024;

// The layer ranges of the Hello's stage whose pages lie in one pool each: one per
// Hello.shared_kv entry (a stage over a split server's regions), else the whole range. Call
// after ValidateShardGeometry.
std::vector<LayerRange> ShardKvRanges(const ShardHello& hello);
// Bytes of one page of `layers` under the Hello's geometry (PagePool's layout: K and V rows of
// n_head_kv × head_dim elements per position per layer with KV in the pool; 0 for layers that
// are all recurrent, or windowed and kept in rings).
size_t ShardRangePageBytes(const ModelConfig& config, const ShardHello& hello, LayerRange layers);
// Bytes of the shared region that holds the pages of `layers` under the Hello's geometry
// (SharedKvRegionBytes: every page, or a bounded pool's frames and key summaries).
size_t ShardSharedKvBytes(const ModelConfig& config, const ShardHello& hello, LayerRange layers);
// Bytes of one page of the Hello's stage: the sum over its ShardKvRanges (a page exported from a
// stage over several pools is their parts in layer order).
size_t ShardPageBytes(const ModelConfig& config, const ShardHello& hello);
// Bytes of one sequence's state in the Hello's stage (StageStateBytes: recurrent layers and
// window rings; 0: none).
size_t ShardStateBytes(const ModelConfig& config, const ShardHello& hello);

// Checks the Hello's own fields: magic, every size positive and within the bounds above,
// kv_type valid, max_logit_rows <= max_batch_tokens, 0 <= max_embedding_rows <=
// max_batch_tokens, 0 <= begin < end <= n_layers; shared_kv entries ending in increasing
// order inside the range, the last at its end, not with share_kv.
// InvalidArgument naming the field, its value and the bound.
Status ValidateShardGeometry(const ShardHello& hello);

// The region layout for `hello` (ComputeRegionLayout with kShardPagesPerTransfer and the
// stage's recurrent state), refused (OutOfRange) when the region or the KV pool (n_pages ×
// page_bytes) would exceed this machine's physical memory.
Result<ShardRegionLayout> ShardLayout(const ShardHello& hello, size_t page_bytes,
                                      size_t state_bytes);

// Resident set of this process, from /proc/self/statm (0 when unreadable).
size_t ProcessRssBytes();

}  // namespace shardlm
