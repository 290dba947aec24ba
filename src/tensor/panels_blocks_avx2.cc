// AVX2 kernels over the panels of the 32-element block types, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL and MXFP4 (panels.h: 16 rows x 64 columns per panel block), for CPUs without AVX-512,
// where decode is bound by the row kernels' instructions (a Zen 3 core decodes Q4_K at ~10 GB/s of
// the ~22 it reads). Registered by kernels_avx2.cc, with the activation side data (PanelActSide)
// for every type that converts to Q8_0.
//
// Scheme: a 64-byte panel vector is two 256-bit halves, rows 0-7 and rows 8-15, each computed
// on its own (panel_kernel_avx2_inl.h: in one pass over the panel for decode). Per group of 4
// columns and token, vpmaddubsw multiplies unsigned weights of 8 rows by the token's
// 4 activation bytes (broadcast) into int16 pairs; vpmaddwd widens them to int32 lanes, one per
// row.
// - Q4_0, Q5_0, MXFP4: unsigned weights u = level + offset (Q4_0, Q5_0: the stored q; MXFP4:
//   vpshufb of the nibbles), once per block for all tokens; the pairs of several groups add up in
//   int16 before one widening, and the offset enters as the block's start −offset·Σa (from
//   PanelActSide::offset = −128·Σa, exact).
// - Q8_0, IQ4_NL: signed levels (the stored q + 128 XOR 0x80; vpshufb of the nibbles), whose
//   magnitudes multiply the activations with the levels' signs (vpsignb), pairs of at most
//   2·128·127 < 2^15, widened per group.
// - Q4_1, Q5_1: q unsigned as it is against Q8_1 activations, the mins through their sums.
// Either way a block's integer sum I is the AVX-512 kernels' and F += float(I)·(d·d_act) is
// their float step: the outputs are bitwise the AVX-512 panels'.
//
// Goals: decode and prefill with the unpacking shared by the tokens of a call and the scales
// applied to 8 rows at once (Qwen3-0.6B Q4_0 on a Zen 3, 2 threads, paired against the row
// kernels: tg 1.54x, pp512 2.2x).
#include <array>

#include "tensor/panel_kernel_avx2_inl.h"

namespace shardlm::internal::panels {
namespace {

// The 4-bit field of group g (of 8) of a nibble panel's block k, rows of half `half`.
inline __m256i NibbleGroup(const uint8_t (*pairs)[64], int g, int half) {
  __m256i q[2];
  HalfNibbles(pairs[g / 2], half, q);
  return q[g % 2];
}
// vpshufb's table of 16 bytes.
inline __m256i LevelTable(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}
// A table of 16 signed levels as unsigned bytes: values[q] + offset.
constexpr std::array<int8_t, 16> UnsignedLevels(const int8_t (&values)[16], int offset) {
  std::array<int8_t, 16> u{};
  for (int q = 0; q < 16; ++q) u[q] = static_cast<int8_t>(values[q] + offset);
  return u;
}

// Σ u·a over one block's 8 groups of 4 columns for NC tokens, u the unsigned weights of 8 rows
// that group(g) gives, a the tokens' 32 activation bytes: int32 lane i = row 8·half + i.
// vpmaddubsw's int16 pairs of kGroupsPerSum groups add up in int16 before one vpmaddwd widens
// them (exact while kGroupsPerSum·2·u_max·128 < 2^15), so a group and token cost one multiply
// and one add.
template <int NC, int kGroupsPerSum, class GroupFn>
[[gnu::always_inline]] inline void UnsignedBlockSums(GroupFn group, const int8_t* const (&a)[NC],
                                                     __m256i (&i)[NC]) {
  const __m256i ones = _mm256_set1_epi16(1);
  SHARDLM_UNROLL for (int first = 0; first < 8; first += kGroupsPerSum) {
    __m256i s[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) s[c] = _mm256_setzero_si256();
    SHARDLM_UNROLL for (int g = first; g < first + kGroupsPerSum; ++g) {
      const __m256i w = group(g);
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(w, Bcast32(a[c] + 4 * g)));
        TileInRegister<NC>(s[c]);
      }
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
      const __m256i sum = _mm256_madd_epi16(s[c], ones);
      i[c] = first == 0 ? sum : _mm256_add_epi32(i[c], sum);
    }
  }
}

// Per weight type: Scale(p, k, half), the rows' block scales as floats, and either
// - kOffset = 0: Group(p, k, g, half), the signed levels of the 8 rows' group g (4 columns) of
//   block k, whose magnitudes multiply the activations with the levels' signs (vpsignb), pairs
//   widened per group; or
// - kOffset > 0: Group(p, k, g, half), unsigned weights u = level + kOffset
//   (UnsignedBlockSums), summed kGroupsPerSum groups at a time; the block's integer
//   sum is Σ u·a − kOffset·Σa, the second term from the activations' PanelActSide::offset
//   (−128·Σa, exact).
// Q4_0: the nibbles q, level q − 8: eight groups in int16 (8·2·15·128 < 2^15).
struct Q4_0Weights {
  using Panel = PanelNibbles;
  static constexpr int kOffset = 8, kGroupsPerSum = 8;
  static __m256i Group(const Panel& p, int k, int g, int half) {
    return NibbleGroup(p.qs[k], g, half);
  }
  static __m256 Scale(const Panel& p, int k, int half) { return HalfFp16(p.d[k], half); }
};
// IQ4_NL: signed levels −127..113 from a table. Unsigned, u = level + 127 ≤ 240 is too wide for
// vpmaddubsw's pairs: as two nibbles 16·h + l it took twice the multiplies and 1.1-1.4x the
// signed path's time on a Zen 3.
struct Iq4NlWeights {
  using Panel = PanelNibbles;
  static constexpr int kOffset = 0;
  static __m256i Group(const Panel& p, int k, int g, int half) {
    return _mm256_shuffle_epi8(LevelTable(kIq4NlValues), NibbleGroup(p.qs[k], g, half));
  }
  static __m256 Scale(const Panel& p, int k, int half) { return HalfFp16(p.d[k], half); }
};
// MXFP4: levels −12..12, u = level + 12 ≤ 24 from one table, four groups in int16
// (4·2·24·128 < 2^15).
struct Mxfp4Weights {
  using Panel = PanelMxfp4;
  static constexpr int kOffset = 12, kGroupsPerSum = 4;
  static constexpr std::array<int8_t, 16> kUnsigned = UnsignedLevels(kMxfp4Values, kOffset);
  static __m256i Group(const Panel& p, int k, int g, int half) {
    return _mm256_shuffle_epi8(LevelTable(kUnsigned.data()), NibbleGroup(p.qs[k], g, half));
  }
  // 2^(e − 128) as floats (e < 2: the subnormals 2^−127, 2^−126).
  static __m256 Scale(const Panel& p, int k, int half) {
    const __m256i e =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p.e[k] + 8 * half)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
  }
};
// Q8_0: the panel holds u = q + 128 (for the AVX-512 kernels' vpdpbusd), too wide for
// vpmaddubsw's pairs; q = u XOR 0x80 as signed levels. A q of −128 (not made by the Q8_0
// quantizer, possible in a file) is exact too: its magnitude, 0x80, is 128 to vpmaddubsw's
// unsigned side, and 2·128·127 < 2^15.
struct Q8_0Weights {
  using Panel = PanelQ8_0;
  static constexpr int kOffset = 0;
  static __m256i Group(const Panel& p, int k, int g, int half) {
    return _mm256_xor_si256(avx2::Load32(p.u[k][g] + 32 * half),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static __m256 Scale(const Panel& p, int k, int half) { return HalfFp16(p.d[k], half); }
};
// Q5_0: q, the nibble with its 5th bit, level q − 16: four groups in int16 (4·2·31·128 < 2^15).
struct Q5_0Weights {
  using Panel = PanelQ5_0;
  static constexpr int kOffset = 16, kGroupsPerSum = 4;
  static __m256i Group(const Panel& p, int k, int g, int half) {
    return _mm256_or_si256(NibbleGroup(p.qs[k], g, half), HighBits(&p.qh[k][g], half, 16));
  }
  static __m256 Scale(const Panel& p, int k, int half) { return HalfFp16(p.d[k], half); }
};

template <class W>
struct BlockPanelKernel : ByHalves<BlockPanelKernel<W>> {
  using Panel = typename W::Panel;
  static constexpr int64_t kColumns = 2 * kQK;

  // Panel block u (two 32-column blocks) at p, rows 8·half .. 8·half + 7, NC tokens, into
  // f[c] (lane i: row 8·half + i).
  template <int NC>
  [[gnu::always_inline]] static void AddBlock(int64_t n, const Panel* p, int64_t u,
                                              const uint8_t* act, int64_t act_stride, int half,
                                              __m256 (&f)[NC]) {
    const int64_t side_offset = n / kQK * int64_t(sizeof(BlockQ8_0));
    SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
      const int64_t b = 2 * u + k;
      const int8_t* a[NC];
      const PanelActSide* side[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        a[c] = (reinterpret_cast<const BlockQ8_0*>(act + c * act_stride) + b)->qs;
        side[c] = reinterpret_cast<const PanelActSide*>(act + c * act_stride + side_offset) + b;
      }
      __m256i i[NC];
      if constexpr (W::kOffset == 0) {
        const __m256i ones = _mm256_set1_epi16(1);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) i[c] = _mm256_setzero_si256();
        SHARDLM_UNROLL for (int group = 0; group < 8; ++group) {
          const __m256i w = W::Group(*p, k, group, half);
          const __m256i magnitude = _mm256_abs_epi8(w);
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            i[c] = _mm256_add_epi32(
                i[c], _mm256_madd_epi16(SignedPairs(magnitude, w, a[c] + 4 * group), ones));
            TileInRegister<NC>(i[c]);
          }
        }
      } else {
        UnsignedBlockSums<NC, W::kGroupsPerSum>([&](int g) { return W::Group(*p, k, g, half); }, a,
                                                i);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          // −kOffset·Σa; the offset is −128·Σa.
          i[c] = _mm256_add_epi32(i[c], _mm256_set1_epi32(side[c]->offset / 128 * W::kOffset));
        }
      }
      const __m256 d = W::Scale(*p, k, half);
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[c]),
                               _mm256_mul_ps(d, _mm256_set1_ps(side[c]->d)), f[c]);
      }
    }
  }
};

// Q4_1 and Q5_1 against Q8_1 activations: Σ (d·q + m)·d_a·a = d·d_a·Σ q·a + m·s_a, q unsigned
// as it is (UnsignedBlockSums: eight groups of Q4_1's q ≤ 15 in int16, four of Q5_1's q ≤ 31);
// the AVX-512 kernel's integer and float steps.
template <class PanelType, bool kHighBits>
struct MinPanelKernel : ByHalves<MinPanelKernel<PanelType, kHighBits>> {
  using Panel = PanelType;
  static constexpr int64_t kColumns = 2 * kQK;

  template <int NC>
  [[gnu::always_inline]] static void AddBlock(int64_t, const Panel* p, int64_t u,
                                              const uint8_t* act, int64_t act_stride, int half,
                                              __m256 (&f)[NC]) {
    SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
      const BlockQ8_1* a[NC];
      const int8_t* qs[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        a[c] = reinterpret_cast<const BlockQ8_1*>(act + c * act_stride) + 2 * u + k;
        qs[c] = a[c]->qs;
      }
      __m256i s[NC];
      UnsignedBlockSums<NC, kHighBits ? 4 : 8>(
          [&](int g) {
            const __m256i q = NibbleGroup(p->qs[k], g, half);
            if constexpr (kHighBits) return _mm256_or_si256(q, HighBits(&p->qh[k][g], half, 16));
            return q;
          },
          qs, s);
      const __m256 d = HalfFp16(p->d[k], half), m = HalfFp16(p->m[k], half);
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const __m256 ad = _mm256_set1_ps(_cvtsh_ss(a[c]->d));
        f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), _mm256_mul_ps(d, ad), f[c]);
        f[c] = _mm256_fmadd_ps(m, _mm256_set1_ps(_cvtsh_ss(a[c]->s)), f[c]);
      }
    }
  }
};

}  // namespace
}  // namespace shardlm::internal::panels

namespace shardlm::internal {

void FillBlockPanelsAvx2(TypeTraits& traits) {
  panels::InstallQ8_0ActSide(traits);
  switch (traits.type) {
    case GgmlType::kQ8_0:
      return panels::Install<panels::BlockPanelKernel<panels::Q8_0Weights>>(traits);
    case GgmlType::kQ4_0:
      return panels::Install<panels::BlockPanelKernel<panels::Q4_0Weights>>(traits);
    case GgmlType::kQ4_1:
      return panels::Install<panels::MinPanelKernel<PanelQ4_1, false>>(traits);
    case GgmlType::kQ5_0:
      return panels::Install<panels::BlockPanelKernel<panels::Q5_0Weights>>(traits);
    case GgmlType::kQ5_1:
      return panels::Install<panels::MinPanelKernel<PanelQ5_1, true>>(traits);
    case GgmlType::kIq4Nl:
      return panels::Install<panels::BlockPanelKernel<panels::Iq4NlWeights>>(traits);
    case GgmlType::kMxfp4:
      return panels::Install<panels::BlockPanelKernel<panels::Mxfp4Weights>>(traits);
    default:
      return;
  }
}

}  // namespace shardlm::internal
