// Tests of the generic vec_dot of every weight type against float64 references:
//  (1) with the activations as quantized (dequantized act blocks): only float accumulation
//      differs, so the bound is a few float epsilons of Σ|w·a|;
//  (2) with the original float activations: the bound adds the activation rounding, at
//      most half a quantization step per element, Σ|w_k|·step_k/2.
// The worst ratio error/bound is printed per type.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"
#include "tensor/test_matrices.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

using testing::TypeName;

std::vector<float> Gaussian(size_t n, uint32_t seed, float scale) {
  return testing::RandomFloats(n, seed, scale);
}

// The activation row as the kernel sees it (act type decoded to doubles), plus the
// largest rounding error each element may carry (half a step of its block's scale).
struct DecodedAct {
  std::vector<double> value;
  std::vector<double> half_step;
};

DecodedAct DecodeAct(GgmlType act_type, const std::vector<uint8_t>& bytes,
                     const std::vector<float>& x) {
  const size_t n = x.size();
  DecodedAct act{std::vector<double>(n), std::vector<double>(n)};
  for (size_t k = 0; k < n; ++k) {
    switch (act_type) {
      case GgmlType::kF32:
        act.value[k] = reinterpret_cast<const float*>(bytes.data())[k];
        break;
      case GgmlType::kF16:
        act.value[k] = Fp16ToFp32(reinterpret_cast<const fp16_t*>(bytes.data())[k]);
        act.half_step[k] = std::fabs(x[k]) * std::ldexp(1.0, -11);
        break;
      case GgmlType::kBF16:
        act.value[k] = Bf16ToFp32(reinterpret_cast<const bf16_t*>(bytes.data())[k]);
        act.half_step[k] = std::fabs(x[k]) * std::ldexp(1.0, -8);
        break;
      case GgmlType::kQ8_0: {
        const auto& b = reinterpret_cast<const BlockQ8_0*>(bytes.data())[k / 32];
        act.value[k] = Fp16ToFp32(b.d) * b.qs[k % 32];
        // d is rounded to fp16: the step error adds up to 127·|Δd| <= 127·d·2^-11.
        act.half_step[k] = Fp16ToFp32(b.d) * (0.5 + 127 * std::ldexp(1.0, -11));
        break;
      }
      case GgmlType::kQ8_1: {
        const auto& b = reinterpret_cast<const BlockQ8_1*>(bytes.data())[k / 32];
        act.value[k] = Fp16ToFp32(b.d) * b.qs[k % 32];
        act.half_step[k] = Fp16ToFp32(b.d) * (0.5 + 127 * std::ldexp(1.0, -11));
        break;
      }
      case GgmlType::kQ8_K: {
        const auto& b = reinterpret_cast<const BlockQ8_K*>(bytes.data())[k / 256];
        act.value[k] = static_cast<double>(b.d) * b.qs[k % 256];
        act.half_step[k] = std::fabs(b.d) * 0.5;
        break;
      }
      default:
        ADD_FAILURE() << "unexpected act type";
    }
  }
  return act;
}

// Q4_1/Q5_1 use the block sum s (fp16) for the weight-min term instead of Σ d·q: the exact
// value of what the kernel computes, and the extra error of s's fp16 rounding.
double Q8_1MinTermCorrection(GgmlType type, const std::vector<uint8_t>& w,
                             const std::vector<uint8_t>& act, size_t n, double* extra_bound) {
  double correction = 0;
  for (size_t b = 0; b < n / 32; ++b) {
    const auto& a = reinterpret_cast<const BlockQ8_1*>(act.data())[b];
    const fp16_t m_bits = type == GgmlType::kQ4_1
                              ? reinterpret_cast<const BlockQ4_1*>(w.data())[b].m
                              : reinterpret_cast<const BlockQ5_1*>(w.data())[b].m;
    const double m = Fp16ToFp32(m_bits);
    double sum_dq = 0;
    for (int j = 0; j < 32; ++j) sum_dq += static_cast<double>(Fp16ToFp32(a.d)) * a.qs[j];
    correction += m * (Fp16ToFp32(a.s) - sum_dq);
    *extra_bound += std::fabs(m) * std::fabs(Fp16ToFp32(a.s)) * std::ldexp(1.0, -11);
  }
  return correction;
}

TEST(VecDot, MatchesFloat64ReferenceForEveryType) {
  for (GgmlType type : testing::kComputableTypes) {
    for (int64_t n : {256, 1024, 2816}) {
      SCOPED_TRACE(TypeName(type) + " n=" + std::to_string(n));
      const TypeTraits* traits = GetTypeTraitsFor(type, Isa::kGeneric);
      ASSERT_NE(traits, nullptr);
      const auto w_info = LookupGgmlType(static_cast<uint32_t>(type));
      const auto a_info = LookupGgmlType(static_cast<uint32_t>(traits->act_type));
      double worst_exact = 0, worst_float = 0;
      for (uint32_t seed = 0; seed < 8; ++seed) {
        const std::vector<float> w_src = Gaussian(n, 100 + seed, 0.05f);
        const std::vector<float> x = Gaussian(n, 200 + seed, 1.0f + seed);
        std::vector<uint8_t> w(RowBytes(*w_info, n)), act(RowBytes(*a_info, n));
        traits->quantize_row(w_src.data(), w.data(), n);
        traits->quantize_act(x.data(), act.data(), n);
        std::vector<float> w_deq(n);
        traits->dequantize_row(w.data(), w_deq.data(), n);
        float got = 0;
        traits->vec_dot(n, w.data(), act.data(), &got);

        const DecodedAct a = DecodeAct(traits->act_type, act, x);
        double exact = 0, magnitude = 0, with_x = 0, rounding = 0;
        for (int64_t k = 0; k < n; ++k) {
          exact += w_deq[k] * a.value[k];
          magnitude += std::fabs(w_deq[k] * a.value[k]);
          with_x += static_cast<double>(w_deq[k]) * x[k];
          rounding += std::fabs(w_deq[k]) * a.half_step[k];
        }
        if (traits->act_type == GgmlType::kQ8_1) {
          exact += Q8_1MinTermCorrection(type, w, act, n, &rounding);
        }
        // Float32 accumulation over blocks and of the per-block scale products: a few
        // float epsilons (2^-24 ~ 6e-8) of Σ|w·a|.
        const double eps_bound = 3e-7 * magnitude + 1e-9;
        const double err_exact = std::fabs(got - exact);
        ASSERT_LE(err_exact, eps_bound) << "exact " << exact << " got " << got;
        const double float_bound = rounding + eps_bound;
        const double err_float = std::fabs(got - with_x);
        ASSERT_LE(err_float, float_bound) << "with float activations " << with_x;
        worst_exact = std::max(worst_exact, err_exact / eps_bound);
        worst_float = std::max(worst_float, err_float / float_bound);
      }
      if (n == 1024) {
        std::printf("%-5s error/bound: vs decoded act %.3f, vs float act %.3f\n",
                    TypeName(type).c_str(), worst_exact, worst_float);
      }
    }
  }
}

// The generic kernels reproduce the float order of llama.cpp's x86 kernels (which is what
// makes fixture logits bit-identical to llama.cpp's). Emulate that order from its
// description, for Q8_0 (no mins) and Q4_K (mins via bsums in 4 lanes), and require
// bitwise equality; also check a plain sequential order would differ on these inputs, so
// the test can tell the two apart.
constexpr int64_t kOrderN = 4096;  // elements per dot product in the float-order tests

// One block's 8 integer lanes into the 8 float accumulators, scaled by the block's d.
void AccumulateLanes(const int32_t lanes[8], float d, float acc[8]) {
  for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(lanes[l]), acc[l]);
}

// The horizontal sum of the 8 accumulators at the end.
float SumLanes(const float acc[8]) {
  float s4[4];
  for (int i = 0; i < 4; ++i) s4[i] = acc[i + 4] + acc[i];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

float X86Order(const std::vector<std::vector<int>>& block_ints, const std::vector<float>& d) {
  float acc[8] = {};
  for (size_t b = 0; b < block_ints.size(); ++b) {
    int32_t lanes[8] = {};
    for (size_t e = 0; e < block_ints[b].size(); ++e) lanes[(e % 32) / 4] += block_ints[b][e];
    AccumulateLanes(lanes, d[b], acc);
  }
  return SumLanes(acc);
}

// kOrderN Gaussian weights (scale 0.05, seed w_seed) and activations (scale 1, seed x_seed)
// as the blocks of t's quantize_row and quantize_act.
template <typename WeightBlock, typename ActBlock>
struct Quantized {
  std::vector<WeightBlock> w;
  std::vector<ActBlock> x;
};

template <typename WeightBlock, typename ActBlock>
Quantized<WeightBlock, ActBlock> QuantizeGaussians(const TypeTraits& t, uint32_t w_seed,
                                                   uint32_t x_seed) {
  Quantized<WeightBlock, ActBlock> q;
  q.w.resize(size_t(kOrderN / t.block_size));
  q.x.resize(size_t(kOrderN / LookupGgmlType(static_cast<uint32_t>(t.act_type))->block_size));
  t.quantize_row(Gaussian(kOrderN, w_seed, 0.05f).data(), q.w.data(), kOrderN);
  t.quantize_act(Gaussian(kOrderN, x_seed, 1.0f).data(), q.x.data(), kOrderN);
  return q;
}

TEST(VecDot, Q8_0FollowsLlamaCppX86FloatOrder) {
  const TypeTraits* t = GetTypeTraitsFor(GgmlType::kQ8_0, Isa::kGeneric);
  int sequential_differs = 0;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto [w, x] = QuantizeGaussians<BlockQ8_0, BlockQ8_0>(*t, 300 + seed, 400 + seed);
    std::vector<std::vector<int>> ints;
    std::vector<float> d;
    float sequential = 0;
    for (int64_t b = 0; b < kOrderN / 32; ++b) {
      ints.emplace_back(32);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += ints.back()[j] = w[b].qs[j] * x[b].qs[j];
      d.push_back(Fp16ToFp32(w[b].d) * Fp16ToFp32(x[b].d));
      sequential += sum * d.back();
    }
    float got = 0;
    t->vec_dot(kOrderN, w.data(), x.data(), &got);
    const float want = X86Order(ints, d);
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << got << " " << want;
    sequential_differs += got != sequential;
  }
  EXPECT_GT(sequential_differs, 0);
}

TEST(VecDot, Q4_KFollowsLlamaCppX86FloatOrder) {
  const TypeTraits* t = GetTypeTraitsFor(GgmlType::kQ4_K, Isa::kGeneric);
  for (uint32_t seed = 0; seed < 10; ++seed) {
    const auto [w, x] = QuantizeGaussians<BlockQ4_K, BlockQ8_K>(*t, 500 + seed, 600 + seed);
    std::vector<std::vector<int>> ints;
    std::vector<float> d;
    float acc_m[4] = {};
    for (int64_t b = 0; b < kOrderN / 256; ++b) {
      // Integer products scale · q · q8, with scale and q read from the block fields as
      // the format defines them (dequant_test.cc).
      const uint8_t* s = w[b].scales;
      int sc[8], m[8];
      for (int j = 0; j < 8; ++j) {
        sc[j] = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        m[j] = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      }
      ints.emplace_back(256);
      for (int e = 0; e < 256; ++e) {
        const uint8_t byte = w[b].qs[e / 64 * 32 + e % 32];
        const int q = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
        ints.back()[e] = sc[e / 32] * q * x[b].qs[e];
      }
      d.push_back(x[b].d * Fp16ToFp32(w[b].d));
      const float dmin = -x[b].d * Fp16ToFp32(w[b].dmin);
      for (int k = 0; k < 4; ++k) {
        const int lane = m[2 * k] * (x[b].bsums[4 * k] + x[b].bsums[4 * k + 1]) +
                         m[2 * k + 1] * (x[b].bsums[4 * k + 2] + x[b].bsums[4 * k + 3]);
        acc_m[k] = std::fma(dmin, static_cast<float>(lane), acc_m[k]);
      }
    }
    float got = 0;
    t->vec_dot(kOrderN, w.data(), x.data(), &got);
    const float want = X86Order(ints, d) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]));
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << got << " " << want;
  }
}

// Q6_K: unsigned 6-bit values in the lanes, the -32 offset taken out per lane via bsums.
TEST(VecDot, Q6_KFollowsLlamaCppX86FloatOrder) {
  const TypeTraits* t = GetTypeTraitsFor(GgmlType::kQ6_K, Isa::kGeneric);
  for (uint32_t seed = 0; seed < 10; ++seed) {
    const auto [w, x] = QuantizeGaussians<BlockQ6_K, BlockQ8_K>(*t, 700 + seed, 800 + seed);
    float acc[8] = {};
    for (int64_t b = 0; b < kOrderN / 256; ++b) {
      int32_t lanes[8] = {};
      for (int e = 0; e < 256; ++e) {
        const int chunk = e / 128, quarter = (e % 128) / 32, l = e % 32;
        const uint8_t lo_byte = w[b].ql[chunk * 64 + l + 32 * (quarter % 2)];
        const int low = quarter >= 2 ? lo_byte >> 4 : lo_byte & 15;
        const int high = (w[b].qh[chunk * 32 + l] >> (2 * quarter)) & 3;
        lanes[(e % 32) / 4] += w[b].scales[e / 16] * (low | (high << 4)) * x[b].qs[e];
      }
      for (int l = 0; l < 8; ++l) {
        lanes[l] -= 32 * (w[b].scales[2 * l] * x[b].bsums[2 * l] +
                          w[b].scales[2 * l + 1] * x[b].bsums[2 * l + 1]);
      }
      AccumulateLanes(lanes, x[b].d * Fp16ToFp32(w[b].d), acc);
    }
    const float want = SumLanes(acc);
    float got = 0;
    t->vec_dot(kOrderN, w.data(), x.data(), &got);
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << got << " " << want;
  }
}

}  // namespace
}  // namespace shardlm
