// AVX-512 kernels of the grid i-quants (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S)
// against Q8_K activations. Registered by kernels_avx512.cc.
//
// grids_avx2.cc's scheme (one decode of a row's super-block per tile, magnitudes and signs
// apart, the generic kernels' integer lanes and float order, so the results are bitwise
// theirs) with what AVX-512 adds: grid entries fetched by one gather per sub-block instead of
// scalar loads and inserts, and signs kept as a 32-bit mask (one bit per element) that negates
// the activations with one masked subtraction; the 7-bit sign codes become that mask with a
// bit deposit and a parity fold, without a table.
// Non-goals: 512-bit dot products (the decode, not the multiply-adds, bounds these types).
#include <cstring>

#include "tensor/intrinsics.h"
#include "tensor/iquant_grids.h"
#include "tensor/quant_blocks.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

float Fp16ToF32(fp16_t h) { return _cvtsh_ss(h); }

// (l0 + l4) + (l2 + l6) + ((l1 + l5) + (l3 + l7)): the generic HorizontalSum8.
float ReduceAdd(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

__m256i Load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

uint32_t Word(const void* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// The 32 sign bits of four groups' 7-bit codes (code l in bits 7l..7l+6 of `codes`): each
// code's bits in a byte, and bit 7 of the byte the parity that makes its negatives even.
uint32_t EvenSignMask(uint32_t codes) {
  const uint32_t spread = _pdep_u32(codes, 0x7F7F7F7Fu);
  uint32_t parity = spread ^ (spread >> 4);
  parity ^= parity >> 2;
  parity ^= parity >> 1;
  return spread | ((parity & 0x01010101u) << 7);
}

// Four 8-wide grid entries at the int32 indices `idx`.
__m256i Gather4(const uint64_t* grid, __m128i idx) {
  return _mm256_i32gather_epi64(reinterpret_cast<const long long*>(grid), idx, 8);
}
// Four 8-wide entries by scalar loads: on Zen 4 faster than a 4-entry gather wherever the
// indices come cheaply (IQ2_XXS, IQ2_XS, IQ1); the gathers win where computing them in vectors
// saves more (IQ2_S, and the 8-entry ones of IQ3).
__m256i Set4(uint64_t e0, uint64_t e1, uint64_t e2, uint64_t e3) {
  return _mm256_set_epi64x(static_cast<int64_t>(e3), static_cast<int64_t>(e2),
                           static_cast<int64_t>(e1), static_cast<int64_t>(e0));
}
// Eight 4-wide grid entries at the int32 indices `idx`.
__m256i Gather8(const uint32_t* grid, __m256i idx) {
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(grid), idx, 4);
}

__m128i Bytes4(const uint8_t* p) {
  return _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(Word(p))));
}
__m256i Bytes8(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(w)));
}

struct Header {
  int16_t scale16[16];
  int shift_sum_scale[8];
  float d;
};

// One sub-block of 32: magnitudes, the mask of negative values, and (IQ1_M) the mask of the
// negative 1/8 shifts.
struct SubBlock {
  __m256i mag;
  __mmask32 neg, shift_neg;
};

void SetScale32(Header* h, int ib, int scale) {
  h->scale16[2 * ib] = h->scale16[2 * ib + 1] = static_cast<int16_t>(scale);
}

void SetNibbleScales(const uint8_t* scales, Header* h) {
  for (int ib = 0; ib < 8; ++ib) {
    h->scale16[2 * ib] = static_cast<int16_t>(2 * (scales[ib] & 0xF) + 1);
    h->scale16[2 * ib + 1] = static_cast<int16_t>(2 * (scales[ib] >> 4) + 1);
  }
}

struct Iq2XxsDecoder {
  using Block = BlockIq2Xxs;
  static constexpr float kFactor = 0.125f;
  static void Head(const Block& b, Header* h) {
    h->d = Fp16ToF32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      SetScale32(h, ib, 2 * static_cast<int>(b.qs[4 * ib + 3] >> 12) + 1);
    }
  }
  static SubBlock Sub(const Block& b, int ib) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(b.qs + 4 * ib);
    return {Set4(kIq2XxsGrid[bytes[0]], kIq2XxsGrid[bytes[1]], kIq2XxsGrid[bytes[2]],
                 kIq2XxsGrid[bytes[3]]),
            EvenSignMask(Word(bytes + 4)), 0};
  }
};

struct Iq2XsDecoder {
  using Block = BlockIq2Xs;
  static constexpr float kFactor = 0.125f;
  static void Head(const Block& b, Header* h) {
    h->d = Fp16ToF32(b.d);
    SetNibbleScales(b.scales, h);
  }
  static SubBlock Sub(const Block& b, int ib) {
    const uint16_t* q = b.qs + 4 * ib;
    const uint32_t codes =
        (q[0] >> 9) | ((q[1] >> 9) << 7) | ((q[2] >> 9) << 14) | ((q[3] >> 9) << 21);
    return {Set4(kIq2XsGrid[q[0] & 511], kIq2XsGrid[q[1] & 511], kIq2XsGrid[q[2] & 511],
                 kIq2XsGrid[q[3] & 511]),
            EvenSignMask(codes), 0};
  }
};

struct Iq2SDecoder {
  using Block = BlockIq2S;
  static constexpr float kFactor = 0.125f;
  static void Head(const Block& b, Header* h) {
    h->d = Fp16ToF32(b.d);
    SetNibbleScales(b.scales, h);
  }
  static SubBlock Sub(const Block& b, int ib) {
    // Index bits 8-9 of group l: bits 2l, 2l + 1 of qh.
    const __m128i high =
        _mm_and_si128(_mm_sllv_epi32(_mm_set1_epi32(b.qh[ib]), _mm_setr_epi32(8, 6, 4, 2)),
                      _mm_set1_epi32(0x300));
    const __m128i idx = _mm_or_si128(Bytes4(b.qs + 4 * ib), high);
    return {Gather4(kIq2SGrid.data(), idx), Word(b.qs + kQK_K / 8 + 4 * ib), 0};
  }
};

struct Iq3XxsDecoder {
  using Block = BlockIq3Xxs;
  static constexpr float kFactor = 0.25f;
  static void Head(const Block& b, Header* h) {
    h->d = Fp16ToF32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      SetScale32(h, ib, 2 * static_cast<int>(Word(b.qs + kQK_K / 4 + 4 * ib) >> 28) + 1);
    }
  }
  static SubBlock Sub(const Block& b, int ib) {
    return {Gather8(kIq3XxsGrid.data(), Bytes8(b.qs + 8 * ib)),
            EvenSignMask(Word(b.qs + kQK_K / 4 + 4 * ib)), 0};
  }
};

struct Iq3SDecoder {
  using Block = BlockIq3S;
  static constexpr float kFactor = 1.0f;
  static void Head(const Block& b, Header* h) {
    h->d = Fp16ToF32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      SetScale32(h, ib, 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1);
    }
  }
  static SubBlock Sub(const Block& b, int ib) {
    // Index bit 8 of entry k: bit k of qh.
    const __m256i high = _mm256_and_si256(
        _mm256_sllv_epi32(_mm256_set1_epi32(b.qh[ib]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)),
        _mm256_set1_epi32(256));
    const __m256i idx = _mm256_or_si256(Bytes8(b.qs + 8 * ib), high);
    return {Gather8(kIq3SGrid.data(), idx), Word(b.signs + 4 * ib), 0};
  }
};

// IQ1 entries are signed (−1, 0, 1): magnitudes and the mask of their negatives.
SubBlock SignedSub(__m256i q, __mmask32 shift_neg) {
  return {_mm256_abs_epi8(q), _mm256_movepi8_mask(q), shift_neg};
}

struct Iq1SDecoder {
  using Block = BlockIq1S;
  static constexpr float kFactor = 1.0f;
  static void Head(const Block& b, Header* h) {
    h->d = Fp16ToF32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      const int qh = b.qh[ib];
      const int scale = 2 * ((qh >> 12) & 7) + 1;
      SetScale32(h, ib, scale);
      h->shift_sum_scale[ib] = qh & 0x8000 ? -scale : scale;
    }
  }
  static SubBlock Sub(const Block& b, int ib) {
    const int qh = b.qh[ib];
    const uint8_t* qs = b.qs + 4 * ib;
    return SignedSub(
        Set4(kIq1SGrid[qs[0] | ((qh << 8) & 0x700)], kIq1SGrid[qs[1] | ((qh << 5) & 0x700)],
             kIq1SGrid[qs[2] | ((qh << 2) & 0x700)], kIq1SGrid[qs[3] | ((qh >> 1) & 0x700)]),
        0);
  }
};

struct Iq1MDecoder {
  using Block = BlockIq1M;
  static constexpr float kFactor = 1.0f;
  static void Head(const Block& b, Header* h) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof(sc));
    h->d = Fp16ToF32(static_cast<fp16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                         ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
    for (int ib = 0; ib < 8; ++ib) {
      h->scale16[2 * ib] = static_cast<int16_t>(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
      h->scale16[2 * ib + 1] =
          static_cast<int16_t>(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
    }
  }
  static SubBlock Sub(const Block& b, int ib) {
    // Group l's nibble: bits 4l..4l+3 of the two qh bytes; index bits 8-10, then the shift sign.
    const uint8_t* qs = b.qs + 4 * ib;
    const int h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
    const uint32_t nibbles = static_cast<uint32_t>(h0 | (h1 << 8));
    // The shift sign of group l (bit 4l + 3) for its 8 elements.
    const uint32_t shift_neg = _pdep_u32(_pext_u32(nibbles, 0x8888u), 0x01010101u) * 0xFFu;
    return SignedSub(
        Set4(kIq1SGrid[qs[0] | ((h0 << 8) & 0x700)], kIq1SGrid[qs[1] | ((h0 << 4) & 0x700)],
             kIq1SGrid[qs[2] | ((h1 << 8) & 0x700)], kIq1SGrid[qs[3] | ((h1 << 4) & 0x700)]),
        shift_neg);
  }
};

__m256i Scales(const Header& h, int ib) {
  return _mm256_set_m128i(_mm_set1_epi16(h.scale16[2 * ib + 1]), _mm_set1_epi16(h.scale16[2 * ib]));
}

enum class Shift { kNone, kBlockSums, kElements };

struct PairSums {
  __m256i isum, shift_isum;
};

// The activations with the values' signs, vpmaddubsw against the magnitudes, vpmaddwd by the
// scales: the generic kernel's exact int32 lanes.
template <Shift kShift>
void AddSub(const SubBlock& sub, __m256i a, __m256i scales, PairSums* p) {
  const __m256i signed_a = _mm256_mask_sub_epi8(a, sub.neg, _mm256_setzero_si256(), a);
  const __m256i pairs = _mm256_maddubs_epi16(sub.mag, signed_a);
  p->isum = _mm256_add_epi32(p->isum, _mm256_madd_epi16(pairs, scales));
  if constexpr (kShift == Shift::kElements) {
    const __m256i shifted = _mm256_mask_sub_epi8(a, sub.shift_neg, _mm256_setzero_si256(), a);
    const __m256i shift_pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), shifted);
    p->shift_isum = _mm256_add_epi32(p->shift_isum, _mm256_madd_epi16(shift_pairs, scales));
  }
}

template <class D, Shift kShift = Shift::kNone>
struct GridKernel {
  struct Decoded {
    Header h;
    SubBlock sub[kQK_K / kQK];
  };

  template <int NR, int NC>
  static void Run(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                  int64_t act_stride, float* out, int64_t out_stride) {
    using Block = typename D::Block;
    const int64_t nb = n / kQK_K;
    __m256 acc[NR][NC], shift_acc[NR][NC];
    float shift_total[NR][NC];
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
      acc[r][c] = _mm256_setzero_ps();
      shift_acc[r][c] = _mm256_setzero_ps();
      shift_total[r][c] = 0;
    }
    Decoded g[NR];
    for (int64_t b = 0; b < nb; ++b) {
      PairSums sums[NR][NC];
      SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
        const Block* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
        simd::PrefetchNextTile<NR>(blk, w_stride, sizeof(Block));
        D::Head(*blk, &g[r].h);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          sums[r][c] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        }
      }
      if constexpr (NR == 1 && NC == 1) {
        const Block* blk = reinterpret_cast<const Block*>(w) + b;
        const auto* a = reinterpret_cast<const BlockQ8_K*>(act) + b;
        for (int ib = 0; ib < kQK_K / kQK; ++ib) {
          AddSub<kShift>(D::Sub(*blk, ib), Load32(a->qs + ib * kQK), Scales(g[0].h, ib),
                         &sums[0][0]);
        }
      } else {
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const Block* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
          for (int ib = 0; ib < kQK_K / kQK; ++ib) g[r].sub[ib] = D::Sub(*blk, ib);
        }
        for (int ib = 0; ib < kQK_K / kQK; ++ib) {
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            const auto* a = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
            const __m256i av = Load32(a->qs + ib * kQK);
            SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
              AddSub<kShift>(g[r].sub[ib], av, Scales(g[r].h, ib), &sums[r][c]);
            }
          }
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const auto* a = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
        SHARDLM_UNROLL for (int r = 0; r < NR; ++r) {
          const float d = g[r].h.d * a->d;
          acc[r][c] =
              _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sums[r][c].isum), acc[r][c]);
          if constexpr (kShift == Shift::kElements) {
            shift_acc[r][c] = _mm256_fmadd_ps(
                _mm256_set1_ps(d), _mm256_cvtepi32_ps(sums[r][c].shift_isum), shift_acc[r][c]);
          }
          if constexpr (kShift == Shift::kBlockSums) {
            int sum = 0;
            for (int ib = 0; ib < 8; ++ib) {
              sum += (a->bsums[2 * ib] + a->bsums[2 * ib + 1]) * g[r].h.shift_sum_scale[ib];
            }
            shift_total[r][c] =
                __builtin_fmaf(a->d * g[r].h.d, static_cast<float>(sum), shift_total[r][c]);
          }
        }
      }
    }
    SHARDLM_UNROLL for (int r = 0; r < NR; ++r) SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
      float v = D::kFactor * ReduceAdd(acc[r][c]);
      if constexpr (kShift == Shift::kElements) v += 0.125f * ReduceAdd(shift_acc[r][c]);
      if constexpr (kShift == Shift::kBlockSums) v += 0.125f * shift_total[r][c];
      out[r * out_stride + c] = v;
    }
  }
};

}  // namespace

void FillGridsAvx512(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kIq2Xxs:
      simd::Install<GridKernel<Iq2XxsDecoder>, 2, 4>(traits);
      return;
    case GgmlType::kIq2Xs:
      simd::Install<GridKernel<Iq2XsDecoder>, 2, 4>(traits);
      return;
    case GgmlType::kIq2S:
      simd::Install<GridKernel<Iq2SDecoder>, 2, 4>(traits);
      return;
    case GgmlType::kIq3Xxs:
      simd::Install<GridKernel<Iq3XxsDecoder>, 2, 4>(traits);
      return;
    case GgmlType::kIq3S:
      simd::Install<GridKernel<Iq3SDecoder>, 2, 4>(traits);
      return;
    case GgmlType::kIq1S:
      simd::Install<GridKernel<Iq1SDecoder, Shift::kBlockSums>, 2, 4>(traits);
      return;
    case GgmlType::kIq1M:
      simd::Install<GridKernel<Iq1MDecoder, Shift::kElements>, 2, 4>(traits);
      return;
    default:
      return;
  }
}

}  // namespace shardlm::internal
