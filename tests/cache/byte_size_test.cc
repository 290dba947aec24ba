#include "cache/byte_size.h"

#include <gtest/gtest.h>

namespace shardlm {
namespace {

uint64_t Bytes(std::string_view text) {
  auto r = ParseByteSize(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().message();
  return r.ok() ? r.value() : 0;
}

TEST(ByteSize, Units) {
  EXPECT_EQ(Bytes("100000"), 100000u);
  EXPECT_EQ(Bytes("8GiB"), 8ull << 30);
  EXPECT_EQ(Bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(Bytes("512mib"), 512ull << 20);
  EXPECT_EQ(Bytes("4 KiB"), 4096u);
  EXPECT_EQ(Bytes("2G"), 2ull << 30);
  EXPECT_EQ(Bytes("3T"), 3ull << 40);
  EXPECT_EQ(Bytes("1TiB"), 1ull << 40);
  EXPECT_EQ(Bytes("5GB"), 5000000000u);
  EXPECT_EQ(Bytes("2KB"), 2000u);
  EXPECT_EQ(Bytes("1TB"), 1000000000000u);
  EXPECT_EQ(Bytes("7B"), 7u);
  EXPECT_EQ(Bytes("0"), 0u);
}

TEST(ByteSize, Errors) {
  for (const char* bad : {"", "GiB", "-1", "1.5GiB", "8XB", "8 GiB extra", " 8", "8GiBB",
                          "99999999999999999999", "20000000000GiB"}) {
    auto r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("8GiB"), std::string::npos) << "shows an example";
  }
}

}  // namespace
}  // namespace shardlm
