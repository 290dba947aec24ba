// A KV page pool over a shared-memory region: another process that maps the region and lays a
// pool of the same config over it writes rows the first process's pool reads, with no copy
// (what a prefill worker and a decode worker share); memory too short for the pages is
// refused.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "ipc/shm_region.h"
#include "kv/page_pool.h"

namespace shardlm {
namespace {

namespace shared_page_pool_test {

PagePoolConfig Config() {
  PagePoolConfig config;
  config.n_pages = 4;
  config.page_tokens = 8;
  config.n_layers = 2;
  config.n_kv_heads = 2;
  config.head_dim = 16;
  config.kv_type = KvType::kF16;
  return config;
}

// A pool over `region` that keeps the region alive.
std::unique_ptr<PagePool> PoolOn(std::shared_ptr<ShmRegion> region) {
  const std::span<uint8_t> memory(region->data(), region->size());
  auto pool = PagePool::CreateOn(Config(), memory, std::move(region));
  EXPECT_TRUE(pool.ok()) << pool.status().message();
  return pool.ok() ? std::move(pool).value() : nullptr;
}

}  // namespace shared_page_pool_test

using shared_page_pool_test::Config;
using shared_page_pool_test::PoolOn;

TEST(SharedPagePool, RowsAnotherProcessWritesAreTheRowsThisPoolReads) {
  const size_t bytes = KvPageBytes(Config()) * size_t(Config().n_pages);
  Result<std::unique_ptr<ShmRegion>> region = ShmRegion::Create("shardlm-test-pool", bytes);
  ASSERT_TRUE(region.ok()) << region.status().message();
  const int fd = (*region)->fd();
  std::unique_ptr<PagePool> pool = PoolOn(std::move(region).value());
  ASSERT_NE(pool, nullptr);
  const size_t row = KvRowBytes(KvType::kF16, 16);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The other process maps the region itself, as a worker that received its fd would.
    Result<std::unique_ptr<ShmRegion>> mapped = ShmRegion::Map(::dup(fd), bytes);
    if (!mapped.ok()) ::_exit(2);
    std::unique_ptr<PagePool> theirs = PoolOn(std::move(mapped).value());
    if (theirs == nullptr) ::_exit(3);
    std::memset(theirs->KeyRow(2, 1, 1, 5), 0x3c, row);
    std::memset(theirs->ValueRow(3, 0, 0, 7), 0x5a, row);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const auto* key = static_cast<const uint8_t*>(pool->KeyRow(2, 1, 1, 5));
  const auto* value = static_cast<const uint8_t*>(pool->ValueRow(3, 0, 0, 7));
  for (size_t i = 0; i < row; ++i) {
    ASSERT_EQ(key[i], 0x3c) << i;
    ASSERT_EQ(value[i], 0x5a) << i;
  }
  // Rows it did not write are still the region's zeros.
  EXPECT_EQ(static_cast<const uint8_t*>(pool->KeyRow(2, 1, 1, 4))[0], 0);
}

TEST(SharedPagePool, MemoryShorterThanThePagesIsRefused) {
  std::vector<uint8_t> memory(KvPageBytes(Config()) * size_t(Config().n_pages) - 1);
  auto pool = PagePool::CreateOn(Config(), memory, nullptr);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), StatusCode::kInvalidArgument);
  memory.push_back(0);
  EXPECT_TRUE(PagePool::CreateOn(Config(), memory, nullptr).ok());
}

}  // namespace
}  // namespace shardlm
