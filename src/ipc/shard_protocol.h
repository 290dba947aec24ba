// Shard protocol: the messages between a server and a `shardlm shard` daemon that serves
// one stage, as plain versioned structs, apart from the transport that carries them
// (message_channel.h today; UCX later), so a second transport is a new file.
//
// A session: the server connects and sends Hello with a shared-memory region (shm_region.h)
// attached; the daemon loads the requested layer range, verifies the model fingerprint
// itself and answers HelloReply (accepted, or refused with a reason both sides print).
// Then any number of requests, each answered before the next is sent:
//   RunBatch        → RunReply      hidden rows in the region's input area, output rows
//                                   (hidden rows, or logits then embedding rows) written to
//                                   its output area
//   ExportPages     → PagesReply    page contents written to the output area
//   ImportPages     → PagesReply    page contents read from the input area
//   ExportState     → StateReply    a slot's recurrent state written to the output area
//   ImportState     → StateReply    a slot's recurrent state read from the input area
//   StatsRequest    → StatsReply
// Shared page memory (a prefill worker, engine/scheduler.h "Prefill worker"), two ways:
//  - A Hello with shared_kv entries is followed at once by one SharedKv per entry of more
//    than 0 bytes, in order (no reply), each carrying the fd of a region of the entry's bytes: the
//    daemon lays the pages of the entry's layers over it instead of allocating them, so the pages
//    it writes are the server's (one region per decode stage of a split server, each holding the
//    pages of that stage's layers). Such a session's end leaves the pages to the server.
//  - A Hello with share_kv asks the daemon to put its own pool in a new sealed region and,
//    after an accepted HelloReply, send SharedKv carrying its fd (a decode stage in a daemon,
//    whose pages the server hands on to a prefill worker).
// While a request runs longer than the Hello's heartbeat_ms, the daemon sends Working (empty
// payload) every heartbeat_ms before the reply, so the server tells a long batch from a hung
// daemon: a server that hears neither within its timeout marks the stage down.
// Closing the connection ends the session: the daemon frees the session's pages.
//
// Wire format: every value little-endian, fixed width; strings and arrays are a u32 count
// then the elements. Decode checks every count against the bytes left and against the
// limits below, so a hostile or truncated message is an InvalidData Status, never a crash,
// an over-read or an unbounded allocation.
//
// Decode does not judge meaning: Hello's magic, version and kv_type are checked by the
// daemon so it can say what is wrong in HelloReply; status_code (< StatusCode::kSentinel),
// bools (0/1) and doubles (finite) are checked here.
//
// Thread safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/batch.h"
#include "kv/page_pool.h"
#include "kv/page_residency.h"
#include "kv/paging.h"

namespace shardlm {

// 2: Hello.heartbeat_ms and the Working message.
// 3: head-major KV pages (page_pool.h): exported page bytes are laid out differently.
// 4: embedding rows: BatchEntry.wants_embedding, Hello.max_embedding_rows,
//    RunReply.n_embedding_rows, and the output area holds logits plus embedding rows.
// 5: bounded KV pools: Hello.n_frames, tier and key summaries; RunBatch paging ops, attended
//    pages and BatchEntry.score_pages; RunReply page scores and paging counters.
// 6: RunReply lost pages (a tier failure loses pages, not the batch).
// 7: RunBatch paging ops without `reset` (after a failed batch they free every page), and an
//    imported page forgets what it held before.
// 8: recurrent layers: ExportState / ImportState / StateReply; pages hold only the layers with
//    KV (a stage of recurrent layers only has pages of 0 bytes); the region's areas also fit
//    one slot's recurrent state.
// 9: Hello.window_kv: windowed layers in rings (pages hold only the other layers; the state
//    holds the rings' last window).
// 10: Hello.shared_kv_bytes and the SharedKv message: the stage's pages may lie in the server's
//    own KV memory (a prefill worker writes the pages the server decodes from).
// 11: Hello.shared_kv lists one region per layer range (a split decode side), replacing
//    shared_kv_bytes; Hello.share_kv and the daemon's SharedKv after an accepted HelloReply.
// 12: bounded KV pools with a prefill worker: RunBatch.apply_only (a decode stage moves the
//    pages of a batch the worker computes) and RunBatch.frames_by_slot (the worker computes over
//    those frames); a shared region holds a bounded pool's frames and its key summaries.
inline constexpr uint32_t kShardProtocolVersion = 12;
inline constexpr uint32_t kShardMagic = 0x4d4c4853;  // "SHLM"
// Limits Decode enforces (a peer asking for more is refused, not trusted).
inline constexpr uint32_t kMaxShardMessageBytes = 64u << 20;
inline constexpr uint32_t kMaxShardString = 4096;

enum class ShardMessageType : uint32_t {
  kHello = 1,
  kHelloReply = 2,
  kRunBatch = 3,
  kRunReply = 4,
  kExportPages = 5,
  kImportPages = 6,
  kPagesReply = 7,
  kStatsRequest = 8,
  kStatsReply = 9,
  kWorking = 10,  // daemon → server, empty: still computing the current request
  kExportState = 11,
  kImportState = 12,
  kStateReply = 13,
  kSharedKv = 14,  // empty, a region's fd attached: see "Shared page memory" above
};
const char* ShardMessageTypeName(ShardMessageType type);
// True when `type` is one of the values above (a frame's type field is checked with it).
bool ShardMessageTypeValid(uint32_t type);

// One region of the server's page memory that a Hello lays some of its layers' pages over.
struct ShardSharedKv {
  int32_t layer_end = 0;
  uint64_t bytes = 0;
};

// Server → daemon, first message; the shared-memory region's fd travels with it.
struct ShardHello {
  uint32_t magic = kShardMagic;
  uint32_t version = kShardProtocolVersion;
  std::string model_path;       // the daemon opens this file itself (same host)
  uint64_t fingerprint_hi = 0;  // ModelFingerprint of the file the server loaded
  uint64_t fingerprint_lo = 0;
  int32_t layer_begin = 0;  // the stage's range [begin, end)
  int32_t layer_end = 0;
  int32_t n_layers = 0;  // of the whole model (the daemon checks it against the file)
  int32_t n_embd = 0;
  int32_t n_vocab = 0;
  // Page geometry: the daemon's pool has n_pages pages of page_tokens positions.
  int32_t n_pages = 0;
  int32_t page_tokens = 0;
  uint32_t kv_type = 0;    // KvType
  uint32_t window_kv = 0;  // WindowKv
  int32_t threads = 0;     // 0: the daemon's own --cores
  int32_t max_batch_tokens = 0;
  int32_t max_logit_rows = 0;  // most rows wanting logits in one batch (last stage)
  uint64_t shm_bytes = 0;      // size of the attached region
  uint32_t heartbeat_ms = 0;   // Working every this many ms while a request runs (0: never)
  // Most rows wanting their embedding in one batch (last stage; 0: none may ask).
  int32_t max_embedding_rows = 0;
  // Bounded KV pool (kv/pager.h; 0 frames: unbounded): the pool holds n_frames frames, the
  // other pages live in the tier (kind KvTierSpec::Kind, dir for a file tier).
  int32_t n_frames = 0;
  uint32_t tier_kind = 0;
  std::string tier_dir = {};
  bool key_summaries = false;
  // The pages lie in the server's regions, one per entry, sent in SharedKv messages after the
  // Hello: entry i holds the pages of layers [previous entry's layer_end (layer_begin for the
  // first), layer_end), at least n_pages × those layers' page bytes (0 bytes: layers without
  // pages, no SharedKv for it). The last entry ends at layer_end. Empty: the daemon allocates
  // its own pages.
  std::vector<ShardSharedKv> shared_kv = {};
  // The daemon puts its pool in a new shared region and sends it back (see above).
  bool share_kv = false;
};

// Daemon → server.
struct ShardHelloReply {
  uint32_t version = kShardProtocolVersion;
  bool accepted = false;
  std::string error;   // why it was refused (version, fingerprint, geometry, load error)
  std::string device;  // what the daemon computes on, e.g. "cpu:1 (1 thread)"
  int32_t threads = 0;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t rss_bytes = 0;  // daemon's resident set after loading
};

// Server → daemon: one batch. Hidden rows ([entries][n_embd] floats) are at the start of
// the region's input area when the stage is not the first.
struct ShardRunBatch {
  uint64_t batch_id = 0;
  std::vector<BatchEntry> entries;
  std::vector<std::vector<PageId>> pages_by_slot;  // [slot] → page list (may be empty)
  std::vector<PageCopy> copies;
  // Bounded KV pool: the paging ops (kv/paging.h) and each slot's attended pages.
  PagingOps paging = {};
  std::vector<std::vector<int32_t>> attended_by_slot = {};
  // A prefill worker under a bounded pool (StageBatch::apply_only, StageBatch::frames_by_slot).
  bool apply_only = false;
  std::vector<std::vector<PageId>> frames_by_slot = {};
};

// Daemon → server. On success the output area holds n_out_rows rows (hidden rows of
// n_embd floats, or logits rows of n_vocab floats on the last stage), then, on the last
// stage, n_embedding_rows rows of n_embd floats (ForwardPass::Run's output).
struct ShardRunReply {
  uint64_t batch_id = 0;
  uint32_t status_code = 0;  // StatusCode
  std::string error;
  int32_t n_out_rows = 0;
  double compute_seconds = 0.0;
  int32_t n_embedding_rows = 0;
  // Bounded KV pool: the scores of the entries with score_pages (StageBatch::page_scores),
  // and the stage's paging counters after the batch.
  std::vector<float> page_scores = {};
  ResidencyStats paging = {};
  // Pages the stage's tier failed to move in this batch, and the first failure.
  std::vector<PageId> lost_pages = {};
  uint32_t loss_code = 0;  // StatusCode
  std::string loss_error = {};
};

// StatsRequest has an empty payload.

// Server → daemon: copy these pages' bytes (each page_bytes long, in order) to the output
// area (export), or from the input area into these pages (import).
struct ShardPages {
  std::vector<PageId> pages;
};

struct ShardPagesReply {
  uint32_t status_code = 0;
  std::string error;
  uint64_t page_bytes = 0;
};

// Server → daemon: copy the slot's recurrent state at `position` to the output area (export),
// or make the input area's bytes its state at `position` (import); Stage::ExportState.
struct ShardState {
  int32_t slot = 0;
  int32_t position = 0;
};

struct ShardStateReply {
  uint32_t status_code = 0;
  std::string error;
  uint64_t state_bytes = 0;
};

struct ShardStatsReply {
  uint64_t batches = 0;
  uint64_t tokens = 0;
  double busy_seconds = 0.0;
  uint64_t rss_bytes = 0;
};

// Serialization. Encode appends the payload (without framing) to `out`; strings longer
// than kMaxShardString are cut to it (at a UTF-8 boundary) rather than refused.
void EncodeHello(const ShardHello& m, std::vector<uint8_t>& out);
void EncodeHelloReply(const ShardHelloReply& m, std::vector<uint8_t>& out);
void EncodeRunBatch(const ShardRunBatch& m, std::vector<uint8_t>& out);
void EncodeRunReply(const ShardRunReply& m, std::vector<uint8_t>& out);
void EncodePages(const ShardPages& m, std::vector<uint8_t>& out);
void EncodePagesReply(const ShardPagesReply& m, std::vector<uint8_t>& out);
void EncodeStatsReply(const ShardStatsReply& m, std::vector<uint8_t>& out);
void EncodeState(const ShardState& m, std::vector<uint8_t>& out);
void EncodeStateReply(const ShardStateReply& m, std::vector<uint8_t>& out);

Result<ShardHello> DecodeHello(std::span<const uint8_t> payload);
Result<ShardHelloReply> DecodeHelloReply(std::span<const uint8_t> payload);
Result<ShardRunBatch> DecodeRunBatch(std::span<const uint8_t> payload);
Result<ShardRunReply> DecodeRunReply(std::span<const uint8_t> payload);
Result<ShardPages> DecodePages(std::span<const uint8_t> payload);
Result<ShardPagesReply> DecodePagesReply(std::span<const uint8_t> payload);
Result<ShardStatsReply> DecodeStatsReply(std::span<const uint8_t> payload);
Result<ShardState> DecodeState(std::span<const uint8_t> payload);
Result<ShardStateReply> DecodeStateReply(std::span<const uint8_t> payload);

// Layout of the shared region, [input area | output area], both 64-byte aligned:
// input  = max(max_batch_tokens × n_embd floats, import pages, one recurrent state), output =
// max(max_batch_tokens × n_embd floats, max_logit_rows × n_vocab + max_embedding_rows × n_embd
// floats, export pages, one recurrent state). Both sides compute it from the Hello and the
// model, so neither trusts offsets sent by the other.
struct ShardRegionLayout {
  size_t input_offset = 0;
  size_t input_bytes = 0;
  size_t output_offset = 0;
  size_t output_bytes = 0;
  size_t total_bytes = 0;
};
// page_bytes: one page of the stage's storage; pages_per_transfer: most pages moved by one
// ExportPages/ImportPages; state_bytes: one slot's recurrent state in the stage (0: none).
// input_bytes/output_bytes are rounded up to 64, so
// total_bytes = input_bytes + output_bytes. Sizes that are negative or would overflow
// size_t (a hostile or corrupt Hello) give an all-zero layout: total_bytes == 0 means
// "refuse this Hello".
ShardRegionLayout ComputeRegionLayout(const ShardHello& hello, size_t page_bytes,
                                      int pages_per_transfer, size_t state_bytes = 0);

}  // namespace shardlm
