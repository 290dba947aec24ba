// Shard protocol: every message survives Encode → Decode exactly, and Decode of hostile
// bytes (random, truncated, corrupted, huge counts) returns an error or a valid value,
// never a crash or an unbounded allocation (this file also runs under ASan/UBSan).
#include "ipc/shard_protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>

namespace shardlm {
namespace {

ShardHello SampleHello() {
  ShardHello m;
  m.model_path = std::string(kMaxShardString, 'p');
  m.fingerprint_hi = 0xfedcba9876543210ull;
  m.fingerprint_lo = 0x0123456789abcdefull;
  m.layer_begin = 3;
  m.layer_end = 7;
  m.n_layers = 12;
  m.n_embd = 288;
  m.n_vocab = 32000;
  m.n_pages = 1024;
  m.page_tokens = 64;
  m.kv_type = 1;
  m.threads = -1;
  m.max_batch_tokens = 512;
  m.max_logit_rows = 64;
  m.shm_bytes = 1ull << 40;
  m.heartbeat_ms = 2500;
  m.max_embedding_rows = 300;
  m.n_frames = 96;
  m.tier_kind = 1;
  m.tier_dir = "/var/tmp/kv tier";
  m.key_summaries = true;
  m.shared_kv = {{3, 123456789}, {7, 0}};
  m.share_kv = true;
  return m;
}

ShardRunBatch SampleRunBatch() {
  ShardRunBatch m;
  m.batch_id = UINT64_MAX;
  m.entries = {
      {.token = 1, .position = 0, .slot = 0, .wants_logits = false, .wants_embedding = true},
      {.token = INT32_MAX, .position = 77, .slot = 2, .wants_logits = true},
      {.token = -5,
       .position = INT32_MIN,
       .slot = 1,
       .wants_logits = true,
       .wants_embedding = true},
      {.token = 3, .position = 4, .slot = 1}};
  m.entries[3].score_pages = true;
  m.pages_by_slot = {{4, 5, 6}, {}, {kNoPage, INT32_MAX}};
  m.copies = {{.src = 4, .dst = 9}, {.src = 0, .dst = 1}};
  m.paging.frees = {8, 2};
  m.paging.evicts = {5};
  m.paging.maps = {{.page = 11, .frame = 0}, {.page = INT32_MAX, .frame = 7}};
  m.attended_by_slot = {{0, 2}, {}, {1}};
  m.apply_only = true;
  m.frames_by_slot = {{3, kNoPage, 0}, {}, {INT32_MAX}};
  return m;
}

template <typename T>
std::vector<uint8_t> Encoded(const T& m, void (*encode)(const T&, std::vector<uint8_t>&)) {
  std::vector<uint8_t> out;
  encode(m, out);
  return out;
}

TEST(ShardProtocol, HelloRoundTrip) {
  ShardHello in = SampleHello();
  auto out = DecodeHello(Encoded(in, EncodeHello));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->magic, kShardMagic);
  EXPECT_EQ(out->version, kShardProtocolVersion);
  EXPECT_EQ(out->model_path, in.model_path);
  EXPECT_EQ(out->fingerprint_hi, in.fingerprint_hi);
  EXPECT_EQ(out->fingerprint_lo, in.fingerprint_lo);
  EXPECT_EQ(out->layer_begin, 3);
  EXPECT_EQ(out->layer_end, 7);
  EXPECT_EQ(out->n_layers, 12);
  EXPECT_EQ(out->n_embd, 288);
  EXPECT_EQ(out->n_vocab, 32000);
  EXPECT_EQ(out->n_pages, 1024);
  EXPECT_EQ(out->page_tokens, 64);
  EXPECT_EQ(out->kv_type, 1u);
  EXPECT_EQ(out->threads, -1);
  EXPECT_EQ(out->max_batch_tokens, 512);
  EXPECT_EQ(out->max_logit_rows, 64);
  EXPECT_EQ(out->shm_bytes, 1ull << 40);
  EXPECT_EQ(out->heartbeat_ms, 2500u);
  EXPECT_EQ(out->max_embedding_rows, 300);
  EXPECT_EQ(out->n_frames, 96);
  EXPECT_EQ(out->tier_kind, 1u);
  EXPECT_EQ(out->tier_dir, in.tier_dir);
  EXPECT_TRUE(out->key_summaries);
  ASSERT_EQ(out->shared_kv.size(), 2u);
  EXPECT_EQ(out->shared_kv[0].layer_end, 3);
  EXPECT_EQ(out->shared_kv[0].bytes, 123456789u);
  EXPECT_EQ(out->shared_kv[1].layer_end, 7);
  EXPECT_EQ(out->shared_kv[1].bytes, 0u);
  EXPECT_TRUE(out->share_kv);
}

TEST(ShardProtocol, WorkingIsAValidType) {
  EXPECT_TRUE(ShardMessageTypeValid(uint32_t(ShardMessageType::kWorking)));
  EXPECT_STREQ(ShardMessageTypeName(ShardMessageType::kWorking), "Working");
  EXPECT_TRUE(ShardMessageTypeValid(uint32_t(ShardMessageType::kWorking) + 1));  // ExportState
}

TEST(ShardProtocol, HelloReplyRoundTrip) {
  for (bool accepted : {false, true}) {
    ShardHelloReply in;
    in.accepted = accepted;
    in.error = accepted ? "" : "fingerprint mismatch";
    in.device = "cpu:1 (1 thread)";
    in.threads = 4;
    in.weight_bytes = 123456789012ull;
    in.kv_bytes = 42;
    in.rss_bytes = UINT64_MAX;
    auto out = DecodeHelloReply(Encoded(in, EncodeHelloReply));
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out->version, kShardProtocolVersion);
    EXPECT_EQ(out->accepted, accepted);
    EXPECT_EQ(out->error, in.error);
    EXPECT_EQ(out->device, in.device);
    EXPECT_EQ(out->threads, 4);
    EXPECT_EQ(out->weight_bytes, in.weight_bytes);
    EXPECT_EQ(out->kv_bytes, 42u);
    EXPECT_EQ(out->rss_bytes, UINT64_MAX);
  }
}

TEST(ShardProtocol, RunBatchRoundTrip) {
  ShardRunBatch in = SampleRunBatch();
  auto out = DecodeRunBatch(Encoded(in, EncodeRunBatch));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->batch_id, UINT64_MAX);
  ASSERT_EQ(out->entries.size(), in.entries.size());
  for (size_t i = 0; i < in.entries.size(); ++i) {
    EXPECT_EQ(out->entries[i].token, in.entries[i].token) << i;
    EXPECT_EQ(out->entries[i].position, in.entries[i].position) << i;
    EXPECT_EQ(out->entries[i].slot, in.entries[i].slot) << i;
    EXPECT_EQ(out->entries[i].wants_logits, in.entries[i].wants_logits) << i;
    EXPECT_EQ(out->entries[i].wants_embedding, in.entries[i].wants_embedding) << i;
    EXPECT_EQ(out->entries[i].score_pages, in.entries[i].score_pages) << i;
  }
  EXPECT_EQ(out->pages_by_slot, in.pages_by_slot);
  EXPECT_EQ(out->copies, in.copies);
  EXPECT_EQ(out->paging.frees, in.paging.frees);
  EXPECT_EQ(out->paging.evicts, in.paging.evicts);
  EXPECT_EQ(out->paging.maps, in.paging.maps);
  EXPECT_EQ(out->attended_by_slot, in.attended_by_slot);
  EXPECT_EQ(out->apply_only, in.apply_only);
  EXPECT_EQ(out->frames_by_slot, in.frames_by_slot);
}

TEST(ShardProtocol, EmptyRunBatchRoundTrip) {
  auto out = DecodeRunBatch(Encoded(ShardRunBatch{}, EncodeRunBatch));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_TRUE(out->entries.empty());
  EXPECT_TRUE(out->pages_by_slot.empty());
  EXPECT_TRUE(out->copies.empty());
}

TEST(ShardProtocol, RunReplyRoundTrip) {
  ShardRunReply in;
  in.batch_id = 99;
  in.status_code = static_cast<uint32_t>(StatusCode::kOutOfRange);
  in.error = std::string(kMaxShardString, 'e');
  in.n_out_rows = 17;
  in.compute_seconds = 0.1 + 0.2;  // not exactly representable in decimal
  in.n_embedding_rows = 5;
  // Scores travel as their bits: -infinity (an unscored page) and -0.0 too.
  in.page_scores = {-std::numeric_limits<float>::infinity(), -0.0f, 0.1f, -3.5e-8f};
  in.paging = {.resident_pages = 12,
               .tier_pages = int64_t(1) << 33,
               .page_ins = 3,
               .page_outs = 4,
               .bytes_paged = 5,
               .paging_seconds = 0.25};
  in.lost_pages = {7, 40000};
  in.loss_code = static_cast<uint32_t>(StatusCode::kIoError);
  in.loss_error = "the KV tier file 'f' ends inside page 7";
  auto out = DecodeRunReply(Encoded(in, EncodeRunReply));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->batch_id, 99u);
  EXPECT_EQ(out->status_code, in.status_code);
  EXPECT_EQ(out->error, in.error);
  EXPECT_EQ(out->n_out_rows, 17);
  EXPECT_EQ(std::memcmp(&out->compute_seconds, &in.compute_seconds, sizeof(double)), 0);
  EXPECT_EQ(out->n_embedding_rows, 5);
  ASSERT_EQ(out->page_scores.size(), in.page_scores.size());
  EXPECT_EQ(std::memcmp(out->page_scores.data(), in.page_scores.data(),
                        sizeof(float) * in.page_scores.size()),
            0);
  EXPECT_EQ(out->paging.resident_pages, 12);
  EXPECT_EQ(out->paging.tier_pages, int64_t(1) << 33);
  EXPECT_EQ(out->paging.page_ins, 3u);
  EXPECT_EQ(out->paging.page_outs, 4u);
  EXPECT_EQ(out->paging.bytes_paged, 5u);
  EXPECT_EQ(out->paging.paging_seconds, 0.25);
  EXPECT_EQ(out->lost_pages, in.lost_pages);
  EXPECT_EQ(out->loss_code, in.loss_code);
  EXPECT_EQ(out->loss_error, in.loss_error);
}

TEST(ShardProtocol, PagesRoundTrip) {
  for (std::vector<PageId> pages : {std::vector<PageId>{}, std::vector<PageId>{0, 7, -1, 3}}) {
    auto out = DecodePages(Encoded(ShardPages{pages}, EncodePages));
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out->pages, pages);
  }
}

TEST(ShardProtocol, PagesReplyRoundTrip) {
  ShardPagesReply in;
  in.status_code = static_cast<uint32_t>(StatusCode::kInvalidArgument);
  in.error = "page 7 out of range";
  in.page_bytes = 1u << 20;
  auto out = DecodePagesReply(Encoded(in, EncodePagesReply));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->status_code, in.status_code);
  EXPECT_EQ(out->error, in.error);
  EXPECT_EQ(out->page_bytes, in.page_bytes);
}

TEST(ShardProtocol, StateAndStateReplyRoundTrip) {
  auto state = DecodeState(Encoded(ShardState{.slot = 3, .position = 4096}, EncodeState));
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->slot, 3);
  EXPECT_EQ(state->position, 4096);
  ShardStateReply in{.status_code = static_cast<uint32_t>(StatusCode::kNotFound),
                     .error = "slot 3 holds no recurrent state at position 4096",
                     .state_bytes = 20u << 20};
  auto out = DecodeStateReply(Encoded(in, EncodeStateReply));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->status_code, in.status_code);
  EXPECT_EQ(out->error, in.error);
  EXPECT_EQ(out->state_bytes, in.state_bytes);
  EXPECT_TRUE(ShardMessageTypeValid(uint32_t(ShardMessageType::kStateReply)));
  EXPECT_FALSE(ShardMessageTypeValid(uint32_t(ShardMessageType::kSharedKv) + 1));
}

TEST(ShardProtocol, StatsReplyRoundTrip) {
  ShardStatsReply in{.batches = 5, .tokens = 1ull << 33, .busy_seconds = 1e-300, .rss_bytes = 7};
  auto out = DecodeStatsReply(Encoded(in, EncodeStatsReply));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->batches, 5u);
  EXPECT_EQ(out->tokens, 1ull << 33);
  EXPECT_EQ(out->busy_seconds, 1e-300);
  EXPECT_EQ(out->rss_bytes, 7u);
}

TEST(ShardProtocol, TrailingBytesAreAnError) {
  std::vector<uint8_t> bytes = Encoded(ShardPages{{1, 2}}, EncodePages);
  bytes.push_back(0);
  auto out = DecodePages(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidData);
  EXPECT_NE(out.status().message().find("trailing"), std::string::npos);
}

TEST(ShardProtocol, OverLongStringRefused) {
  ShardHelloReply in;
  std::vector<uint8_t> bytes = Encoded(in, EncodeHelloReply);
  // error string count sits after version (4) and accepted (1): claim one byte too many.
  uint32_t n = kMaxShardString + 1;
  std::memcpy(&bytes[5], &n, 4);
  bytes.insert(bytes.begin() + 9, n, 'x');
  auto out = DecodeHelloReply(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("error"), std::string::npos) << out.status().message();
}

TEST(ShardProtocol, OverLongStringsAreCutOnEncode) {
  ShardRunReply in;
  in.error = std::string(kMaxShardString - 1, 'a') + "\xc3\xa9 and more";  // é straddles
  auto out = DecodeRunReply(Encoded(in, EncodeRunReply));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->error, std::string(kMaxShardString - 1, 'a'));
}

TEST(ShardProtocol, BoolMustBeZeroOrOne) {
  ShardHelloReply in;
  std::vector<uint8_t> bytes = Encoded(in, EncodeHelloReply);
  bytes[4] = 2;  // accepted
  auto out = DecodeHelloReply(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("accepted"), std::string::npos) << out.status().message();
}

TEST(ShardProtocol, UnknownStatusCodeRefused) {
  ShardPagesReply in;
  in.status_code = static_cast<uint32_t>(StatusCode::kSentinel);
  auto out = DecodePagesReply(Encoded(in, EncodePagesReply));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("status_code"), std::string::npos);
}

TEST(ShardProtocol, NonFiniteSecondsRefused) {
  ShardStatsReply in;
  in.busy_seconds = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(DecodeStatsReply(Encoded(in, EncodeStatsReply)).ok());
  in.busy_seconds = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(DecodeStatsReply(Encoded(in, EncodeStatsReply)).ok());
}

TEST(ShardProtocol, HugeCountsRefusedBeforeAllocating) {
  // A RunBatch that claims 2^32-1 entries in a 12-byte payload.
  std::vector<uint8_t> bytes(8, 0);
  for (int i = 0; i < 4; ++i) bytes.push_back(0xff);
  auto out = DecodeRunBatch(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("entries"), std::string::npos) << out.status().message();
  // Many empty slots would be legal, but not more than the bytes left can describe.
  std::vector<uint8_t> slots(8 + 4, 0);  // batch_id, 0 entries
  for (int i = 0; i < 4; ++i) slots.push_back(0xff);
  EXPECT_FALSE(DecodeRunBatch(slots).ok());
  EXPECT_FALSE(DecodePages(std::vector<uint8_t>{0xff, 0xff, 0xff, 0x7f}).ok());
}

// Every decoder, so the fuzz loops below cover them all.
using Decoder = std::function<bool(std::span<const uint8_t>)>;
std::vector<std::pair<std::vector<uint8_t>, Decoder>> ValidEncodings() {
  auto ok = [](auto decode) {
    return Decoder([decode](std::span<const uint8_t> b) { return decode(b).ok(); });
  };
  ShardRunReply run_reply{
      .batch_id = 1, .status_code = 0, .error = "x", .n_out_rows = 2, .compute_seconds = 0.5};
  return {
      {Encoded(SampleHello(), EncodeHello), ok(DecodeHello)},
      {Encoded(ShardHelloReply{.error = "e", .device = "cpu"}, EncodeHelloReply),
       ok(DecodeHelloReply)},
      {Encoded(SampleRunBatch(), EncodeRunBatch), ok(DecodeRunBatch)},
      {Encoded(run_reply, EncodeRunReply), ok(DecodeRunReply)},
      {Encoded(ShardPages{{1, 2, 3}}, EncodePages), ok(DecodePages)},
      {Encoded(ShardPagesReply{.status_code = 0, .error = "e", .page_bytes = 4}, EncodePagesReply),
       ok(DecodePagesReply)},
      {Encoded(ShardStatsReply{.batches = 1, .tokens = 2, .busy_seconds = 3, .rss_bytes = 4},
               EncodeStatsReply),
       ok(DecodeStatsReply)},
      {Encoded(ShardState{.slot = 1, .position = 32}, EncodeState), ok(DecodeState)},
      {Encoded(ShardStateReply{.status_code = 0, .error = "e", .state_bytes = 8}, EncodeStateReply),
       ok(DecodeStateReply)},
  };
}

TEST(ShardProtocolFuzz, EveryTruncationIsAnError) {
  for (auto& [bytes, decode] : ValidEncodings()) {
    ASSERT_TRUE(decode(bytes));
    for (size_t len = 0; len < bytes.size(); ++len) {
      EXPECT_FALSE(decode(std::span<const uint8_t>(bytes.data(), len))) << "length " << len;
    }
  }
}

TEST(ShardProtocolFuzz, SingleByteCorruptionsNeverCrash) {
  std::mt19937 rng(1234);
  int decoded = 0, refused = 0;
  for (auto& [bytes, decode] : ValidEncodings()) {
    // The Hello carries a 4 KiB path: corrupt every byte of the other messages, and a
    // stride of the Hello.
    size_t stride = bytes.size() > 1000 ? 7 : 1;
    for (size_t i = 0; i < bytes.size(); i += stride) {
      for (uint8_t value :
           {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x80}, static_cast<uint8_t>(rng())}) {
        std::vector<uint8_t> corrupt = bytes;
        corrupt[i] = value;
        (decode(corrupt) ? decoded : refused)++;
      }
    }
  }
  // Both outcomes happen: corrupting a value decodes, corrupting a count is refused.
  EXPECT_GT(decoded, 0);
  EXPECT_GT(refused, 0);
}

TEST(ShardProtocolFuzz, RandomBytesNeverCrash) {
  std::mt19937 rng(42);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> bytes(rng() % 96);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() % 4 == 0 ? rng() : rng() % 3);
    for (auto& [valid, decode] : ValidEncodings()) decode(bytes);
  }
}

TEST(ShardRegionLayout, AreasAreAlignedAndLargeEnough) {
  ShardHello hello = SampleHello();  // 512 tokens × 288, 64 logit rows × 32000
  ShardRegionLayout layout = ComputeRegionLayout(hello, 100000, 3);
  EXPECT_EQ(layout.input_offset, 0u);
  EXPECT_EQ(layout.input_bytes % 64, 0u);
  EXPECT_GE(layout.input_bytes, 512u * 288 * 4);
  EXPECT_GE(layout.input_bytes, 300000u);
  EXPECT_EQ(layout.output_offset % 64, 0u);
  EXPECT_GE(layout.output_offset, layout.input_bytes);
  EXPECT_GE(layout.output_bytes, 64u * 32000 * 4);
  EXPECT_EQ(layout.total_bytes, layout.output_offset + layout.output_bytes);
  // Pages dominate when transfers are big.
  EXPECT_GE(ComputeRegionLayout(hello, 1u << 20, 16).output_bytes, 16u << 20);
  // Both areas hold one slot's recurrent state, for export and import.
  const ShardRegionLayout with_state = ComputeRegionLayout(hello, 100000, 3, 40u << 20);
  EXPECT_GE(with_state.input_bytes, 40u << 20);
  EXPECT_GE(with_state.output_bytes, 40u << 20);
}

// The last stage writes its logits rows and then its embedding rows: the output area holds
// both at their most at once.
TEST(ShardRegionLayout, OutputHoldsLogitsAndEmbeddingRowsTogether) {
  ShardHello hello = SampleHello();  // 64 logit rows × 32000, 300 embedding rows × 288
  EXPECT_GE(ComputeRegionLayout(hello, 1, 1).output_bytes, (64u * 32000 + 300u * 288) * 4);
  hello.max_embedding_rows = 0;
  EXPECT_LT(ComputeRegionLayout(hello, 1, 1).output_bytes, (64u * 32000 + 300u * 288) * 4);
}

TEST(ShardRegionLayout, AbsurdSizesGiveZeroInsteadOfOverflowing) {
  ShardHello hello = SampleHello();
  EXPECT_EQ(ComputeRegionLayout(hello, SIZE_MAX / 2, 3).total_bytes, 0u);
  EXPECT_EQ(ComputeRegionLayout(hello, SIZE_MAX - 10, 1).total_bytes, 0u);
  EXPECT_EQ(ComputeRegionLayout(hello, 1, -1).total_bytes, 0u);
  ShardHello negative = hello;
  negative.n_embd = -1;
  EXPECT_EQ(ComputeRegionLayout(negative, 1, 1).total_bytes, 0u);
  ShardHello huge = hello;
  huge.max_batch_tokens = INT32_MAX;
  huge.n_embd = INT32_MAX;
  huge.max_logit_rows = INT32_MAX;
  huge.n_vocab = INT32_MAX;
  // (2^31)^2 floats of 4 bytes fit size_t alone, but not input and output together.
  EXPECT_EQ(ComputeRegionLayout(huge, 1, 1).total_bytes, 0u);
}

}  // namespace
}  // namespace shardlm
