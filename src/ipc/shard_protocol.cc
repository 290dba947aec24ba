// Encode/Decode of the shard protocol messages (shard_protocol.h) and the shared-region
// layout. Each message is a field list in declaration order; the wire primitives and
// their checks live in wire_impl.h.
#include "ipc/shard_protocol.h"

#include <algorithm>

#include "ipc/wire_impl.h"

namespace shardlm {
namespace {

// Wire sizes of the fixed-size array elements; Decode checks counts against these before
// allocating, so they must match the Write*/Read* functions below.
// token, position, slot, wants_logits, wants_embedding
constexpr size_t kBatchEntryWireBytes = 4 + 4 + 4 + 1 + 1 + 1;
constexpr size_t kPageIdWireBytes = 4;
constexpr size_t kPageCopyWireBytes = 2 * kPageIdWireBytes;
constexpr size_t kPageFrameWireBytes = 2 * kPageIdWireBytes;
constexpr size_t kFloatWireBytes = 4;
constexpr size_t kCountWireBytes = 4;         // an empty array is its count alone
constexpr size_t kSharedKvWireBytes = 4 + 8;  // layer_end, bytes
static_assert(sizeof(PageId) == kPageIdWireBytes, "PageId travels as an i32");
static_assert(static_cast<uint32_t>(StatusCode::kSentinel) < 64, "status codes fit a u32");

// Region areas start on a cache line, so neither side's rows share a line with the other
// area and vector loads of a row start aligned.
constexpr size_t kRegionAlign = 64;

// A list of page ids: a count, then each id as an i32.
template <typename V, typename Pages>
void PageIdFields(V& v, const char* field, Pages& pages) {
  v.Array(field, pages, kPageIdWireBytes, [field](auto& v, auto& page) { v(field, page); });
}

// Each message's fields in wire order (wire_impl.h: one list serves Encode and Decode).
constexpr auto kHelloFields = [](auto& v, auto& m) {
  v("magic", m.magic);
  v("version", m.version);
  v("model_path", m.model_path);
  v("fingerprint_hi", m.fingerprint_hi);
  v("fingerprint_lo", m.fingerprint_lo);
  v("layer_begin", m.layer_begin);
  v("layer_end", m.layer_end);
  v("n_layers", m.n_layers);
  v("n_embd", m.n_embd);
  v("n_vocab", m.n_vocab);
  v("n_pages", m.n_pages);
  v("page_tokens", m.page_tokens);
  v("kv_type", m.kv_type);      // range-checked by the daemon (KvType)
  v("window_kv", m.window_kv);  // range-checked by the daemon (WindowKv)
  v("threads", m.threads);
  v("max_batch_tokens", m.max_batch_tokens);
  v("max_logit_rows", m.max_logit_rows);
  v("shm_bytes", m.shm_bytes);
  v("heartbeat_ms", m.heartbeat_ms);
  v("max_embedding_rows", m.max_embedding_rows);
  v("n_frames", m.n_frames);
  v("tier_kind", m.tier_kind);  // range-checked by the daemon (KvTierSpec::Kind)
  v("tier_dir", m.tier_dir);
  v("key_summaries", m.key_summaries);
  v.Array("shared_kv", m.shared_kv, kSharedKvWireBytes, [](auto& v, auto& region) {
    v("shared_kv.layer_end", region.layer_end);
    v("shared_kv.bytes", region.bytes);
  });
  v("share_kv", m.share_kv);
};

constexpr auto kHelloReplyFields = [](auto& v, auto& m) {
  v("version", m.version);
  v("accepted", m.accepted);
  v("error", m.error);
  v("device", m.device);
  v("threads", m.threads);
  v("weight_bytes", m.weight_bytes);
  v("kv_bytes", m.kv_bytes);
  v("rss_bytes", m.rss_bytes);
};

constexpr auto kRunBatchFields = [](auto& v, auto& m) {
  v("batch_id", m.batch_id);
  v.Array("entries", m.entries, kBatchEntryWireBytes, [](auto& v, auto& e) {
    v("entries.token", e.token);
    v("entries.position", e.position);
    v("entries.slot", e.slot);
    v("entries.wants_logits", e.wants_logits);
    v("entries.wants_embedding", e.wants_embedding);
    v("entries.score_pages", e.score_pages);
  });
  v.Array("pages_by_slot", m.pages_by_slot, kCountWireBytes,
          [](auto& v, auto& pages) { PageIdFields(v, "pages_by_slot", pages); });
  v.Array("copies", m.copies, kPageCopyWireBytes, [](auto& v, auto& c) {
    v("copies.src", c.src);
    v("copies.dst", c.dst);
  });
  PageIdFields(v, "paging.frees", m.paging.frees);
  PageIdFields(v, "paging.evicts", m.paging.evicts);
  v.Array("paging.maps", m.paging.maps, kPageFrameWireBytes, [](auto& v, auto& map) {
    v("paging.maps.page", map.page);
    v("paging.maps.frame", map.frame);
  });
  v.Array("attended_by_slot", m.attended_by_slot, kCountWireBytes,
          [](auto& v, auto& pages) { PageIdFields(v, "attended_by_slot", pages); });
  v("apply_only", m.apply_only);
  v.Array("frames_by_slot", m.frames_by_slot, kCountWireBytes,
          [](auto& v, auto& frames) { PageIdFields(v, "frames_by_slot", frames); });
};

constexpr uint32_t kStatusSentinel = static_cast<uint32_t>(StatusCode::kSentinel);

constexpr auto kRunReplyFields = [](auto& v, auto& m) {
  v("batch_id", m.batch_id);
  v.Enum("status_code", m.status_code, kStatusSentinel);
  v("error", m.error);
  v("n_out_rows", m.n_out_rows);
  v("compute_seconds", m.compute_seconds);
  v("n_embedding_rows", m.n_embedding_rows);
  v.Array("page_scores", m.page_scores, kFloatWireBytes,
          [](auto& v, auto& score) { v("page_scores", score); });
  v("paging.resident_pages", m.paging.resident_pages);
  v("paging.tier_pages", m.paging.tier_pages);
  v("paging.page_ins", m.paging.page_ins);
  v("paging.page_outs", m.paging.page_outs);
  v("paging.bytes_paged", m.paging.bytes_paged);
  v("paging.paging_seconds", m.paging.paging_seconds);
  PageIdFields(v, "lost_pages", m.lost_pages);
  v.Enum("loss_code", m.loss_code, kStatusSentinel);
  v("loss_error", m.loss_error);
};

constexpr auto kPagesFields = [](auto& v, auto& m) { PageIdFields(v, "pages", m.pages); };

constexpr auto kPagesReplyFields = [](auto& v, auto& m) {
  v.Enum("status_code", m.status_code, kStatusSentinel);
  v("error", m.error);
  v("page_bytes", m.page_bytes);
};

constexpr auto kStateFields = [](auto& v, auto& m) {
  v("slot", m.slot);
  v("position", m.position);
};

constexpr auto kStateReplyFields = [](auto& v, auto& m) {
  v.Enum("status_code", m.status_code, kStatusSentinel);
  v("error", m.error);
  v("state_bytes", m.state_bytes);
};

constexpr auto kStatsReplyFields = [](auto& v, auto& m) {
  v("batches", m.batches);
  v("tokens", m.tokens);
  v("busy_seconds", m.busy_seconds);
  v("rss_bytes", m.rss_bytes);
};

// Checked size arithmetic for the region layout: false on overflow.
bool MulSize(size_t a, size_t b, size_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool AlignUp(size_t n, size_t& out) {
  if (n > SIZE_MAX - (kRegionAlign - 1)) return false;
  out = (n + kRegionAlign - 1) / kRegionAlign * kRegionAlign;
  return true;
}
bool FloatRows(int64_t rows, int64_t row_floats, size_t& out) {
  if (rows < 0 || row_floats < 0) return false;
  size_t floats = 0;
  return MulSize(static_cast<size_t>(rows), static_cast<size_t>(row_floats), floats) &&
         MulSize(floats, sizeof(float), out);
}

}  // namespace

const char* ShardMessageTypeName(ShardMessageType type) {
  switch (type) {
    case ShardMessageType::kHello:
      return "Hello";
    case ShardMessageType::kHelloReply:
      return "HelloReply";
    case ShardMessageType::kRunBatch:
      return "RunBatch";
    case ShardMessageType::kRunReply:
      return "RunReply";
    case ShardMessageType::kExportPages:
      return "ExportPages";
    case ShardMessageType::kImportPages:
      return "ImportPages";
    case ShardMessageType::kPagesReply:
      return "PagesReply";
    case ShardMessageType::kStatsRequest:
      return "StatsRequest";
    case ShardMessageType::kStatsReply:
      return "StatsReply";
    case ShardMessageType::kWorking:
      return "Working";
    case ShardMessageType::kExportState:
      return "ExportState";
    case ShardMessageType::kImportState:
      return "ImportState";
    case ShardMessageType::kStateReply:
      return "StateReply";
    case ShardMessageType::kSharedKv:
      return "SharedKv";
  }
  return "unknown";
}

bool ShardMessageTypeValid(uint32_t type) {
  return type >= static_cast<uint32_t>(ShardMessageType::kHello) &&
         type <= static_cast<uint32_t>(ShardMessageType::kSharedKv);
}

void EncodeHello(const ShardHello& m, std::vector<uint8_t>& out) {
  EncodeFields(kHelloFields, m, out);
}

Result<ShardHello> DecodeHello(std::span<const uint8_t> payload) {
  return DecodeFields<ShardHello>(kHelloFields, payload, "Hello");
}

void EncodeHelloReply(const ShardHelloReply& m, std::vector<uint8_t>& out) {
  EncodeFields(kHelloReplyFields, m, out);
}

Result<ShardHelloReply> DecodeHelloReply(std::span<const uint8_t> payload) {
  return DecodeFields<ShardHelloReply>(kHelloReplyFields, payload, "HelloReply");
}

void EncodeRunBatch(const ShardRunBatch& m, std::vector<uint8_t>& out) {
  EncodeFields(kRunBatchFields, m, out);
}

Result<ShardRunBatch> DecodeRunBatch(std::span<const uint8_t> payload) {
  return DecodeFields<ShardRunBatch>(kRunBatchFields, payload, "RunBatch");
}

void EncodeRunReply(const ShardRunReply& m, std::vector<uint8_t>& out) {
  EncodeFields(kRunReplyFields, m, out);
}

Result<ShardRunReply> DecodeRunReply(std::span<const uint8_t> payload) {
  return DecodeFields<ShardRunReply>(kRunReplyFields, payload, "RunReply");
}

void EncodePages(const ShardPages& m, std::vector<uint8_t>& out) {
  EncodeFields(kPagesFields, m, out);
}

Result<ShardPages> DecodePages(std::span<const uint8_t> payload) {
  return DecodeFields<ShardPages>(kPagesFields, payload, "Pages");
}

void EncodePagesReply(const ShardPagesReply& m, std::vector<uint8_t>& out) {
  EncodeFields(kPagesReplyFields, m, out);
}

Result<ShardPagesReply> DecodePagesReply(std::span<const uint8_t> payload) {
  return DecodeFields<ShardPagesReply>(kPagesReplyFields, payload, "PagesReply");
}

void EncodeStatsReply(const ShardStatsReply& m, std::vector<uint8_t>& out) {
  EncodeFields(kStatsReplyFields, m, out);
}

Result<ShardStatsReply> DecodeStatsReply(std::span<const uint8_t> payload) {
  return DecodeFields<ShardStatsReply>(kStatsReplyFields, payload, "StatsReply");
}

void EncodeState(const ShardState& m, std::vector<uint8_t>& out) {
  EncodeFields(kStateFields, m, out);
}

Result<ShardState> DecodeState(std::span<const uint8_t> payload) {
  return DecodeFields<ShardState>(kStateFields, payload, "State");
}

void EncodeStateReply(const ShardStateReply& m, std::vector<uint8_t>& out) {
  EncodeFields(kStateReplyFields, m, out);
}

Result<ShardStateReply> DecodeStateReply(std::span<const uint8_t> payload) {
  return DecodeFields<ShardStateReply>(kStateReplyFields, payload, "StateReply");
}

ShardRegionLayout ComputeRegionLayout(const ShardHello& hello, size_t page_bytes,
                                      int pages_per_transfer, size_t state_bytes) {
  size_t hidden = 0, logits = 0, embeddings = 0, pages = 0;
  if (!FloatRows(hello.max_batch_tokens, hello.n_embd, hidden) ||
      !FloatRows(hello.max_logit_rows, hello.n_vocab, logits) ||
      !FloatRows(hello.max_embedding_rows, hello.n_embd, embeddings) ||
      logits > SIZE_MAX - embeddings || pages_per_transfer < 0 ||
      !MulSize(page_bytes, static_cast<size_t>(pages_per_transfer), pages)) {
    return {};
  }
  ShardRegionLayout layout;
  if (!AlignUp(std::max({hidden, pages, state_bytes}), layout.input_bytes) ||
      !AlignUp(std::max({hidden, logits + embeddings, pages, state_bytes}), layout.output_bytes) ||
      layout.output_bytes > SIZE_MAX - layout.input_bytes) {
    return {};
  }
  layout.input_offset = 0;
  layout.output_offset = layout.input_bytes;
  layout.total_bytes = layout.input_bytes + layout.output_bytes;
  return layout;
}

}  // namespace shardlm
