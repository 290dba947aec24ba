// GgufWriter: write → read gives back identical metadata and tensors (also when re-writing a
// fixture); bad tensors are refused; file writes are atomic; fingerprints react to content.
#include "gguf/gguf_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gguf/fingerprint.h"
#include "gguf/gguf_file.h"
#include "gguf_test_util.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace {

using ::shardlm::testing::V;

void ExpectSameValue(const GgufValue& a, const GgufValue& b, std::string_view key) {
  SCOPED_TRACE(std::string(key));
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.array_type, b.array_type);
  EXPECT_EQ(a.scalar, b.scalar);
  EXPECT_EQ(a.ints, b.ints);
  EXPECT_EQ(a.floats, b.floats);
  EXPECT_EQ(a.strings, b.strings);
  EXPECT_EQ(a.array_size, b.array_size);
}

void ExpectSameFile(const GgufFile& a, const GgufFile& b) {
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t i = 0; i < a.metadata().size(); ++i) {
    EXPECT_EQ(a.metadata()[i].key, b.metadata()[i].key);
    ExpectSameValue(a.metadata()[i].value, b.metadata()[i].value, a.metadata()[i].key);
  }
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const GgufTensorInfo& ta = a.tensors()[i];
    const GgufTensorInfo& tb = b.tensors()[i];
    EXPECT_EQ(ta.name, tb.name);
    EXPECT_EQ(ta.type, tb.type);
    EXPECT_EQ(ta.ne, tb.ne);
    ASSERT_EQ(ta.n_bytes, tb.n_bytes);
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.n_bytes), 0) << ta.name;
  }
}

TEST(GgufWriterTest, EveryValueTypeRoundTrips) {
  GgufWriter w;
  w.SetUint8("u8", 200);
  w.SetInt8("i8", -100);
  w.SetUint16("u16", 60000);
  w.SetInt16("i16", -30000);
  w.SetUint32("u32", 4000000000u);
  w.SetInt32("i32", -2000000000);
  w.SetUint64("u64", ~0ull);
  w.SetInt64("i64", -(1ll << 62));
  w.SetFloat32("f32", 0.25f);
  w.SetFloat64("f64", 1e-300);
  w.SetBool("b", true);
  w.SetString("s", "héllo");
  w.SetString("empty", "");
  std::vector<int64_t> ints = {-1, 0, 7};
  ASSERT_TRUE(w.SetIntArray("ai8", GgufValueType::kInt8, ints).ok());
  ASSERT_TRUE(w.SetIntArray("ai64", GgufValueType::kInt64, ints).ok());
  std::vector<int64_t> bools = {1, 0};
  ASSERT_TRUE(w.SetIntArray("ab", GgufValueType::kBool, bools).ok());
  std::vector<double> floats = {0.5, -2.0};
  ASSERT_TRUE(w.SetFloatArray("af32", GgufValueType::kFloat32, floats).ok());
  ASSERT_TRUE(w.SetFloatArray("af64", GgufValueType::kFloat64, floats).ok());
  std::vector<std::string> strings = {"x", "", "zz"};
  w.SetStringArray("as", strings);
  EXPECT_FALSE(w.SetIntArray("bad", GgufValueType::kString, ints).ok());
  EXPECT_FALSE(w.SetFloatArray("bad", GgufValueType::kInt32, floats).ok());
  w.SetUint32("u32", 5);  // replaces, keeps position

  auto bytes = w.WriteToBytes();
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size(), w.FileSize());
  auto file = GgufFile::FromBytes(*bytes, "rt.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const GgufFile& f = **file;
  ASSERT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(f.metadata()[4].key, "u32");
  EXPECT_EQ(V(f.GetUint("u8")), 200u);
  EXPECT_EQ(V(f.GetInt("i8")), -100);
  EXPECT_EQ(V(f.GetUint("u16")), 60000u);
  EXPECT_EQ(V(f.GetInt("i16")), -30000);
  EXPECT_EQ(V(f.GetUint("u32")), 5u);
  EXPECT_EQ(V(f.GetInt("i32")), -2000000000);
  EXPECT_EQ(V(f.GetUint("u64")), ~0ull);
  EXPECT_EQ(V(f.GetInt("i64")), -(1ll << 62));
  EXPECT_EQ(V(f.GetFloat("f32")), 0.25);
  EXPECT_EQ(V(f.GetFloat("f64")), 1e-300);
  EXPECT_TRUE(V(f.GetBool("b")));
  EXPECT_EQ(V(f.GetString("s")), "héllo");
  EXPECT_EQ(V(f.GetString("empty")), "");
  EXPECT_EQ((V(f.GetArray("ai8", GgufValueType::kInt8)))->ints, ints);
  EXPECT_EQ((V(f.GetArray("ai64", GgufValueType::kInt64)))->ints, ints);
  EXPECT_EQ((V(f.GetArray("ab", GgufValueType::kBool)))->ints, bools);
  EXPECT_EQ((V(f.GetArray("af32", GgufValueType::kFloat32)))->floats, floats);
  EXPECT_EQ((V(f.GetArray("af64", GgufValueType::kFloat64)))->floats, floats);
  const GgufValue* as = V(f.GetArray("as", GgufValueType::kString));
  EXPECT_EQ(as->strings, (std::vector<std::string_view>{"x", "", "zz"}));
}

TEST(GgufWriterTest, TensorsRoundTripAligned) {
  std::vector<uint8_t> bytes = testing::SmallGgufFile();
  auto file = GgufFile::FromBytes(bytes, "small.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ((*file)->tensors().size(), 3u);
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    EXPECT_EQ(t.offset % GgufWriter::kAlignment, 0u) << t.name;
  }
  const GgufTensorInfo* a = (*file)->FindTensor("a.weight");
  ASSERT_NE(a, nullptr);
  for (size_t i = 0; i < a->n_bytes; ++i) ASSERT_EQ(a->data[i], static_cast<uint8_t>(i * 7));
}

TEST(GgufWriterTest, RefusesBadTensors) {
  GgufWriter w;
  std::vector<uint8_t> data(64);
  std::vector<int64_t> ne = {16};
  EXPECT_TRUE(w.AddTensor("t", GgmlType::kF32, ne, std::span<const uint8_t>(data)).ok());
  Status dup = w.AddTensor("t", GgmlType::kF32, ne, std::span<const uint8_t>(data));
  EXPECT_NE(dup.message().find("duplicate tensor name 't'"), std::string::npos);
  Status size = w.AddTensor("u", GgmlType::kF16, ne, std::span<const uint8_t>(data));
  EXPECT_NE(size.message().find("64 bytes given, shape and type need 32"), std::string::npos)
      << size.message();
  Status block = w.AddTensor("v", GgmlType::kQ4_0, ne, std::span<const uint8_t>(data));
  EXPECT_NE(block.message().find("not a multiple of the q4_0 block size 32"), std::string::npos);
  Status type = w.AddTensor("x", static_cast<GgmlType>(16), ne, std::span<const uint8_t>(data));
  EXPECT_NE(type.message().find("iq2_xxs"), std::string::npos);
  EXPECT_EQ(w.n_tensors(), 1u);
}

TEST(GgufWriterTest, FillCallbackTensorsAndErrors) {
  GgufWriter w;
  std::vector<int64_t> ne = {32, 2};
  ASSERT_TRUE(w.AddTensor("f", GgmlType::kF16, ne, [](std::span<uint8_t> dst) {
                 for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<uint8_t>(i);
                 return Status::Ok();
               }).ok());
  auto bytes = w.WriteToBytes();
  ASSERT_TRUE(bytes.ok());
  auto file = GgufFile::FromBytes(*bytes, "fill.gguf");
  ASSERT_TRUE(file.ok());
  const GgufTensorInfo* t = (*file)->FindTensor("f");
  ASSERT_EQ(t->n_bytes, 128u);
  EXPECT_EQ(t->data[127], 127);

  GgufWriter failing;
  ASSERT_TRUE(failing
                  .AddTensor("g", GgmlType::kF32, ne,
                             [](std::span<uint8_t>) { return InvalidArgument("no data"); })
                  .ok());
  auto failed = failing.WriteToBytes();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "tensor 'g': no data");
}

TEST(GgufWriterTest, WriteToFileIsAtomicAndReadable) {
  testing_util::TempDir dir("shardlm_gguf_writer");
  std::string path = dir.File("out.gguf");
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  ASSERT_TRUE(w.WriteToFile(path).ok());
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(V((*file)->GetString("general.architecture")), "llama");
  // A failing write leaves the old file intact and no temp file behind.
  GgufWriter failing;
  std::vector<int64_t> ne = {8};
  ASSERT_TRUE(failing
                  .AddTensor("g", GgmlType::kF32, ne,
                             [](std::span<uint8_t>) { return InvalidArgument("boom"); })
                  .ok());
  EXPECT_FALSE(failing.WriteToFile(path).ok());
  auto again = GgufFile::Open(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
  EXPECT_FALSE(w.WriteToFile(dir.File("no/such/dir/x.gguf")).ok());
}

// Copies every key and tensor of `src` into a writer.
GgufWriter CopyOf(const GgufFile& src) {
  GgufWriter w;
  for (const GgufKeyValue& kv : src.metadata()) EXPECT_TRUE(w.SetValue(kv.key, kv.value).ok());
  for (const GgufTensorInfo& t : src.tensors()) {
    Status st = w.AddTensor(t.name, t.type, t.ne, std::span<const uint8_t>(t.data, t.n_bytes));
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return w;
}

TEST(GgufWriterTest, RewritingAFixtureKeepsEverything) {
  SHARDLM_REQUIRE_FIXTURES();
  auto src = GgufFile::Open(testing::FixturePath("qwen3-tiny-q4_k_m.gguf"));
  ASSERT_TRUE(src.ok()) << src.status().message();
  auto bytes = CopyOf(**src).WriteToBytes();
  ASSERT_TRUE(bytes.ok());
  auto copy = GgufFile::FromBytes(*bytes, "copy.gguf");
  ASSERT_TRUE(copy.ok()) << copy.status().message();
  ExpectSameFile(**src, **copy);
}

TEST(GgufFingerprintTest, StableAndSensitiveToHeaderAndData) {
  std::vector<uint8_t> bytes = testing::SmallGgufFile();
  auto fp = [](const std::vector<uint8_t>& b) {
    auto f = GgufFile::FromBytes(b, "fp.gguf");
    EXPECT_TRUE(f.ok()) << f.status().message();
    return ModelFingerprint(**f);
  };
  Fingerprint128 base = fp(bytes);
  EXPECT_EQ(base, fp(bytes));
  EXPECT_EQ(base.ToHex().size(), 32u);
  std::vector<uint8_t> last_byte = bytes;
  auto file = GgufFile::FromBytes(bytes, "x");
  const GgufTensorInfo* c = (*file)->FindTensor("c.norm");
  last_byte[c->data - bytes.data() + c->n_bytes - 1] ^= 1;  // last byte of the last tensor
  EXPECT_NE(fp(last_byte), base);
  std::vector<uint8_t> header = bytes;
  // Same header, other key value: "llama" → "llamb".
  auto pos = std::search(header.begin(), header.end(), std::begin("llama"), std::end("llama") - 1);
  ASSERT_NE(pos, header.end());
  pos[4] = 'b';
  EXPECT_NE(fp(header), base);
}

TEST(GgufFingerprintTest, FixturesDifferByQuantization) {
  SHARDLM_REQUIRE_FIXTURES();
  auto a = GgufFile::Open(testing::FixturePath("qwen3-tiny-q4_0.gguf"));
  auto b = GgufFile::Open(testing::FixturePath("qwen3-tiny-q4_k.gguf"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->file_size(), (*b)->file_size());  // same size, other content
  EXPECT_NE(ModelFingerprint(**a).ToHex(), ModelFingerprint(**b).ToHex());
}

}  // namespace
}  // namespace shardlm
