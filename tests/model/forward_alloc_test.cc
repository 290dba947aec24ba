// The forward pass allocates nothing once its buffers are sized: every operator new while a
// warm batch runs, on any thread (the pool's workers too), is counted by this binary's
// replacement of the global operator new. The replacements allocate with malloc and the
// matching deletes free, every plain, array and nothrow form together: AddressSanitizer
// tags each allocation with the form that made it and checks the delete against it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "model/model_harness.h"
#include "support/fixtures.h"

namespace {

std::atomic<bool> forward_alloc_counting{false};
std::atomic<int64_t> forward_alloc_count{0};

}  // namespace

namespace {

void* CountedMalloc(std::size_t size) noexcept {
  if (forward_alloc_counting.load(std::memory_order_relaxed)) forward_alloc_count.fetch_add(1);
  return std::malloc(size == 0 ? 1 : size);
}

}  // namespace

void* operator new(std::size_t size) {
  if (void* p = CountedMalloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (void* p = CountedMalloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return CountedMalloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return CountedMalloc(size);
}
// GCC sees a pointer of operator new reach free through these inlined deletes and warns;
// here that pairing is the point.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace shardlm::testing {
namespace {

// Operator new calls while `batch` runs on a warm harness (its prompt already computed).
int64_t AllocationsOfBatch(Harness& h, BlockTable& table, const std::vector<BatchEntry>& batch) {
  std::vector<float> logits(batch.size() * size_t(h.n_vocab()));
  h.PrepareWrite(table, batch.front().position, batch.back().position + 1);
  const PageList pages[] = {table.page_list()};
  forward_alloc_count = 0;
  forward_alloc_counting = true;
  const Status status = h.forward->Run(batch, pages, nullptr, logits.data());
  forward_alloc_counting = false;
  EXPECT_TRUE(status.ok()) << status.message();
  table.SetTokens(batch.back().position + 1);
  return forward_alloc_count.load();
}

TEST(ForwardAllocations, WarmBatchesAllocateNothing) {
  SHARDLM_REQUIRE_FIXTURES();
  // The counter sees what the forward pass would allocate (the replacement is in use).
  forward_alloc_count = 0;
  forward_alloc_counting = true;
  auto probe = std::make_unique<std::vector<int>>(4);
  forward_alloc_counting = false;
  ASSERT_EQ(forward_alloc_count.load(), 2);
  for (const char* name : {"stories260K.gguf", "qwen3-tiny-q4_k_m.gguf"}) {
    SCOPED_TRACE(name);
    HarnessOptions options;
    options.n_threads = 2;
    auto h = Harness::Open(FixturePath(name), options);
    ASSERT_NE(h, nullptr);
    BlockTable table = h->NewTable();
    // Warm-up: a prefill and a decode step size every lazily grown scratch.
    std::vector<int32_t> prompt;
    for (int32_t t = 1; t <= 24; ++t) prompt.push_back(t);
    h->Run(table, prompt, 0, false);
    h->Run(table, {5}, 24, false);
    EXPECT_EQ(AllocationsOfBatch(*h, table, {{7, 25, 0, true}}), 0) << "decode step";
    std::vector<BatchEntry> chunk;
    for (int32_t i = 0; i < 8; ++i) chunk.push_back({10 + i, 26 + i, 0, i == 7});
    EXPECT_EQ(AllocationsOfBatch(*h, table, chunk), 0) << "prefill chunk";
  }
}

}  // namespace
}  // namespace shardlm::testing
