// GgufFile: every fixture parses and matches models.json; hostile and broken files fail with
// messages that name the file and the key or tensor; typed getters reject wrong types.
#include "gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "gguf_test_util.h"
#include "support/fixtures.h"

namespace shardlm {
namespace {

using ::shardlm::testing::V;

using ::shardlm::testing::RawGguf;
using ::shardlm::testing::SmallGgufFile;

std::string Upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// Returns the parse error message, or "" if the bytes parse.
std::string ParseError(const std::vector<uint8_t>& bytes, std::string name = "t.gguf") {
  auto file = GgufFile::FromBytes(bytes, std::move(name));
  return file.ok() ? "" : file.status().message();
}

void ExpectMetadataMatches(const GgufFile& file, const nlohmann::json& expected) {
  for (const auto& [key, value] : expected.items()) {
    SCOPED_TRACE(key);
    if (value.is_string()) {
      auto s = file.GetString(key);
      ASSERT_TRUE(s.ok()) << s.status().message();
      EXPECT_EQ(*s, value.get<std::string>());
    } else if (value.is_boolean()) {
      auto b = file.GetBool(key);
      ASSERT_TRUE(b.ok()) << b.status().message();
      EXPECT_EQ(*b, value.get<bool>());
    } else if (value.is_number()) {
      auto f = file.GetFloat(key);
      ASSERT_TRUE(f.ok()) << f.status().message();
      EXPECT_DOUBLE_EQ(*f, value.get<double>());
    }
  }
}

TEST(GgufFileTest, EveryFixtureMatchesModelsJson) {
  SHARDLM_REQUIRE_FIXTURES();
  nlohmann::json models = testing::ReadJsonFile(testing::FixturePath("models.json"));
  ASSERT_GE(models.size(), 10u);
  for (const auto& [file_name, model] : models.items()) {
    SCOPED_TRACE(file_name);
    auto file = GgufFile::Open(testing::FixturePath(file_name));
    ASSERT_TRUE(file.ok()) << file.status().message();
    const GgufFile& f = **file;
    EXPECT_EQ(f.file_size(), model["size_bytes"].get<uint64_t>());
    EXPECT_EQ(V(f.GetString("general.architecture")), model["arch"].get<std::string>());
    auto tokens = f.GetArray("tokenizer.ggml.tokens", GgufValueType::kString);
    ASSERT_TRUE(tokens.ok()) << tokens.status().message();
    EXPECT_EQ((*tokens)->strings.size(), model["n_vocab"].get<size_t>());
    ExpectMetadataMatches(f, model["metadata"]);
    ASSERT_EQ(f.tensors().size(), model["tensors"].size());
    for (const auto& [tensor_name, expected] : model["tensors"].items()) {
      const GgufTensorInfo* t = f.FindTensor(tensor_name);
      ASSERT_NE(t, nullptr) << tensor_name;
      EXPECT_EQ(Upper(GgmlTypeName(static_cast<uint32_t>(t->type))),
                expected["type"].get<std::string>())
          << tensor_name;
      EXPECT_EQ(t->ne, expected["ne"].get<std::vector<int64_t>>()) << tensor_name;
      EXPECT_GE(t->data, f.header_bytes().data() + f.data_offset());
    }
  }
}

TEST(GgufFileTest, ReadsAllValueKindsOfSmallFile) {
  std::vector<uint8_t> bytes = SmallGgufFile();
  auto file = GgufFile::FromBytes(bytes, "small.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(V(f.GetUint("llama.block_count")), 2u);
  EXPECT_EQ(V(f.GetInt("llama.block_count")), 2);
  EXPECT_FLOAT_EQ(V(f.GetFloat("llama.rope.freq_base")), 10000.0);
  EXPECT_TRUE(V(f.GetBool("tokenizer.ggml.add_bos_token")));
  auto types = f.GetArray("tokenizer.ggml.token_type", GgufValueType::kInt32);
  ASSERT_TRUE(types.ok());
  EXPECT_EQ((*types)->ints, (std::vector<int64_t>{1, 1, 3}));
  const GgufTensorInfo* b = f.FindTensor("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, GgmlType::kQ8_0);
  EXPECT_EQ(b->n_bytes, 34u * 3);
  EXPECT_EQ(b->rows(), 3);
  EXPECT_EQ(b->data[0], 0x11);
  EXPECT_EQ((b->data - bytes.data()) % 32, 0);
  EXPECT_EQ(f.FindTensor("missing"), nullptr);
}

TEST(GgufFileTest, GettersRejectWrongTypesAndMissingKeys) {
  std::vector<uint8_t> bytes = SmallGgufFile();
  auto file = GgufFile::FromBytes(bytes, "small.gguf");
  ASSERT_TRUE(file.ok());
  const GgufFile& f = **file;
  auto s = f.GetUint("general.architecture");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidData);
  EXPECT_NE(s.status().message().find("small.gguf"), std::string::npos);
  EXPECT_NE(s.status().message().find("'general.architecture' is string"), std::string::npos)
      << s.status().message();
  EXPECT_FALSE(f.GetString("llama.block_count").ok());
  EXPECT_FALSE(f.GetBool("llama.block_count").ok());
  EXPECT_FALSE(f.GetFloat("tokenizer.ggml.tokens").ok());
  auto arr = f.GetArray("tokenizer.ggml.tokens", GgufValueType::kInt32);
  ASSERT_FALSE(arr.ok());
  EXPECT_NE(arr.status().message().find("array of string"), std::string::npos);
  EXPECT_TRUE(f.GetArray("tokenizer.ggml.tokens", GgufValueType::kSentinel).ok());
  auto missing = f.GetUint("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(V(f.GetUintOr("nope", 7)), 7u);
  EXPECT_FALSE(f.GetUintOr("general.architecture", 7).ok());
  EXPECT_TRUE(V(f.GetBoolOr("nope", true)));
  EXPECT_DOUBLE_EQ(V(f.GetFloatOr("nope", 0.5)), 0.5);
}

TEST(GgufFileTest, SignedAndUnsignedRangeChecks) {
  RawGguf raw;
  raw.Header(0, 2).Str("neg").U32(5).U32(static_cast<uint32_t>(-3));  // int32 -3
  raw.Str("big").U32(10).U64(~0ull);                                  // uint64 max
  auto file = GgufFile::FromBytes(raw.bytes, "r.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(V((*file)->GetInt("neg")), -3);
  EXPECT_FALSE((*file)->GetUint("neg").ok());
  EXPECT_EQ(V((*file)->GetUint("big")), ~0ull);
  EXPECT_FALSE((*file)->GetInt("big").ok());
}

TEST(GgufFileTest, RejectsBadMagicAndVersions) {
  std::vector<uint8_t> bytes = SmallGgufFile();
  std::vector<uint8_t> bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(ParseError(bad, "m.gguf").find("m.gguf: not a GGUF file"), std::string::npos);
  for (uint32_t version : {0u, 1u, 4u, 0xffffffffu}) {
    bad = bytes;
    std::memcpy(bad.data() + 4, &version, 4);
    std::string err = ParseError(bad);
    EXPECT_NE(err.find(fmt::format("GGUF version {} is not supported", version)), std::string::npos)
        << err;
  }
  RawGguf v2;
  v2.Header(0, 1, 2).Str("k").U32(4).U32(9);
  EXPECT_EQ(ParseError(v2.bytes), "");
  EXPECT_NE(ParseError({}).find("truncated"), std::string::npos);
}

TEST(GgufFileTest, EveryTruncationFailsCleanly) {
  std::vector<uint8_t> bytes = SmallGgufFile();
  // Every prefix that cuts into the header or a tensor's data fails; only the padding after
  // the last tensor may be missing.
  auto whole = GgufFile::FromBytes(bytes, "whole.gguf");
  ASSERT_TRUE(whole.ok());
  const GgufTensorInfo& last = (*whole)->tensors().back();
  size_t data_end = static_cast<size_t>(last.data - bytes.data()) + last.n_bytes;
  ASSERT_LT(data_end, bytes.size());
  for (size_t n = 0; n < data_end; ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    std::string err = ParseError(prefix, "cut.gguf");
    ASSERT_FALSE(err.empty()) << "prefix of " << n << " bytes parsed";
    ASSERT_EQ(err.rfind("cut.gguf: ", 0), 0u) << err;
  }
  EXPECT_EQ(ParseError({bytes.begin(), bytes.begin() + data_end}), "");
}

TEST(GgufFileTest, HugeCountsFailWithoutAllocating) {
  RawGguf kv;
  kv.Header(0, 1ull << 60);
  EXPECT_NE(ParseError(kv.bytes).find("metadata count 1152921504606846976 cannot fit"),
            std::string::npos);
  RawGguf tensors;
  tensors.Header(1ull << 60, 0);
  EXPECT_NE(ParseError(tensors.bytes).find("tensor count"), std::string::npos);
  RawGguf str;
  str.Header(0, 1).U64(~0ull).Zeros(32);
  EXPECT_NE(ParseError(str.bytes).find("string length 18446744073709551615"), std::string::npos);
  RawGguf arr;
  arr.Header(0, 1).Str("tokenizer.ggml.tokens").U32(9).U32(8).U64(1ull << 61);
  std::string err = ParseError(arr.bytes);
  EXPECT_NE(err.find("key 'tokenizer.ggml.tokens': array of 2305843009213693952 string"),
            std::string::npos)
      << err;
}

TEST(GgufFileTest, CapsArrayElementsPerFile) {
  // 2^26 + 1 one-byte elements: small on disk, 512 MiB once decoded, so refused.
  RawGguf raw;
  raw.Header(0, 1).Str("big").U32(9).U32(0).U64((1ull << 26) + 1).Zeros((1ull << 26) + 1);
  std::string err = ParseError(raw.bytes);
  EXPECT_NE(err.find("key 'big': array of 67108865 elements exceeds the limit"), std::string::npos)
      << err;
}

TEST(GgufFileTest, RejectsBadMetadata) {
  RawGguf nested;
  nested.Header(0, 1).Str("x").U32(9).U32(9).U64(1);
  EXPECT_NE(ParseError(nested.bytes).find("key 'x': nested arrays"), std::string::npos);
  RawGguf type;
  type.Header(0, 1).Str("x").U32(13).U32(0);
  EXPECT_NE(ParseError(type.bytes).find("key 'x': unknown value type 13"), std::string::npos);
  RawGguf dup;
  dup.Header(0, 2).Str("x").U32(4).U32(1).Str("x").U32(4).U32(2);
  EXPECT_NE(ParseError(dup.bytes).find("duplicate metadata key 'x'"), std::string::npos);
  RawGguf boolean;
  boolean.Header(0, 1).Str("b").U32(7).U8(2);
  EXPECT_NE(ParseError(boolean.bytes).find("key 'b': bool value 2"), std::string::npos);
  for (uint32_t alignment : {0u, 3u, 48u}) {
    RawGguf align;
    align.Header(0, 1).Str("general.alignment").U32(4).U32(alignment);
    EXPECT_NE(ParseError(align.bytes).find("not a power of two"), std::string::npos) << alignment;
  }
  RawGguf align_type;
  align_type.Header(0, 1).Str("general.alignment").U32(8).Str("32");
  EXPECT_NE(ParseError(align_type.bytes).find("'general.alignment' is string"), std::string::npos);
}

// A file with one tensor info (name "w") and `data_bytes` bytes of data after padding.
std::vector<uint8_t> OneTensor(std::vector<int64_t> ne, uint32_t type, uint64_t offset,
                               size_t data_bytes, uint32_t n_dims = 0) {
  RawGguf raw;
  raw.Header(1, 0).Str("blk.0.attn_q.weight");
  raw.U32(n_dims ? n_dims : static_cast<uint32_t>(ne.size()));
  for (int64_t d : ne) raw.I64(d);
  raw.U32(type).U64(offset).PadTo(32).Zeros(data_bytes);
  return raw.bytes;
}

TEST(GgufFileTest, RejectsBadTensorInfos) {
  EXPECT_EQ(ParseError(OneTensor({4, 2}, 0, 0, 32)), "");
  EXPECT_EQ(ParseError(OneTensor({0, 2}, 0, 0, 0)), "");  // empty tensors are legal
  std::string err = ParseError(OneTensor({4, 2}, 0, 0, 31), "m.gguf");
  EXPECT_EQ(err, "m.gguf: tensor 'blk.0.attn_q.weight': data [96, 128) exceeds file size 127");
  err = ParseError(OneTensor({4, 2}, 0, 16, 64));
  EXPECT_NE(err.find("offset 16 is not a multiple of the alignment 32"), std::string::npos);
  err = ParseError(OneTensor({4, 2}, 0, 1ull << 63, 64));
  EXPECT_NE(err.find("data offset 9223372036854775808 is beyond"), std::string::npos) << err;
  err = ParseError(OneTensor({4, 2}, 4, 0, 64));
  EXPECT_NE(
      err.find("tensor 'blk.0.attn_q.weight': unsupported tensor type type 4 (q4_2 (removed))"),
      std::string::npos)
      << err;
  err = ParseError(OneTensor({4, 2}, 77, 0, 64));
  EXPECT_NE(err.find("unsupported tensor type type 77"), std::string::npos) << err;
  err = ParseError(OneTensor({1ll << 32, 1ll << 32}, 0, 0, 64));
  EXPECT_NE(err.find("overflows the element count"), std::string::npos) << err;
  err = ParseError(OneTensor({0, 1ll << 40, 1ll << 40}, 0, 0, 64));
  EXPECT_NE(err.find("overflows the element count"), std::string::npos) << err;
  err = ParseError(OneTensor({1ll << 40, 1ll << 22}, 0, 0, 64));
  EXPECT_NE(err.find("overflows the byte size"), std::string::npos) << err;
  err = ParseError(OneTensor({-1, 2}, 0, 0, 64));
  EXPECT_NE(err.find("ne[0] = -1 is negative"), std::string::npos) << err;
  err = ParseError(OneTensor({48}, 8, 0, 64));
  EXPECT_NE(err.find("ne[0] = 48 is not a multiple of the q8_0 block size 32"), std::string::npos)
      << err;
  err = ParseError(OneTensor({}, 0, 0, 64, 5));
  EXPECT_NE(err.find("n_dims 5 is not in [1, 4]"), std::string::npos) << err;
}

TEST(GgufFileTest, RejectsDuplicateAndOverlappingTensors) {
  RawGguf dup;
  dup.Header(2, 0);
  dup.Str("w").U32(1).I64(8).U32(0).U64(0);
  dup.Str("w").U32(1).I64(8).U32(0).U64(32);
  dup.PadTo(32).Zeros(64);
  EXPECT_NE(ParseError(dup.bytes).find("duplicate tensor name 'w'"), std::string::npos);
  RawGguf overlap;
  overlap.Header(2, 0);
  overlap.Str("a").U32(1).I64(16).U32(0).U64(0);
  overlap.Str("b").U32(1).I64(8).U32(0).U64(32);
  overlap.PadTo(32).Zeros(96);
  std::string err = ParseError(overlap.bytes);
  EXPECT_NE(err.find("tensor 'b' at data offset 32 overlaps tensor 'a' [0, 64)"), std::string::npos)
      << err;
}

TEST(GgufFileTest, OpenReportsMissingFile) {
  auto file = GgufFile::Open("/nonexistent/x.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("/nonexistent/x.gguf"), std::string::npos);
}

}  // namespace
}  // namespace shardlm
