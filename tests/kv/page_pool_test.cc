// PagePool: config validation, page layout, whole-page bytes and page copies.
#include "kv/page_pool.h"

#include <gtest/gtest.h>

#include <cstring>

namespace shardlm {
namespace {

PagePoolConfig SmallConfig(int n_pages) {
  PagePoolConfig c;
  c.n_pages = n_pages;
  c.page_tokens = 4;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  return c;
}

std::unique_ptr<PagePool> MakePool(int n_pages) {
  auto pool = PagePool::Create(SmallConfig(n_pages));
  EXPECT_TRUE(pool.ok()) << pool.status().message();
  return std::move(pool).value();
}

TEST(PagePool, RejectsBadConfig) {
  PagePoolConfig c = SmallConfig(0);
  EXPECT_EQ(PagePool::Create(c).status().code(), StatusCode::kInvalidArgument);
  c = SmallConfig(4);
  c.head_dim = -1;
  EXPECT_EQ(PagePool::Create(c).status().code(), StatusCode::kInvalidArgument);
  c = SmallConfig(1 << 30);  // 2^76 bytes: rejected before any arithmetic can overflow
  c.head_dim = 1 << 20;
  c.n_layers = 1 << 20;
  EXPECT_EQ(PagePool::Create(c).status().code(), StatusCode::kInvalidArgument);
}

TEST(PagePool, LayoutAndSizes) {
  auto pool = MakePool(3);
  EXPECT_EQ(pool->row_elements(), 16u);
  EXPECT_EQ(pool->page_bytes(), 16u * 4 * 4 * 2 * 2);  // row × tokens × f32 × K,V × layers
  const PageId page = 1;
  auto* k0 = static_cast<uint8_t*>(pool->KeyRow(page, 0, 0, 0));
  EXPECT_EQ(k0, pool->page_data(page));
  EXPECT_EQ(pool->page_data(page) - pool->page_data(0), std::ptrdiff_t(pool->page_bytes()));
  EXPECT_EQ(pool->head_row_bytes(), 32u);  // head_dim 8 × f32
  // Head-major: a head's positions follow each other, then the next head, then V.
  EXPECT_EQ(static_cast<uint8_t*>(pool->KeyRow(page, 0, 0, 1)) - k0, 32);
  EXPECT_EQ(static_cast<uint8_t*>(pool->KeyRow(page, 0, 1, 0)) - k0, 32 * 4);
  EXPECT_EQ(static_cast<uint8_t*>(pool->ValueRow(page, 0, 0, 0)) - k0, 32 * 4 * 2);
  EXPECT_EQ(static_cast<uint8_t*>(pool->KeyRow(page, 1, 0, 0)) - k0, 32 * 4 * 2 * 2);
  // The last row of a page ends where the page does.
  EXPECT_EQ(static_cast<uint8_t*>(pool->ValueRow(page, 1, 1, 3)) + 32,
            pool->page_data(page) + pool->page_bytes());
}

TEST(PagePool, CopyPageCopiesTheWholePageOnly) {
  auto pool = MakePool(3);
  for (PageId page = 0; page < 3; ++page) {
    std::memset(pool->page_data(page), 0x10 + page, pool->page_bytes());
  }
  pool->CopyPage(2, 0);
  const std::vector<uint8_t> twos(pool->page_bytes(), 0x12);
  const std::vector<uint8_t> ones(pool->page_bytes(), 0x11);
  EXPECT_EQ(std::memcmp(pool->page_data(0), twos.data(), twos.size()), 0);
  EXPECT_EQ(std::memcmp(pool->page_data(1), ones.data(), ones.size()), 0);
  EXPECT_EQ(std::memcmp(pool->page_data(2), twos.data(), twos.size()), 0);
}

TEST(PagePool, ParseKvType) {
  EXPECT_EQ(ParseKvType("f32").value(), KvType::kF32);
  EXPECT_EQ(ParseKvType("f16").value(), KvType::kF16);
  EXPECT_EQ(ParseKvType("q8_0").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardlm
