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
constexpr size_t kBatchEntryWireBytes = 4 + 4 + 4 + 1 + 1;
constexpr size_t kPageIdWireBytes = 4;
constexpr size_t kPageCopyWireBytes = 2 * kPageIdWireBytes;
constexpr size_t kCountWireBytes = 4;  // an empty array is its count alone
static_assert(sizeof(PageId) == kPageIdWireBytes, "PageId travels as an i32");
static_assert(static_cast<uint32_t>(StatusCode::kSentinel) < 64, "status codes fit a u32");

// Region areas start on a cache line, so neither side's rows share a line with the other
// area and vector loads of a row start aligned.
constexpr size_t kRegionAlign = 64;

void WritePageIds(WireWriter& w, const std::vector<PageId>& pages) {
  w.Count(pages.size());
  for (PageId page : pages) w.I32(page);
}

std::vector<PageId> ReadPageIds(WireReader& r, const char* field) {
  std::vector<PageId> pages(r.Count(field, kPageIdWireBytes));
  for (PageId& page : pages) page = r.I32(field);
  return pages;
}

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
  }
  return "unknown";
}

bool ShardMessageTypeValid(uint32_t type) {
  return type >= static_cast<uint32_t>(ShardMessageType::kHello) &&
         type <= static_cast<uint32_t>(ShardMessageType::kWorking);
}

void EncodeHello(const ShardHello& m, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.U32(m.magic);
  w.U32(m.version);
  w.String(m.model_path);
  w.U64(m.fingerprint_hi);
  w.U64(m.fingerprint_lo);
  for (int32_t v :
       {m.layer_begin, m.layer_end, m.n_layers, m.n_embd, m.n_vocab, m.n_pages, m.page_tokens}) {
    w.I32(v);
  }
  w.U32(m.kv_type);
  w.I32(m.threads);
  w.I32(m.max_batch_tokens);
  w.I32(m.max_logit_rows);
  w.U64(m.shm_bytes);
  w.U32(m.heartbeat_ms);
  w.I32(m.max_embedding_rows);
}

Result<ShardHello> DecodeHello(std::span<const uint8_t> payload) {
  return DecodeWith<ShardHello>(payload, "Hello", [](WireReader& r) {
    ShardHello m;
    m.magic = r.U32("magic");
    m.version = r.U32("version");
    m.model_path = r.String("model_path");
    m.fingerprint_hi = r.U64("fingerprint_hi");
    m.fingerprint_lo = r.U64("fingerprint_lo");
    m.layer_begin = r.I32("layer_begin");
    m.layer_end = r.I32("layer_end");
    m.n_layers = r.I32("n_layers");
    m.n_embd = r.I32("n_embd");
    m.n_vocab = r.I32("n_vocab");
    m.n_pages = r.I32("n_pages");
    m.page_tokens = r.I32("page_tokens");
    m.kv_type = r.U32("kv_type");  // range-checked by the daemon (KvType)
    m.threads = r.I32("threads");
    m.max_batch_tokens = r.I32("max_batch_tokens");
    m.max_logit_rows = r.I32("max_logit_rows");
    m.shm_bytes = r.U64("shm_bytes");
    m.heartbeat_ms = r.U32("heartbeat_ms");
    m.max_embedding_rows = r.I32("max_embedding_rows");
    return m;
  });
}

void EncodeHelloReply(const ShardHelloReply& m, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.U32(m.version);
  w.Bool(m.accepted);
  w.String(m.error);
  w.String(m.device);
  w.I32(m.threads);
  w.U64(m.weight_bytes);
  w.U64(m.kv_bytes);
  w.U64(m.rss_bytes);
}

Result<ShardHelloReply> DecodeHelloReply(std::span<const uint8_t> payload) {
  return DecodeWith<ShardHelloReply>(payload, "HelloReply", [](WireReader& r) {
    ShardHelloReply m;
    m.version = r.U32("version");
    m.accepted = r.Bool("accepted");
    m.error = r.String("error");
    m.device = r.String("device");
    m.threads = r.I32("threads");
    m.weight_bytes = r.U64("weight_bytes");
    m.kv_bytes = r.U64("kv_bytes");
    m.rss_bytes = r.U64("rss_bytes");
    return m;
  });
}

void EncodeRunBatch(const ShardRunBatch& m, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.U64(m.batch_id);
  w.Count(m.entries.size());
  for (const BatchEntry& e : m.entries) {
    w.I32(e.token);
    w.I32(e.position);
    w.I32(e.slot);
    w.Bool(e.wants_logits);
    w.Bool(e.wants_embedding);
  }
  w.Count(m.pages_by_slot.size());
  for (const std::vector<PageId>& pages : m.pages_by_slot) WritePageIds(w, pages);
  w.Count(m.copies.size());
  for (const PageCopy& c : m.copies) {
    w.I32(c.src);
    w.I32(c.dst);
  }
}

Result<ShardRunBatch> DecodeRunBatch(std::span<const uint8_t> payload) {
  return DecodeWith<ShardRunBatch>(payload, "RunBatch", [](WireReader& r) {
    ShardRunBatch m;
    m.batch_id = r.U64("batch_id");
    m.entries.resize(r.Count("entries", kBatchEntryWireBytes));
    for (BatchEntry& e : m.entries) {
      e.token = r.I32("entries.token");
      e.position = r.I32("entries.position");
      e.slot = r.I32("entries.slot");
      e.wants_logits = r.Bool("entries.wants_logits");
      e.wants_embedding = r.Bool("entries.wants_embedding");
    }
    m.pages_by_slot.resize(r.Count("pages_by_slot", kCountWireBytes));
    for (std::vector<PageId>& pages : m.pages_by_slot) pages = ReadPageIds(r, "pages_by_slot");
    m.copies.resize(r.Count("copies", kPageCopyWireBytes));
    for (PageCopy& c : m.copies) {
      c.src = r.I32("copies.src");
      c.dst = r.I32("copies.dst");
    }
    return m;
  });
}

void EncodeRunReply(const ShardRunReply& m, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.U64(m.batch_id);
  w.U32(m.status_code);
  w.String(m.error);
  w.I32(m.n_out_rows);
  w.F64(m.compute_seconds);
  w.I32(m.n_embedding_rows);
}

Result<ShardRunReply> DecodeRunReply(std::span<const uint8_t> payload) {
  return DecodeWith<ShardRunReply>(payload, "RunReply", [](WireReader& r) {
    ShardRunReply m;
    m.batch_id = r.U64("batch_id");
    m.status_code = r.Enum("status_code", static_cast<uint32_t>(StatusCode::kSentinel));
    m.error = r.String("error");
    m.n_out_rows = r.I32("n_out_rows");
    m.compute_seconds = r.F64("compute_seconds");
    m.n_embedding_rows = r.I32("n_embedding_rows");
    return m;
  });
}

void EncodePages(const ShardPages& m, std::vector<uint8_t>& out) {
  WireWriter w(out);
  WritePageIds(w, m.pages);
}

Result<ShardPages> DecodePages(std::span<const uint8_t> payload) {
  return DecodeWith<ShardPages>(payload, "Pages", [](WireReader& r) {
    ShardPages m;
    m.pages = ReadPageIds(r, "pages");
    return m;
  });
}

void EncodePagesReply(const ShardPagesReply& m, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.U32(m.status_code);
  w.String(m.error);
  w.U64(m.page_bytes);
}

Result<ShardPagesReply> DecodePagesReply(std::span<const uint8_t> payload) {
  return DecodeWith<ShardPagesReply>(payload, "PagesReply", [](WireReader& r) {
    ShardPagesReply m;
    m.status_code = r.Enum("status_code", static_cast<uint32_t>(StatusCode::kSentinel));
    m.error = r.String("error");
    m.page_bytes = r.U64("page_bytes");
    return m;
  });
}

void EncodeStatsReply(const ShardStatsReply& m, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.U64(m.batches);
  w.U64(m.tokens);
  w.F64(m.busy_seconds);
  w.U64(m.rss_bytes);
}

Result<ShardStatsReply> DecodeStatsReply(std::span<const uint8_t> payload) {
  return DecodeWith<ShardStatsReply>(payload, "StatsReply", [](WireReader& r) {
    ShardStatsReply m;
    m.batches = r.U64("batches");
    m.tokens = r.U64("tokens");
    m.busy_seconds = r.F64("busy_seconds");
    m.rss_bytes = r.U64("rss_bytes");
    return m;
  });
}

ShardRegionLayout ComputeRegionLayout(const ShardHello& hello, size_t page_bytes,
                                      int pages_per_transfer) {
  size_t hidden = 0, logits = 0, embeddings = 0, pages = 0;
  if (!FloatRows(hello.max_batch_tokens, hello.n_embd, hidden) ||
      !FloatRows(hello.max_logit_rows, hello.n_vocab, logits) ||
      !FloatRows(hello.max_embedding_rows, hello.n_embd, embeddings) ||
      logits > SIZE_MAX - embeddings || pages_per_transfer < 0 ||
      !MulSize(page_bytes, static_cast<size_t>(pages_per_transfer), pages)) {
    return {};
  }
  ShardRegionLayout layout;
  if (!AlignUp(std::max(hidden, pages), layout.input_bytes) ||
      !AlignUp(std::max({hidden, logits + embeddings, pages}), layout.output_bytes) ||
      layout.output_bytes > SIZE_MAX - layout.input_bytes) {
    return {};
  }
  layout.input_offset = 0;
  layout.output_offset = layout.input_bytes;
  layout.total_bytes = layout.input_bytes + layout.output_bytes;
  return layout;
}

}  // namespace shardlm
