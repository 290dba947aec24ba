// Tests of the SwiGLU kernels (model/ffn_kernels.h): every ISA gives the generic kernel's
// bits, and the generic kernel is within a few ulp of silu(g)·up computed in double.
#include "model/ffn_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace shardlm {
namespace {

// Gates over the range a model produces plus the edges: signed zeros, the exp clamp
// (|g| > 87), tiny and huge magnitudes; odd lengths exercise the SIMD tails.
std::vector<float> Gates(size_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> g(n);
  for (float& v : g) v = normal(rng);
  const float edges[] = {0.0f,   -0.0f,  1e-30f,  -1e-30f, 87.0f,  -87.0f, 88.5f,
                         -88.5f, 300.0f, -300.0f, 1e30f,   -1e30f, 0.5f,   -0.5f};
  for (size_t i = 0; i < std::size(edges) && i < n; ++i) g[i * 3 % n] = edges[i];
  return g;
}

TEST(FfnKernelsTest, EveryIsaGivesTheGenericBits) {
  const FfnKernels* generic = GetFfnKernelsFor(Isa::kGeneric);
  ASSERT_NE(generic, nullptr);
  for (size_t n : {1u, 7u, 8u, 15u, 16u, 33u, 3072u}) {
    const std::vector<float> gate = Gates(n);
    std::vector<float> up(n);
    for (size_t i = 0; i < n; ++i) up[i] = float(i % 5) - 1.5f;
    std::vector<float> want(n);
    generic->swiglu(gate.data(), up.data(), int64_t(n), want.data());
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      const FfnKernels* kernels = GetFfnKernelsFor(isa);
      if (kernels == nullptr) continue;
      SCOPED_TRACE(IsaName(isa));
      std::vector<float> got = gate;  // in place: out aliases gate
      kernels->swiglu(got.data(), up.data(), int64_t(n), got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << "n " << n;
    }
  }
}

TEST(FfnKernelsTest, GenericIsSiluTimesUp) {
  const std::vector<float> gate = Gates(4096);
  const std::vector<float> up(gate.size(), 1.0f);
  std::vector<float> got(gate.size());
  GetFfnKernelsFor(Isa::kGeneric)->swiglu(gate.data(), up.data(), int64_t(gate.size()), got.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double want = g / (1.0 + std::exp(-g));
    // Below g = −87 exp is clamped at e^−87: silu is then off by under 1e-35 absolute.
    const double tol = 4 * std::numeric_limits<float>::epsilon() * std::fabs(want) + 1e-35;
    ASSERT_LE(std::fabs(got[i] - want), tol) << "g = " << gate[i];
  }
}

}  // namespace
}  // namespace shardlm
