// BlockTable: growth by pages, exhaustion leaving the table unchanged, forks and
// copy-on-write reported as PageCopy (contents untouched), capacity back to baseline.
#include "kv/block_table.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kv/page_allocator.h"
#include "kv/page_pool.h"

namespace shardlm {
namespace {

std::unique_ptr<PageAllocator> MakeFourTokenAllocator(int n_pages) {
  auto allocator = PageAllocator::Create(n_pages, /*page_tokens=*/4);
  EXPECT_TRUE(allocator.ok()) << allocator.status().message();
  return std::move(allocator).value();
}

TEST(BlockTable, GrowsByPagesAndReleasesOnDestruction) {
  auto allocator = MakeFourTokenAllocator(4);
  std::vector<PageCopy> copies;
  {
    BlockTable table(allocator.get());
    ASSERT_TRUE(table.PrepareWrite(0, 5, &copies).ok());  // positions 0..4 → 2 pages
    EXPECT_EQ(table.n_pages(), 2);
    EXPECT_EQ(table.capacity_tokens(), 8);
    EXPECT_EQ(allocator->n_free(), 2);
    table.SetTokens(5);
    ASSERT_TRUE(table.PrepareWrite(5, 8, &copies).ok());  // still inside page 1
    EXPECT_EQ(table.n_pages(), 2);
    table.SetTokens(8);
    const PageList list = table.page_list();
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0], table.page(0));
    EXPECT_EQ(list[1], table.page(1));
    table.Truncate(3);
    EXPECT_EQ(table.n_pages(), 1);
    EXPECT_EQ(table.n_tokens(), 3);
  }
  EXPECT_TRUE(copies.empty());  // private pages are never copied
  EXPECT_EQ(allocator->n_free(), 4);
}

TEST(BlockTable, ExhaustionLeavesTableUnchanged) {
  auto allocator = MakeFourTokenAllocator(2);
  BlockTable table(allocator.get());
  std::vector<PageCopy> copies;
  Status st = table.PrepareWrite(0, 9, &copies);  // needs 3 pages
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("raise --kv-pages"), std::string::npos) << st.message();
  EXPECT_EQ(table.n_pages(), 0);
  EXPECT_EQ(allocator->n_free(), 2);

  // A fork that would need a copy and a new page with only one free: no change at all.
  ASSERT_TRUE(table.PrepareWrite(0, 3, &copies).ok());
  table.SetTokens(3);
  BlockTable fork = table.Fork();
  st = fork.PrepareWrite(3, 5, &copies);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(fork.pages(), table.pages());
  EXPECT_EQ(allocator->refcount(table.page(0)), 2);
}

// Copy-on-write hands out new ids and says which contents to copy; the table never touches
// page contents, so a pool sees no change until the caller applies the copies.
TEST(BlockTable, ForkCopyOnWriteReportsCopiesWithoutTouchingPages) {
  auto allocator = MakeFourTokenAllocator(6);
  PagePoolConfig config;
  config.n_pages = 6;
  config.page_tokens = 4;
  config.n_layers = 1;
  config.n_kv_heads = 1;
  config.head_dim = 4;
  auto pool = std::move(PagePool::Create(config)).value();
  for (PageId page = 0; page < 6; ++page) {
    std::memset(pool->page_data(page), page, pool->page_bytes());
  }
  BlockTable a(allocator.get());
  std::vector<PageCopy> copies;
  ASSERT_TRUE(a.PrepareWrite(0, 10, &copies).ok());  // pages 0, 1, 2 (2 partial)
  a.SetTokens(10);
  BlockTable b = a.Fork();
  EXPECT_EQ(b.pages(), a.pages());
  EXPECT_EQ(b.n_tokens(), 10);
  EXPECT_EQ(allocator->refcount(a.page(0)), 2);
  EXPECT_EQ(allocator->n_free(), 3);  // sharing costs no pages

  // b rewrites positions 6..11: pages 1 and 2 are shared, so both get new ids; page 0
  // stays shared.
  ASSERT_TRUE(b.PrepareWrite(6, 12, &copies).ok());
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0], (PageCopy{a.page(1), b.page(1)}));
  EXPECT_EQ(copies[1], (PageCopy{a.page(2), b.page(2)}));
  EXPECT_EQ(b.page(0), a.page(0));
  EXPECT_NE(b.page(1), a.page(1));
  EXPECT_EQ(allocator->refcount(a.page(1)), 1);
  EXPECT_EQ(allocator->refcount(b.page(1)), 1);
  EXPECT_EQ(allocator->n_free(), 1);
  for (PageId page = 0; page < 6; ++page) {
    EXPECT_EQ(pool->page_data(page)[0], page) << "page " << page << " was written";
  }
  // The caller applies the copies: b's pages now hold a's contents.
  for (const PageCopy& copy : copies) pool->CopyPage(copy.src, copy.dst);
  EXPECT_EQ(std::memcmp(pool->page_data(a.page(2)), pool->page_data(b.page(2)), pool->page_bytes()),
            0);
  // a writes its own pages in place now that nobody shares them: no more copies.
  copies.clear();
  ASSERT_TRUE(a.PrepareWrite(10, 12, &copies).ok());
  EXPECT_TRUE(copies.empty());
  a.Clear();
  b.Clear();
  EXPECT_EQ(allocator->n_free(), 6);
}

TEST(BlockTable, AppendSharedPageAndMove) {
  auto allocator = MakeFourTokenAllocator(3);
  auto page = allocator->Allocate();
  ASSERT_TRUE(page.ok());
  BlockTable table(allocator.get());
  table.AppendSharedPage(*page);
  EXPECT_EQ(table.n_tokens(), 4);
  EXPECT_EQ(allocator->refcount(*page), 2);
  BlockTable moved = std::move(table);
  EXPECT_EQ(moved.n_pages(), 1);
  EXPECT_EQ(table.n_pages(), 0);  // NOLINT: moved-from is empty by contract
  moved.Clear();
  allocator->Release(*page);
  EXPECT_EQ(allocator->n_free(), 3);
}

}  // namespace
}  // namespace shardlm
