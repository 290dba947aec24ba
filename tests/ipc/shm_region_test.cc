// ShmRegion: a sealed, zero-filled shared region; the peer's mapping sees the same bytes;
// undersized or unsealed files are refused; Span never reaches outside the mapping.
#include "ipc/shm_region.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace shardlm {
namespace {

TEST(ShmRegion, CreateIsZeroFilledAndSealed) {
  auto region = ShmRegion::Create("shardlm-test", 10000);
  ASSERT_TRUE(region.ok()) << region.status().message();
  EXPECT_EQ((*region)->size(), 10000u);
  for (size_t i = 0; i < 10000; ++i) ASSERT_EQ((*region)->data()[i], 0) << i;
  // The peer relies on the size: neither side can change it any more.
  EXPECT_NE(::ftruncate((*region)->fd(), 100), 0);
  EXPECT_NE(::ftruncate((*region)->fd(), 20000), 0);
}

TEST(ShmRegion, ZeroBytesRefused) { EXPECT_FALSE(ShmRegion::Create("x", 0).ok()); }

TEST(ShmRegion, MappedPeerSharesBytes) {
  auto region = ShmRegion::Create("shardlm-test", 4096 * 3);
  ASSERT_TRUE(region.ok()) << region.status().message();
  auto peer = ShmRegion::Map(::dup((*region)->fd()), 4096 * 3);
  ASSERT_TRUE(peer.ok()) << peer.status().message();
  (*region)->data()[5000] = 0xab;
  EXPECT_EQ((*peer)->data()[5000], 0xab);
  (*peer)->data()[12287] = 0x5c;
  EXPECT_EQ((*region)->data()[12287], 0x5c);
}

TEST(ShmRegion, MapRefusesFileSmallerThanAnnounced) {
  auto region = ShmRegion::Create("shardlm-test", 4096);
  ASSERT_TRUE(region.ok()) << region.status().message();
  auto peer = ShmRegion::Map(::dup((*region)->fd()), 4097);
  ASSERT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().code(), StatusCode::kInvalidData);
  EXPECT_NE(peer.status().message().find("4097"), std::string::npos);
}

TEST(ShmRegion, MapRefusesUnsealedFile) {
  int fd = ::memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  auto peer = ShmRegion::Map(fd, 4096);  // takes fd even on error
  ASSERT_FALSE(peer.ok());
  EXPECT_NE(peer.status().message().find("sealed"), std::string::npos);
  EXPECT_FALSE(ShmRegion::Map(-1, 4096).ok());
}

TEST(ShmRegion, SpanIsBoundsChecked) {
  auto region = ShmRegion::Create("shardlm-test", 1000);
  ASSERT_TRUE(region.ok()) << region.status().message();
  ShmRegion& r = **region;
  auto whole = r.Span(0, 1000);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->data(), r.data());
  EXPECT_EQ(whole->size(), 1000u);
  auto tail = r.Span(990, 10);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->data(), r.data() + 990);
  EXPECT_TRUE(r.Span(1000, 0).ok());
  EXPECT_FALSE(r.Span(990, 11).ok());
  EXPECT_FALSE(r.Span(1001, 0).ok());
  EXPECT_FALSE(r.Span(1, SIZE_MAX).ok());  // offset + bytes wraps around
  EXPECT_FALSE(r.Span(SIZE_MAX, 2).ok());
  EXPECT_EQ(r.Span(SIZE_MAX, 2).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardlm
