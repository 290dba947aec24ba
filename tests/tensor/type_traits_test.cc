// Tests of the traits tables and ISA selection (tensor/type_traits.h).
#include "tensor/type_traits.h"

#include <gtest/gtest.h>

#include "tensor/kernels_impl.h"
#include "tensor/test_matrices.h"

namespace shardlm {
namespace {

TEST(TypeTraits, EveryComputableTypeHasACompleteRowOnEveryIsa) {
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectIsa()) && isa != Isa::kGeneric) {
      continue;
    }
    for (GgmlType type : testing::kComputableTypes) {
      const TypeTraits* t = GetTypeTraitsFor(type, isa);
      ASSERT_NE(t, nullptr) << IsaName(isa) << " " << GgmlTypeName(static_cast<uint32_t>(type));
      EXPECT_EQ(t->type, type);
      EXPECT_NE(t->dequantize_row, nullptr);
      EXPECT_NE(t->quantize_row, nullptr);
      EXPECT_NE(t->quantize_act, nullptr);
      EXPECT_NE(t->vec_dot, nullptr);
      EXPECT_EQ(t->block_size, LookupGgmlType(static_cast<uint32_t>(type))->block_size);
    }
  }
}

TEST(TypeTraits, ActTypesFollowLlamaCpp) {
  auto act = [](GgmlType type) { return GetTypeTraits(type)->act_type; };
  EXPECT_EQ(act(GgmlType::kF32), GgmlType::kF32);
  EXPECT_EQ(act(GgmlType::kF16), GgmlType::kF16);
  EXPECT_EQ(act(GgmlType::kBF16), GgmlType::kBF16);
  EXPECT_EQ(act(GgmlType::kQ8_0), GgmlType::kQ8_0);
  EXPECT_EQ(act(GgmlType::kQ4_0), GgmlType::kQ8_0);
  EXPECT_EQ(act(GgmlType::kQ5_0), GgmlType::kQ8_0);
  EXPECT_EQ(act(GgmlType::kIq4Nl), GgmlType::kQ8_0);
  EXPECT_EQ(act(GgmlType::kMxfp4), GgmlType::kQ8_0);
  EXPECT_EQ(act(GgmlType::kQ4_1), GgmlType::kQ8_1);
  EXPECT_EQ(act(GgmlType::kQ5_1), GgmlType::kQ8_1);
  for (GgmlType k :
       {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
        GgmlType::kIq4Xs, GgmlType::kIq2Xxs, GgmlType::kIq2Xs, GgmlType::kIq2S, GgmlType::kIq3Xxs,
        GgmlType::kIq3S, GgmlType::kIq1S, GgmlType::kIq1M, GgmlType::kTq1_0, GgmlType::kTq2_0}) {
    EXPECT_EQ(act(k), GgmlType::kQ8_K);
  }
  // Q8_K blocks alone, on every ISA (no kernel of a Q8_K type reads side data).
  EXPECT_EQ(ActRowBytes(*GetTypeTraits(GgmlType::kQ4_K), 512), 2 * 292);
  EXPECT_EQ(ActRowBytes(*GetTypeTraits(GgmlType::kQ4_1), 64), 2 * 36);
  EXPECT_EQ(ActRowBytes(*GetTypeTraits(GgmlType::kF16), 64), 128);
}

// MatMul converts activations once per act_type for every matrix of a call: types sharing an
// act_type on one ISA must agree on the panel kernels' side data, or a row would be read
// with another's length.
TEST(TypeTraits, TypesOfOneActTypeAgreeOnTheActivationRow) {
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (!CpuHasIsa(isa)) continue;
    for (GgmlType a : testing::kComputableTypes) {
      for (GgmlType b : testing::kComputableTypes) {
        const TypeTraits& ta = *GetTypeTraitsFor(a, isa);
        const TypeTraits& tb = *GetTypeTraitsFor(b, isa);
        if (ta.act_type != tb.act_type) continue;
        SCOPED_TRACE(testing::TypeName(a) + " and " + testing::TypeName(b) + " on " + IsaName(isa));
        EXPECT_EQ(ta.act_side_bytes, tb.act_side_bytes);
        EXPECT_EQ(ta.act_side, tb.act_side);
        EXPECT_EQ(ActRowBytes(ta, 512), ActRowBytes(tb, 512));
      }
    }
  }
}

TEST(TypeTraits, UncomputableTypesHaveNoRow) {
  for (GgmlType type : {GgmlType::kQ8_1, GgmlType::kQ8_K, GgmlType::kI8, GgmlType::kF64,
                        GgmlType::kSentinel, static_cast<GgmlType>(4)}) {
    EXPECT_EQ(GetTypeTraits(type), nullptr) << static_cast<int>(type);
  }
  EXPECT_EQ(GetTypeTraitsFor(GgmlType::kF32, Isa::kSentinel), nullptr);
}

TEST(TypeTraits, IsaOverrideOnlyLowers) {
  using internal::CapIsa;
  EXPECT_EQ(CapIsa(nullptr, Isa::kAvx512), Isa::kAvx512);
  EXPECT_EQ(CapIsa("generic", Isa::kAvx512), Isa::kGeneric);
  EXPECT_EQ(CapIsa("avx2", Isa::kAvx512), Isa::kAvx2);
  EXPECT_EQ(CapIsa("avx512", Isa::kAvx2), Isa::kAvx2);  // never above the CPU
  EXPECT_EQ(CapIsa("bogus", Isa::kAvx2), Isa::kAvx2);
  EXPECT_STREQ(IsaName(Isa::kGeneric), "generic");
  EXPECT_STREQ(IsaName(Isa::kAvx512), "avx512");
}

}  // namespace
}  // namespace shardlm
