// PagePool: config validation, page layout, whole-page bytes and page copies.
#include "kv/page_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "pool_config.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

PagePoolConfig SmallConfig(int n_pages) { return kv_test::PoolConfig(n_pages, 4, 2, 2, 8); }

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
  EXPECT_EQ(pool->layer_shape(1), (KvLayerShape{2, 8}));
  EXPECT_EQ(pool->page_bytes(), 16u * 4 * 4 * 2 * 2);  // row × tokens × f32 × K,V × layers
  const PageId page = 1;
  auto* k0 = static_cast<uint8_t*>(pool->KeyRow(page, 0, 0, 0));
  EXPECT_EQ(k0, pool->page_data(page));
  EXPECT_EQ(pool->page_data(page) - pool->page_data(0), std::ptrdiff_t(pool->page_bytes()));
  // Head-major: a head's positions follow each other, then the next head, then V.
  EXPECT_EQ(static_cast<uint8_t*>(pool->KeyRow(page, 0, 0, 1)) - k0, 32);
  EXPECT_EQ(static_cast<uint8_t*>(pool->KeyRow(page, 0, 1, 0)) - k0, 32 * 4);
  EXPECT_EQ(static_cast<uint8_t*>(pool->ValueRow(page, 0, 0, 0)) - k0, 32 * 4 * 2);
  EXPECT_EQ(static_cast<uint8_t*>(pool->KeyRow(page, 1, 0, 0)) - k0, 32 * 4 * 2 * 2);
  // The last row of a page ends where the page does.
  EXPECT_EQ(static_cast<uint8_t*>(pool->ValueRow(page, 1, 1, 3)) + 32,
            pool->page_data(page) + pool->page_bytes());
}

// Layers of different shapes (gemma4's windowed 2 × 16 and global 1 × 32 heads) each keep
// their own head-major rows, one after the other.
TEST(PagePool, LayersOfTheirOwnShape) {
  PagePoolConfig c = SmallConfig(2);
  c.n_layers = 3;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.layer_shapes = {{2, 16}, {1, 32}, {2, 8}};
  auto made = PagePool::Create(c);
  ASSERT_TRUE(made.ok()) << made.status().message();
  PagePool& pool = **made;
  const size_t tokens = size_t(c.page_tokens);
  const size_t layer0 = 2 * tokens * 16 * 4 * 2;  // heads × tokens × dim × f32 × K,V
  const size_t layer1 = 1 * tokens * 32 * 4 * 2;
  const size_t layer2 = 2 * tokens * 8 * 4 * 2;
  EXPECT_EQ(pool.page_bytes(), layer0 + layer1 + layer2);
  EXPECT_EQ(KvPageBytes(c), pool.page_bytes());
  EXPECT_FALSE(c.uniform());
  EXPECT_EQ(pool.layer_shape(0), (KvLayerShape{2, 16}));
  auto* page = pool.page_data(1);
  EXPECT_EQ(static_cast<uint8_t*>(pool.KeyRow(1, 0, 1, 0)) - page, std::ptrdiff_t(tokens * 64));
  EXPECT_EQ(static_cast<uint8_t*>(pool.ValueRow(1, 0, 0, 0)) - page,
            std::ptrdiff_t(2 * tokens * 64));
  EXPECT_EQ(static_cast<uint8_t*>(pool.KeyRow(1, 1, 0, 1)) - page, std::ptrdiff_t(layer0 + 128));
  EXPECT_EQ(static_cast<uint8_t*>(pool.ValueRow(1, 2, 1, tokens - 1)) + 32,
            page + pool.page_bytes());
  // A layer wider than the pool's widest shape, or shapes that do not count the layers,
  // are refused.
  c.layer_shapes = {{2, 16}, {1, 64}, {2, 8}};
  EXPECT_EQ(PagePool::Create(c).status().code(), StatusCode::kInvalidArgument);
  c.layer_shapes = {{2, 16}};
  EXPECT_EQ(PagePool::Create(c).status().code(), StatusCode::kInvalidArgument);
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
  EXPECT_EQ(ParseKvType("q8_0").value(), KvType::kQ8_0);
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}) {
    auto type = ParseKvType(name);
    ASSERT_TRUE(type.ok()) << name;
    EXPECT_STREQ(KvTypeName(*type), name);
  }
  EXPECT_EQ(ParseKvType("q4_2").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseKvType("iq4_xs").status().code(), StatusCode::kInvalidArgument);
  EXPECT_STREQ(KvTypeName(KvType::kQ8_0), "q8_0");
  EXPECT_STREQ(KvTypeName(KvType::kSentinel), "invalid");
}

// The 4- and 5-bit KV types: their GGUF block sizes per 32 elements, whole blocks only.
TEST(PagePool, SmallBlockRowsAreWholeBlocks) {
  const std::pair<KvType, size_t> kRowBytes[] = {{KvType::kQ4_0, 72},
                                                 {KvType::kQ4_1, 80},
                                                 {KvType::kQ5_0, 88},
                                                 {KvType::kQ5_1, 96},
                                                 {KvType::kIq4Nl, 72}};
  for (const auto& [type, bytes] : kRowBytes) {
    SCOPED_TRACE(KvTypeName(type));
    EXPECT_EQ(KvRowBytes(type, 128), bytes);
    EXPECT_TRUE(CheckKvRows(type, 64).ok());
    EXPECT_FALSE(CheckKvRows(type, 48).ok());
  }
}

// A row written and read back: F32, F16 and Q8_0 rows are the matmul activation bytes, the
// others their types' reference quantizers', within each type's error.
TEST(PagePool, StoredRowsReadBackWithinTheTypesError) {
  std::vector<float> row(128);
  for (size_t i = 0; i < row.size(); ++i) row[i] = std::sin(0.37f * static_cast<float>(i)) * 3;
  // At most one quantization step of the block (amax 3): 3/127, 3/16 and 3/8 (a step, not half
  // of one: the symmetric types reach −amax but stop a step short of +amax).
  const std::pair<KvType, double> kMaxError[] = {
      {KvType::kF32, 0},     {KvType::kF16, 0.002}, {KvType::kQ8_0, 0.024}, {KvType::kQ5_0, 0.19},
      {KvType::kQ5_1, 0.19}, {KvType::kQ4_0, 0.38}, {KvType::kQ4_1, 0.38},  {KvType::kIq4Nl, 0.38},
  };
  for (const auto& [type, max_error] : kMaxError) {
    SCOPED_TRACE(KvTypeName(type));
    std::vector<uint8_t> stored(KvRowBytes(type, row.size()));
    KvStoreRow(type, row.data(), stored.data(), int64_t(row.size()));
    std::vector<float> back(row.size());
    GetTypeTraits(KvElementType(type))
        ->dequantize_row(stored.data(), back.data(), int64_t(back.size()));
    double worst = 0;
    for (size_t i = 0; i < row.size(); ++i)
      worst = std::max(worst, double(std::fabs(back[i] - row[i])));
    EXPECT_LE(worst, max_error);
  }
}

// Q8_0 rows are 34 bytes per 32 elements; a head_dim that is not whole blocks is refused.
TEST(PagePool, Q8_0RowsAreWholeBlocks) {
  EXPECT_EQ(KvRowBytes(KvType::kF32, 128), 512u);
  EXPECT_EQ(KvRowBytes(KvType::kF16, 128), 256u);
  EXPECT_EQ(KvRowBytes(KvType::kQ8_0, 128), 136u);
  PagePoolConfig c = SmallConfig(2);
  c.kv_type = KvType::kQ8_0;
  c.head_dim = 64;
  auto pool = PagePool::Create(c);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  EXPECT_EQ((*pool)->page_bytes(), 68u * c.n_kv_heads * c.page_tokens * c.n_layers * 2);
  EXPECT_EQ(static_cast<uint8_t*>((*pool)->KeyRow(1, 0, 0, 1)) -
                static_cast<uint8_t*>((*pool)->KeyRow(1, 0, 0, 0)),
            68);
  c.head_dim = 48;
  auto bad = PagePool::Create(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("head_dim"), std::string::npos);
  EXPECT_TRUE(CheckKvRows(KvType::kQ8_0, 64).ok());
  EXPECT_FALSE(CheckKvRows(KvType::kQ8_0, 48).ok());
  EXPECT_FALSE(CheckKvRows(KvType::kSentinel, 64).ok());
}

}  // namespace
}  // namespace shardlm
