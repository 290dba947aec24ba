// PageAllocator: validation, exhaustion error, refcounts, and pages coming back for reuse.
#include "kv/page_allocator.h"

#include <gtest/gtest.h>

#include <set>

namespace shardlm {
namespace {

std::unique_ptr<PageAllocator> MakeAllocator(int n_pages, int page_tokens = 4) {
  auto allocator = PageAllocator::Create(n_pages, page_tokens);
  EXPECT_TRUE(allocator.ok()) << allocator.status().message();
  return std::move(allocator).value();
}

TEST(PageAllocator, RejectsBadSizes) {
  EXPECT_EQ(PageAllocator::Create(0, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PageAllocator::Create(4, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PageAllocator::Create(-1, 4).status().code(), StatusCode::kInvalidArgument);
}

TEST(PageAllocator, HandsOutEveryIdOnceThenFailsNamingTheLimitAndFlag) {
  auto allocator = MakeAllocator(3, 16);
  EXPECT_EQ(allocator->n_pages(), 3);
  EXPECT_EQ(allocator->page_tokens(), 16);
  std::set<PageId> ids;
  for (int i = 0; i < 3; ++i) {
    auto page = allocator->Allocate();
    ASSERT_TRUE(page.ok());
    EXPECT_TRUE(*page >= 0 && *page < 3) << *page;
    EXPECT_EQ(allocator->refcount(*page), 1);
    ids.insert(*page);
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(allocator->n_free(), 0);
  auto extra = allocator->Allocate();
  ASSERT_FALSE(extra.ok());
  EXPECT_EQ(extra.status().code(), StatusCode::kOutOfRange);
  const std::string& message = extra.status().message();
  EXPECT_NE(message.find("3 pages"), std::string::npos) << message;
  EXPECT_NE(message.find("--kv-pages"), std::string::npos) << message;
}

TEST(PageAllocator, RefcountsKeepSharedPagesUntilTheLastRelease) {
  auto allocator = MakeAllocator(2);
  auto a = allocator->Allocate();
  auto b = allocator->Allocate();
  ASSERT_TRUE(a.ok() && b.ok());
  allocator->Retain(*a);
  EXPECT_EQ(allocator->refcount(*a), 2);
  allocator->Release(*a);
  EXPECT_EQ(allocator->refcount(*a), 1);
  EXPECT_EQ(allocator->n_free(), 0);
  EXPECT_FALSE(allocator->Allocate().ok());
  allocator->Release(*a);
  EXPECT_EQ(allocator->refcount(*a), 0);
  EXPECT_EQ(allocator->n_free(), 1);
  // The released id is the one handed out next.
  auto again = allocator->Allocate();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);
  allocator->Release(*again);
  allocator->Release(*b);
  EXPECT_EQ(allocator->n_free(), 2);
}

}  // namespace
}  // namespace shardlm
