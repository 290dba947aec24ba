// PagePool and BlockTable: allocation, refcounts, exhaustion errors, copy-on-write, and
// capacity returning to its baseline.
#include "kv/page_pool.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kv/block_table.h"

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
  auto page = pool->Allocate();
  ASSERT_TRUE(page.ok());
  auto* k0 = static_cast<uint8_t*>(pool->KeyRow(*page, 0, 0));
  EXPECT_EQ(static_cast<uint8_t*>(pool->KeyRow(*page, 0, 1)) - k0, 64);
  EXPECT_EQ(static_cast<uint8_t*>(pool->ValueRow(*page, 0, 0)) - k0, 64 * 4);
  EXPECT_EQ(static_cast<uint8_t*>(pool->KeyRow(*page, 1, 0)) - k0, 64 * 8);
}

TEST(PagePool, ExhaustionIsAClearErrorAndReleaseRefills) {
  auto pool = MakePool(2);
  auto a = pool->Allocate();
  auto b = pool->Allocate();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  auto c = pool->Allocate();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(c.status().message().find("--kv-pages"), std::string::npos) << c.status().message();
  pool->Retain(*a);
  EXPECT_EQ(pool->refcount(*a), 2);
  pool->Release(*a);
  EXPECT_EQ(pool->n_free(), 0);
  pool->Release(*a);
  EXPECT_EQ(pool->n_free(), 1);
  EXPECT_TRUE(pool->Allocate().ok());
}

TEST(PagePool, ParseKvType) {
  EXPECT_EQ(ParseKvType("f32").value(), KvType::kF32);
  EXPECT_EQ(ParseKvType("f16").value(), KvType::kF16);
  EXPECT_EQ(ParseKvType("q8_0").status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockTable, GrowsByPagesAndReleasesOnDestruction) {
  auto pool = MakePool(4);
  {
    BlockTable table(pool.get());
    ASSERT_TRUE(table.PrepareWrite(0, 5).ok());  // positions 0..4 → 2 pages
    EXPECT_EQ(table.n_pages(), 2);
    EXPECT_EQ(pool->n_free(), 2);
    table.SetTokens(5);
    ASSERT_TRUE(table.PrepareWrite(5, 8).ok());  // still inside page 1
    EXPECT_EQ(table.n_pages(), 2);
    table.SetTokens(8);
    table.Truncate(3);
    EXPECT_EQ(table.n_pages(), 1);
    EXPECT_EQ(table.n_tokens(), 3);
  }
  EXPECT_EQ(pool->n_free(), 4);
}

TEST(BlockTable, ExhaustionLeavesTableUnchanged) {
  auto pool = MakePool(2);
  BlockTable table(pool.get());
  Status st = table.PrepareWrite(0, 9);  // needs 3 pages
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("raise --kv-pages"), std::string::npos) << st.message();
  EXPECT_EQ(table.n_pages(), 0);
  EXPECT_EQ(pool->n_free(), 2);
}

TEST(BlockTable, ForkSharesPagesAndCopiesOnWrite) {
  auto pool = MakePool(6);
  BlockTable a(pool.get());
  ASSERT_TRUE(a.PrepareWrite(0, 6).ok());
  std::memset(pool->KeyRow(a.page(1), 0, 1), 0x5a, pool->row_elements() * 4);
  a.SetTokens(6);
  BlockTable b = a.Fork();
  EXPECT_EQ(b.pages(), a.pages());
  EXPECT_EQ(pool->refcount(a.page(0)), 2);
  EXPECT_EQ(pool->n_free(), 4);
  // b writes position 6 (page 1, shared): page 1 is copied, page 0 stays shared.
  ASSERT_TRUE(b.PrepareWrite(6, 7).ok());
  EXPECT_EQ(b.page(0), a.page(0));
  EXPECT_NE(b.page(1), a.page(1));
  EXPECT_EQ(pool->refcount(a.page(1)), 1);
  EXPECT_EQ(std::memcmp(pool->KeyRow(a.page(1), 0, 1), pool->KeyRow(b.page(1), 0, 1),
                        pool->row_elements() * 4),
            0);
  a.Clear();
  b.Clear();
  EXPECT_EQ(pool->n_free(), 6);
}

TEST(BlockTable, AppendSharedPageAndMove) {
  auto pool = MakePool(3);
  auto page = pool->Allocate();
  ASSERT_TRUE(page.ok());
  BlockTable table(pool.get());
  table.AppendSharedPage(*page);
  EXPECT_EQ(table.n_tokens(), 4);
  EXPECT_EQ(pool->refcount(*page), 2);
  BlockTable moved = std::move(table);
  EXPECT_EQ(moved.n_pages(), 1);
  EXPECT_EQ(table.n_pages(), 0);  // NOLINT: moved-from is empty by contract
  moved.Clear();
  pool->Release(*page);
  EXPECT_EQ(pool->n_free(), 3);
}

}  // namespace
}  // namespace shardlm
