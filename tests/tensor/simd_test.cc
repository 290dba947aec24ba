// Tests of the ISA kernel overrides (kernels_avx2.cc, kernels_avx512.cc and their family
// files) against the generic (scalar) kernels, on every ISA this CPU has.
//
// Goals: (1) vec_dot of each ISA agrees with the generic vec_dot within a float-summation
// bound derived from Σ|w·x| and epsilon (the worst case is printed); (2) vec_dot_tile is
// BITWISE equal to vec_dot for every element, for every nr x nc up to the tile size, with
// padded strides (the batch-composition invariance contract of type_traits.h);
// (3) an overridden quantize_act produces exactly the generic bytes; (4) an overridden
// dequantize_row (F16, Q8_0: also the KV cache's rows) gives exactly the generic floats.
// Non-goals: the generic kernels' own accuracy against llama.cpp (kernels_generic tests).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"
#include "tensor/fp16.h"
#include "tensor/kernels_impl.h"
#include "tensor/quant_blocks.h"
#include "tensor/test_matrices.h"

namespace shardlm {
namespace {

using internal::FillAvx2Kernels;
using internal::FillAvx512Kernels;
using internal::FillGenericKernels;

struct IsaCase {
  const char* name;
  Isa isa;
  void (*fill)(TypeTraits&);
  bool supported() const { return CpuHasIsa(isa); }
};

const IsaCase kIsas[] = {{"avx2", Isa::kAvx2, FillAvx2Kernels},
                         {"avx512", Isa::kAvx512, FillAvx512Kernels}};

int64_t TypeSize(GgmlType type) { return LookupGgmlType(static_cast<uint32_t>(type))->type_size; }
int64_t BlockSize(GgmlType type) { return LookupGgmlType(static_cast<uint32_t>(type))->block_size; }
using testing::TypeName;

uint16_t RandomScale(std::mt19937& rng) {
  // fp16 bit patterns of positive values in about [2^-10, 2^-6): exponent 5..8, any mantissa.
  return static_cast<uint16_t>(((5 + rng() % 4) << 10) | (rng() & 0x3ff));
}

// A weight row of random bits, with every fp16 scale field replaced by a sane positive
// value, so all quant bit patterns (including the extremes) are exercised.
std::vector<uint8_t> RandomWeightRow(GgmlType type, int64_t n, std::mt19937& rng) {
  const int64_t nb = n / BlockSize(type);
  const int64_t tsize = TypeSize(type);
  std::vector<uint8_t> row(nb * tsize);
  for (auto& byte : row) byte = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = row.data() + b * tsize;
    auto set = [&](size_t offset) {
      const uint16_t v = RandomScale(rng);
      std::memcpy(blk + offset, &v, 2);
    };
    switch (type) {
      case GgmlType::kF32: {
        const float v = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::memcpy(blk, &v, 4);
        break;
      }
      case GgmlType::kF16: {  // fp16 in ±[2^-4, 2): exponent 11..15
        const uint16_t v =
            static_cast<uint16_t>((rng() & 0x8000) | ((11 + rng() % 5) << 10) | (rng() & 0x3ff));
        std::memcpy(blk, &v, 2);
        break;
      }
      case GgmlType::kBF16: {  // bf16 in ±[2^-4, 2)
        const uint16_t v =
            static_cast<uint16_t>((rng() & 0x8000) | ((123 + rng() % 5) << 7) | (rng() & 0x7f));
        std::memcpy(blk, &v, 2);
        break;
      }
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kQ8_0:
      case GgmlType::kIq4Nl:
        set(0);
        break;
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:
        set(0), set(2);
        break;
      case GgmlType::kQ2_K:
        set(offsetof(BlockQ2_K, d)), set(offsetof(BlockQ2_K, dmin));
        break;
      case GgmlType::kQ3_K:
        set(offsetof(BlockQ3_K, d));
        break;
      case GgmlType::kQ4_K:
        set(offsetof(BlockQ4_K, d)), set(offsetof(BlockQ4_K, dmin));
        break;
      case GgmlType::kQ5_K:
        set(offsetof(BlockQ5_K, d)), set(offsetof(BlockQ5_K, dmin));
        break;
      case GgmlType::kQ6_K:
        set(offsetof(BlockQ6_K, d));
        break;
      case GgmlType::kIq4Xs:
        set(offsetof(BlockIq4Xs, d));
        break;
      case GgmlType::kIq2Xxs:
      case GgmlType::kIq2Xs:
      case GgmlType::kIq2S:
      case GgmlType::kIq3Xxs:
      case GgmlType::kIq3S:
      case GgmlType::kIq1S:
        set(0);
        break;
      case GgmlType::kIq1M: {  // the fp16 scale sits in the top nibbles of the four scale words
        const uint16_t v = RandomScale(rng);
        for (int i = 0; i < 4; ++i) {
          uint8_t* word = blk + offsetof(BlockIq1M, scales) + 2 * i;
          word[1] = static_cast<uint8_t>((word[1] & 0x0F) | (((v >> (4 * i)) & 15) << 4));
        }
        break;
      }
      case GgmlType::kTq1_0:
        set(offsetof(BlockTq1_0, d));
        break;
      case GgmlType::kTq2_0:
        set(offsetof(BlockTq2_0, d));
        break;
      case GgmlType::kMxfp4:  // scales 2^-8 .. 2^3
        blk[0] = static_cast<uint8_t>(120 + rng() % 12);
        break;
      default:
        break;
    }
  }
  return row;
}

TypeTraits Traits(GgmlType type, void (*fill)(TypeTraits&)) {
  TypeTraits traits;
  traits.type = type;
  FillGenericKernels(traits);
  if (fill != nullptr) fill(traits);
  return traits;
}

// rows x cols matrices of weights and quantized activations, rows padded by `pad` bytes; the
// activation rows as the kernels of `traits` read them (QuantizeActRow: the act_type blocks,
// alike on every ISA, then the side data of traits' ISA, which other ISAs' kernels skip).
struct Operands {
  int64_t n = 0, w_stride = 0, act_stride = 0;
  std::vector<uint8_t> w, act;
  std::vector<std::vector<float>> w_deq, x;
};

Operands MakeOperands(const TypeTraits& traits, int64_t n, int rows, int cols, int pad,
                      std::mt19937& rng) {
  Operands op;
  op.n = n;
  op.w_stride = RowBytes(*LookupGgmlType(uint32_t(traits.type)), n) + pad;
  op.act_stride = ActRowBytes(traits, n) + pad;
  op.w.assign(op.w_stride * rows, 0);
  op.act.assign(op.act_stride * cols, 0);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int r = 0; r < rows; ++r) {
    const auto row = RandomWeightRow(traits.type, n, rng);
    std::memcpy(op.w.data() + r * op.w_stride, row.data(), row.size());
    op.w_deq.emplace_back(n);
    traits.dequantize_row(row.data(), op.w_deq.back().data(), n);
  }
  for (int c = 0; c < cols; ++c) {
    op.x.emplace_back(n);
    for (auto& v : op.x.back()) v = gauss(rng);
    QuantizeActRow(traits, op.x.back().data(), op.act.data() + c * op.act_stride, n);
  }
  return op;
}

// Bound on the difference of two float summation orders of the same exact products
// (plus the llama.cpp quirks both share): 8 · epsilon · Σ|w·x|. Observed worst: ~0.06 of it.
double Tolerance(const Operands& op, int r, int c) {
  double mag = 0;
  for (int64_t i = 0; i < op.n; ++i) mag += std::fabs(double(op.w_deq[r][i]) * op.x[c][i]);
  return 8.0 * 1.2e-7 * mag + 1e-30;
}

class SimdIsaTest : public ::testing::TestWithParam<int> {};

TEST(SimdIsa, VecDotMatchesGeneric) {
  std::mt19937 rng(1234);
  for (const IsaCase& isa : kIsas) {
    if (!isa.supported()) continue;
    for (GgmlType type : testing::kComputableTypes) {
      const TypeTraits generic = Traits(type, nullptr);
      const TypeTraits fast = Traits(type, isa.fill);
      if (generic.vec_dot == nullptr || generic.quantize_act == nullptr) continue;
      if (fast.vec_dot == generic.vec_dot) continue;  // not accelerated on this ISA
      const int64_t bs = std::max<int64_t>(BlockSize(type), 32);
      for (int64_t n : {bs, 3 * bs, 1024 * bs / 32, BlockSize(type) == 1 ? int64_t{1000} : bs}) {
        const Operands op = MakeOperands(fast, n, 3, 3, 0, rng);
        double worst = 0, worst_err = 0, worst_tol = 0;
        for (int r = 0; r < 3; ++r) {
          for (int c = 0; c < 3; ++c) {
            float want = 0, got = 0;
            generic.vec_dot(n, op.w.data() + r * op.w_stride, op.act.data() + c * op.act_stride,
                            &want);
            fast.vec_dot(n, op.w.data() + r * op.w_stride, op.act.data() + c * op.act_stride, &got);
            const double err = std::fabs(double(got) - want), tol = Tolerance(op, r, c);
            if (err / tol >= worst) worst = err / tol, worst_err = err, worst_tol = tol;
            EXPECT_LE(err, tol) << isa.name << " " << TypeName(type) << " n=" << n << " r=" << r
                                << " c=" << c << " got " << got << " want " << want;
          }
        }
        std::printf("[%s %s n=%lld] worst |err| %.3g = %.3f of tolerance %.3g\n", isa.name,
                    TypeName(type).c_str(), static_cast<long long>(n), worst_err, worst, worst_tol);
      }
    }
  }
}

// Every element of every nr x nc tile (offset by one row and one token, padded strides,
// out_stride > nc) against vec_dot, for a short row (odd block count, vector tails) and a
// Qwen3-sized one.
void CheckTiles(const IsaCase& isa, const TypeTraits& fast, int64_t n, std::mt19937& rng) {
  const int rows = fast.tile_rows + 1, cols = fast.tile_cols + 1;
  const Operands op = MakeOperands(fast, n, rows, cols, 7, rng);
  std::vector<float> single(rows * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      fast.vec_dot(n, op.w.data() + r * op.w_stride, op.act.data() + c * op.act_stride,
                   &single[r * cols + c]);
  int checked = 0;
  for (int nr = 1; nr <= fast.tile_rows; ++nr) {
    for (int nc = 1; nc <= fast.tile_cols; ++nc) {
      const int64_t out_stride = nc + 3;
      std::vector<float> out(nr * out_stride, -1.0f);
      fast.vec_dot_tile(n, op.w.data() + op.w_stride, op.w_stride, nr,
                        op.act.data() + op.act_stride, op.act_stride, nc, out.data(), out_stride);
      for (int r = 0; r < nr; ++r) {
        for (int c = 0; c < nc; ++c) {
          const float want = single[(r + 1) * cols + c + 1], got = out[r * out_stride + c];
          EXPECT_EQ(std::memcmp(&want, &got, 4), 0)
              << isa.name << " " << TypeName(fast.type) << " n=" << n << " tile " << nr << "x" << nc
              << " (" << r << "," << c << "): " << got << " vs vec_dot " << want;
          ++checked;
        }
      }
    }
  }
  std::printf("[%s %s n=%lld] tile %dx%d: %d elements bitwise equal to vec_dot\n", isa.name,
              TypeName(fast.type).c_str(), static_cast<long long>(n), fast.tile_rows,
              fast.tile_cols, checked);
}

TEST(SimdIsa, TileIsBitwiseVecDot) {
  std::mt19937 rng(99);
  for (const IsaCase& isa : kIsas) {
    if (!isa.supported()) continue;
    for (GgmlType type : testing::kComputableTypes) {
      const TypeTraits fast = Traits(type, isa.fill);
      if (fast.vec_dot_tile == nullptr || fast.quantize_act == nullptr) continue;
      const bool plain = BlockSize(type) == 1;
      CheckTiles(isa, fast, plain ? 1000 : 5 * std::max<int64_t>(BlockSize(type), 32), rng);
      CheckTiles(isa, fast, plain ? 3000 : 3072, rng);
    }
  }
}

// Rows that stress the activation quantizers: gaussian; exact .5 products (max 127 makes
// the Q8_0 factor 1 and max -127 the Q8_K factor 1, so k + 0.5 hits round-half-even); an
// all-zero block; a repeated maximum of either sign (first occurrence wins in Q8_K).
std::vector<std::vector<float>> ActRows(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> gauss(0.0f, 2.0f);
  std::vector<std::vector<float>> rows(4, std::vector<float>(n));
  for (auto& v : rows[0]) v = gauss(rng);
  for (int64_t j = 0; j < n; ++j) rows[1][j] = static_cast<float>(j % 41) - 20.5f;
  for (int64_t j = 0; j < n; j += 32) rows[1][j] = (j / 32) % 2 ? 127.0f : -127.0f;
  for (int64_t j = 0; j < n; ++j) rows[2][j] = j < 256 ? 0.0f : gauss(rng) * 1e-3f;
  for (int64_t j = 0; j < n; ++j) rows[3][j] = (j % 7 == 3) ? ((j / 7) % 2 ? 3.0f : -3.0f) : 1.0f;
  return rows;
}

TEST(SimdIsa, QuantizeActIsBitwiseGeneric) {
  std::mt19937 rng(7);
  for (const IsaCase& isa : kIsas) {
    if (!isa.supported()) continue;
    for (GgmlType type : testing::kComputableTypes) {
      const TypeTraits generic = Traits(type, nullptr);
      const TypeTraits fast = Traits(type, isa.fill);
      if (fast.quantize_act == generic.quantize_act) continue;
      const int64_t n = 3072;
      const int64_t bytes = RowBytes(*LookupGgmlType(uint32_t(generic.act_type)), n);
      int row_idx = 0;
      for (const auto& x : ActRows(n, rng)) {
        std::vector<uint8_t> want(bytes), got(bytes);
        generic.quantize_act(x.data(), want.data(), n);
        fast.quantize_act(x.data(), got.data(), n);
        EXPECT_EQ(want, got) << isa.name << " " << TypeName(type) << " row " << row_idx;
        ++row_idx;
      }
      std::printf("[%s %s] quantize_act to %s: %d rows byte-identical\n", isa.name,
                  TypeName(type).c_str(), TypeName(generic.act_type).c_str(), row_idx);
    }
  }
}

// Rows of every type whose dequantize_row an ISA overrides: the generic reference quantizer's
// blocks of the activation rows above, read back bitwise as the generic kernel reads them.
TEST(SimdIsa, DequantizeRowIsBitwiseGeneric) {
  std::mt19937 rng(11);
  for (const IsaCase& isa : kIsas) {
    if (!isa.supported()) continue;
    for (GgmlType type : testing::kComputableTypes) {
      const TypeTraits generic = Traits(type, nullptr);
      const TypeTraits fast = Traits(type, isa.fill);
      if (fast.dequantize_row == generic.dequantize_row) continue;
      for (int64_t n : {int64_t{32}, int64_t{128}, int64_t{3072}}) {
        const int64_t bytes = RowBytes(*LookupGgmlType(uint32_t(type)), n);
        for (const auto& x : ActRows(n, rng)) {
          std::vector<uint8_t> row(bytes);
          generic.quantize_row(x.data(), row.data(), n);
          std::vector<float> want(n), got(n);
          generic.dequantize_row(row.data(), want.data(), n);
          fast.dequantize_row(row.data(), got.data(), n);
          EXPECT_EQ(std::memcmp(want.data(), got.data(), 4 * size_t(n)), 0)
              << isa.name << " " << TypeName(type) << " n=" << n;
        }
      }
    }
  }
}

// F16 rows written on every ISA (quantize_act, the F16 KV cache's writer) against
// Fp32ToFp16 over the edges: ties, subnormals, overflow to infinity, infinities, signed
// zeros; NaN stays NaN.
TEST(SimdIsa, F16QuantizeActMatchesFp32ToFp16OnEdges) {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          1.0f + 1.0f / 2048,
                          1.0f + 3.0f / 2048,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e6f,
                          -1e6f,
                          5.9604645e-8f,
                          2.9802322e-8f,
                          2.98023259e-8f,
                          1e-10f,
                          6.1035156e-5f,
                          6.097555e-5f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int i = 0; i < 61; ++i) {
    const float r = gauss(rng);
    x.push_back(r);
    x.push_back(r * 1e-6f);
    x.push_back(r * 3e4f);
  }
  const int64_t n = int64_t(x.size());
  std::vector<fp16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = Fp32ToFp16(x[i]);
  std::vector<const IsaCase*> isas = {nullptr};
  for (const IsaCase& isa : kIsas) {
    if (isa.supported()) isas.push_back(&isa);
  }
  for (const IsaCase* isa : isas) {
    const TypeTraits f16 = Traits(GgmlType::kF16, isa ? isa->fill : nullptr);
    const char* name = isa ? isa->name : "generic";
    std::vector<fp16_t> got(x.size());
    f16.quantize_act(x.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[size_t(i)], want[size_t(i)]) << name << " x=" << x[size_t(i)];
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    fp16_t h = 0;
    f16.quantize_act(&nan, &h, 1);
    EXPECT_TRUE(std::isnan(Fp16ToFp32(h))) << name;
  }
}

// Q8_0 rows (as the KV cache stores them, written by quantize_act): dequantize_row gives the
// blocks' qs · d on every ISA, within about half a quantization step of the input.
TEST(SimdIsa, Q8_0RowsDequantizeToQsTimesD) {
  const TypeTraits generic = Traits(GgmlType::kQ8_0, nullptr);
  std::mt19937 rng(41);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int n : {32, 64, 128, 256}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = gauss(rng);
    std::vector<BlockQ8_0> blocks(static_cast<size_t>(n / kQK));
    generic.quantize_act(x.data(), blocks.data(), n);
    std::vector<float> want(static_cast<size_t>(n));
    generic.dequantize_row(blocks.data(), want.data(), n);
    for (int i = 0; i < n; ++i) {
      const BlockQ8_0& b = blocks[size_t(i / kQK)];
      const float d = Fp16ToFp32(b.d);
      EXPECT_EQ(want[size_t(i)], float(b.qs[i % kQK]) * d) << i;
      // Half a step, plus 127 × the rounding of d to f16 (2^-11 relative).
      EXPECT_LE(std::fabs(want[size_t(i)] - x[size_t(i)]), 0.57f * d) << i;
    }
    for (const IsaCase& isa : kIsas) {
      if (!isa.supported()) continue;
      std::vector<float> got(static_cast<size_t>(n));
      Traits(GgmlType::kQ8_0, isa.fill).dequantize_row(blocks.data(), got.data(), n);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * size_t(n)), 0)
          << isa.name << " q8_0 n=" << n;
    }
  }
}

}  // namespace
}  // namespace shardlm
