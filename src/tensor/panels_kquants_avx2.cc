// AVX2 kernels over the panels of the 256-column types (panels.h: 16 rows x 256 columns per panel
// block): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0, for CPUs without AVX-512. Registered
// by kernels_avx2.cc.
//
// Scheme (panel_kernel_avx2_inl.h: two 8-row halves): per group of 4 columns and token,
// vpmaddubsw multiplies the unsigned quants of 8 rows by the token's 4 activation bytes into
// int16 pairs; int16 sums of a few groups, then one vpmaddwd by the rows' scales (each int32 lane
// holding its row's scale twice) widens and scales them at once.
// - Q4_K: a sub-block's eight groups summed in int16 (nibbles: 8·2·15·127 < 2^15, exact). The
//   mins go through the activations' bsums: one vpmaddwd of (min, min) against bsums 2j, 2j + 1
//   per sub-block. Q5_K the same with its 5th bits ORed in (one byte-lane mask per group
//   expanded by vpshufb and a compare), two sums per sub-block (4·2·31·127 < 2^15).
// - Q6_K: quants up to 63, so two groups per int16 sum (2·2·63·128 < 2^15), two per 16-column
//   group G scaled by its scale_G. The −32 of q − 32 goes through the bsums as on AVX-512: one
//   vpmaddwd of (−32·scale_2t, −32·scale_2t+1) against bsums 2t, 2t + 1.
// - IQ4_XS: signed levels, one vpmaddwd by the sub-block's scale per group (see its kernel).
// - TQ1_0, TQ2_0: 2-bit digits, a whole block summed in int16, the −1 through the bsums.
// - Q2_K, Q3_K: 2-bit digits (Q3_K's third bit as Q5_K's fifth), 16 columns per int16 sum and
//   scale; Q2_K's mins, Q3_K's −4 through the bsums.
// The integers are the AVX-512 kernels' (Σ S·scale, Σ min·bsums, the −32 offset) and the float
// step per super-block is its AddSuperBlock, so the outputs are bitwise the AVX-512 panels'.
//
// Goals: decode at the memory's speed and prefill with the unpacking shared by the tokens of a
// call (Qwen3-0.6B on a Zen 3, 2 threads, paired against the row kernels: Q6_K pp512
// 1.5-2.1x, tg 1.14x; Q4_K_M, whose head and a few matrices are Q6_K, tg 1.14x).
#include "tensor/panel_kernel_avx2_inl.h"

namespace shardlm::internal::panels {
namespace {

// The unsigned bytes of the 8 rows of a half (row_bytes[row]), one per int32 lane.
inline __m256i Rows32(const uint8_t* row_bytes, int half) {
  return _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row_bytes + 8 * half)));
}

// Row scales of one sub-block, 8 rows of a half, each in both int16 of its int32 lane.
inline __m256i RowPairs(const uint8_t* row_bytes, int half) {
  const __m256i v = Rows32(row_bytes, half);
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

// The same for signed bytes (IQ4_XS's ls − 32).
inline __m256i SignedRowPairs(const int8_t* row_bytes, int half) {
  const __m256i v =
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row_bytes + 8 * half)));
  return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA);
}

// The Q8_K activation blocks b of the NC tokens.
template <int NC>
inline void ActBlocks(const uint8_t* act, int64_t act_stride, int64_t b,
                      const BlockQ8_K* (&a)[NC]) {
  SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
    a[c] = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
  }
}

// The end of a super-block, the AVX-512 kernels' float step: F[c] += float(I[c])·(d·d_act),
// then, with mins, F[c] −= float(M[c])·(dmin·d_act).
template <int NC>
inline void AddSuperBlock(const __m256i (&isum)[NC], __m256 d, const BlockQ8_K* const (&a)[NC],
                          __m256 (&f)[NC], const __m256i* msum = nullptr,
                          __m256 dmin = _mm256_setzero_ps()) {
  SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
    const __m256 ad = _mm256_set1_ps(a[c]->d);
    f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, ad), f[c]);
    if (msum != nullptr) {
      f[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[c]), _mm256_mul_ps(dmin, ad), f[c]);
    }
  }
}

// The 2-bit field l (bits 2l, 2l + 1) of each byte of a digits vector (PanelQ2_K, PanelQ3_K,
// PanelTernary: group 4i + l).
inline __m256i Digit(__m256i raw, int l) {
  return _mm256_and_si256(_mm256_srli_epi16(raw, 2 * l), _mm256_set1_epi8(3));
}

// Q4_K and Q5_K (6-bit scales and mins per 32 columns), Q5_K with its 5th bits: its quants go
// up to 31, so its int16 sums take two pairs of groups (4·2·31·127 < 2^15), Q4_K's all four.
template <class PanelType, bool kHighBits>
struct ScaleMinPanelKernel : ByHalves<ScaleMinPanelKernel<PanelType, kHighBits>> {
  using Panel = PanelType;
  static constexpr int64_t kColumns = kQK_K;

  template <int NC>
  [[gnu::always_inline]] static void AddBlock(int64_t, const Panel* p, int64_t b,
                                              const uint8_t* act, int64_t act_stride, int half,
                                              __m256 (&f)[NC]) {
    const BlockQ8_K* a[NC];
    ActBlocks(act, act_stride, b, a);
    __m256i isum[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i scale = RowPairs(p->scales[j], half);
      __m256i s[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) s[c] = _mm256_setzero_si256();
      SHARDLM_UNROLL for (int i = 0; i < 4; ++i) {
        const int pair = 4 * j + i;
        __m256i q[2];
        HalfNibbles(p->qs[pair], half, q);
        if constexpr (kHighBits) {
          q[0] = _mm256_or_si256(q[0], HighBits(&p->qh[2 * pair], half, 16));
          q[1] = _mm256_or_si256(q[1], HighBits(&p->qh[2 * pair + 1], half, 16));
        }
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const int8_t* qs = a[c]->qs + 8 * pair;
          s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(q[0], Bcast32(qs)));
          s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(q[1], Bcast32(qs + 4)));
          TileInRegister<NC>(s[c]);
        }
        if (kHighBits && i == 1) {
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s[c], scale));
            s[c] = _mm256_setzero_si256();
          }
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s[c], scale));
      }
    }
    // Mins: M = Σ_j min_j · (bsum_2j + bsum_2j+1).
    __m256i msum[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) msum[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i m = RowPairs(p->mins[j], half);
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        msum[c] = _mm256_add_epi32(msum[c], _mm256_madd_epi16(m, Bcast32(a[c]->bsums + 2 * j)));
      }
    }
    AddSuperBlock(isum, HalfFp16(p->d, half), a, f, msum, HalfFp16(p->dmin, half));
  }
};

// Q6_K: Value = d·scale_G·(q − 32), the quants of a group G of 16 columns in three vectors
// (panels.h: bits 0-5 the quants of columns 16G + 4i + e, bits 6-7 two bits of column
// 16G + 12 + e).
struct Q6KPanelKernel : ByHalves<Q6KPanelKernel> {
  using Panel = PanelQ6_K;
  static constexpr int64_t kColumns = kQK_K;

  // The four 4-column groups of G, rows of half `half`. AVX2 has no bit select: the fourth
  // group's bits 0-1, 2-3, 4-5 are the top bits of v0, v1, v2, each shifted into place
  // (a 16-bit shift keeps a byte's bits within the byte once masked) and ORed.
  static void Unpack(const uint8_t (*v)[64], int half, __m256i (&q)[4]) {
    const __m256i six_bits = _mm256_set1_epi8(0x3f);
    const __m256i v0 = avx2::Load32(v[0] + 32 * half);
    const __m256i v1 = avx2::Load32(v[1] + 32 * half);
    const __m256i v2 = avx2::Load32(v[2] + 32 * half);
    q[0] = _mm256_and_si256(v0, six_bits);
    q[1] = _mm256_and_si256(v1, six_bits);
    q[2] = _mm256_and_si256(v2, six_bits);
    const __m256i b01 = _mm256_and_si256(_mm256_srli_epi16(v0, 6), _mm256_set1_epi8(0x03));
    const __m256i b23 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), _mm256_set1_epi8(0x0c));
    const __m256i b45 = _mm256_and_si256(_mm256_srli_epi16(v2, 2), _mm256_set1_epi8(0x30));
    q[3] = _mm256_or_si256(_mm256_or_si256(b01, b23), b45);
  }

  template <int NC>
  [[gnu::always_inline]] static void AddBlock(int64_t, const Panel* p, int64_t b,
                                              const uint8_t* act, int64_t act_stride, int half,
                                              __m256 (&f)[NC]) {
    const BlockQ8_K* a[NC];
    ActBlocks(act, act_stride, b, a);
    __m256i isum[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) {
      // Per row lane the int16 pair (scale_2t, scale_2t+1); each group's scale twice; the
      // pair times −32 for the offset (|32·scale| ≤ 4096 fits int16).
      const __m256i pairs = _mm256_cvtepi8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p->scales[t][8 * half])));
      const __m256i group_scale[2] = {
          _mm256_blend_epi16(pairs, _mm256_slli_epi32(pairs, 16), 0xAA),
          _mm256_blend_epi16(pairs, _mm256_srli_epi32(pairs, 16), 0x55)};
      const __m256i offset_pairs =
          _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(pairs, 5));
      SHARDLM_UNROLL for (int l = 0; l < 2; ++l) {
        const int g = 2 * t + l;
        __m256i q[4];
        Unpack(p->q[g], half, q);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const int8_t* qs = a[c]->qs + 16 * g;
          const __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], Bcast32(qs)),
                                               _mm256_maddubs_epi16(q[1], Bcast32(qs + 4)));
          const __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], Bcast32(qs + 8)),
                                               _mm256_maddubs_epi16(q[3], Bcast32(qs + 12)));
          isum[c] =
              _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(s01, group_scale[l]),
                                                         _mm256_madd_epi16(s23, group_scale[l])));
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        isum[c] = _mm256_add_epi32(isum[c],
                                   _mm256_madd_epi16(offset_pairs, Bcast32(a[c]->bsums + 2 * t)));
      }
    }
    AddSuperBlock(isum, HalfFp16(p->d, half), a, f);
  }
};

// IQ4_XS: Value = d·(ls_j − 32)·kIq4NlValues[q], sub-block j = 32 columns, qs[j] as IQ4_NL's
// panel block. Signed levels (vpshufb of the nibbles, once per block for all tokens): the
// magnitudes multiply the activations with the levels' signs (vpsignb; pairs of at most
// 2·127·127 < 2^15), and each group's pairs go through one vpmaddwd by the sub-block's scale
// (each int32 lane holding its row's scale twice), which widens and scales at once:
// I = Σ_j scale_j·Σ v·a, the AVX-512 kernel's integer.
struct Iq4XsPanelKernel : ByHalves<Iq4XsPanelKernel> {
  using Panel = PanelIq4Xs;
  static constexpr int64_t kColumns = kQK_K;

  template <int NC>
  [[gnu::always_inline]] static void AddBlock(int64_t, const Panel* p, int64_t b,
                                              const uint8_t* act, int64_t act_stride, int half,
                                              __m256 (&f)[NC]) {
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
    const BlockQ8_K* a[NC];
    ActBlocks(act, act_stride, b, a);
    __m256i isum[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i scale = SignedRowPairs(p->scales[j], half);
      SHARDLM_UNROLL for (int pair = 0; pair < 4; ++pair) {
        __m256i q[2];
        HalfNibbles(p->qs[j][pair], half, q);
        SHARDLM_UNROLL for (int l = 0; l < 2; ++l) {
          const __m256i level = _mm256_shuffle_epi8(table, q[l]);
          const __m256i magnitude = _mm256_abs_epi8(level);
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            const int8_t* qs = a[c]->qs + 32 * j + 4 * (2 * pair + l);
            isum[c] = _mm256_add_epi32(isum[c],
                                       _mm256_madd_epi16(SignedPairs(magnitude, level, qs), scale));
            TileInRegister<NC>(isum[c]);
          }
        }
      }
    }
    AddSuperBlock(isum, HalfFp16(p->d, half), a, f);
  }
};

// TQ1_0 and TQ2_0: Value = d·(q − 1), q ∈ {0, 1, 2} in 2-bit fields (PanelTernary). Pairs of
// at most 2·2·127, so the whole block's 64 groups are summed in int16 (64·508 < 2^15) and
// widened once; Σ (q − 1)·a = Σ q·a − Σ a, the second the block's bsums, as on AVX-512.
struct TernaryPanelKernel : ByHalves<TernaryPanelKernel> {
  using Panel = PanelTernary;
  static constexpr int64_t kColumns = kQK_K;

  template <int NC>
  [[gnu::always_inline]] static void AddBlock(int64_t, const Panel* p, int64_t b,
                                              const uint8_t* act, int64_t act_stride, int half,
                                              __m256 (&f)[NC]) {
    const BlockQ8_K* a[NC];
    ActBlocks(act, act_stride, b, a);
    __m256i s[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) s[c] = _mm256_setzero_si256();
    for (int i = 0; i < 16; ++i) {
      const __m256i raw = avx2::Load32(p->q[i] + 32 * half);
      SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
        const __m256i q = Digit(raw, l);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          s[c] =
              _mm256_add_epi16(s[c], _mm256_maddubs_epi16(q, Bcast32(a[c]->qs + 16 * i + 4 * l)));
          TileInRegister<NC>(s[c]);
        }
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i isum[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
      int32_t bsum = 0;
      for (int k = 0; k < kQK_K / 16; ++k) bsum += a[c]->bsums[k];
      isum[c] = _mm256_add_epi32(_mm256_madd_epi16(s[c], ones), _mm256_set1_epi32(-bsum));
    }
    AddSuperBlock(isum, HalfFp16(p->d, half), a, f);
  }
};

// Q2_K: Value = d·scale_i·q − dmin·min_i, i = 16 columns (4 groups of one digits vector), scale
// and min the low and high nibble of one byte. S_i = Σ q·a in int16 (4·2·3·127), one vpmaddwd
// by the scale; the mins through the bsums, one vpmaddwd of (min_2t, min_2t+1) against bsums
// 2t, 2t + 1, as on AVX-512.
struct Q2KPanelKernel : ByHalves<Q2KPanelKernel> {
  using Panel = PanelQ2_K;
  static constexpr int64_t kColumns = kQK_K;

  template <int NC>
  [[gnu::always_inline]] static void AddBlock(int64_t, const Panel* p, int64_t b,
                                              const uint8_t* act, int64_t act_stride, int half,
                                              __m256 (&f)[NC]) {
    const __m256i low_nibbles = _mm256_set1_epi32(0x000f000f);
    const BlockQ8_K* a[NC];
    ActBlocks(act, act_stride, b, a);
    __m256i isum[NC], msum[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = msum[c] = _mm256_setzero_si256();
    for (int i = 0; i < 16; ++i) {
      const __m256i raw = avx2::Load32(p->q[i] + 32 * half);
      // The scales (low nibbles), each twice.
      const __m256i scale = _mm256_and_si256(RowPairs(p->scales[i], half), low_nibbles);
      __m256i s[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) s[c] = _mm256_setzero_si256();
      SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
        const __m256i q = Digit(raw, l);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          s[c] =
              _mm256_add_epi16(s[c], _mm256_maddubs_epi16(q, Bcast32(a[c]->qs + 16 * i + 4 * l)));
          TileInRegister<NC>(s[c]);
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s[c], scale));
      }
    }
    for (int t = 0; t < 8; ++t) {
      const __m256i m0 = _mm256_srli_epi32(Rows32(p->scales[2 * t], half), 4);
      const __m256i m1 = _mm256_srli_epi32(Rows32(p->scales[2 * t + 1], half), 4);
      const __m256i mins = _mm256_or_si256(m0, _mm256_slli_epi32(m1, 16));
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        msum[c] = _mm256_add_epi32(msum[c], _mm256_madd_epi16(mins, Bcast32(a[c]->bsums + 2 * t)));
      }
    }
    AddSuperBlock(isum, HalfFp16(p->d, half), a, f, msum, HalfFp16(p->dmin, half));
  }
};

// Q3_K: Value = d·(scale_i − 32)·(u − 4), u = q + 4·h, i = 16 columns. S_i = Σ u·a in int16
// (4·2·7·127), one vpmaddwd by the scale; the −4 through the bsums, one vpmaddwd of
// (−4·scale_2t, −4·scale_2t+1) against bsums 2t, 2t + 1: the AVX-512 kernel's
// I = Σ_i scale_i·(Σ u·a − 4·bsum_i).
struct Q3KPanelKernel : ByHalves<Q3KPanelKernel> {
  using Panel = PanelQ3_K;
  static constexpr int64_t kColumns = kQK_K;

  template <int NC>
  [[gnu::always_inline]] static void AddBlock(int64_t, const Panel* p, int64_t b,
                                              const uint8_t* act, int64_t act_stride, int half,
                                              __m256 (&f)[NC]) {
    const BlockQ8_K* a[NC];
    ActBlocks(act, act_stride, b, a);
    __m256i isum[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) {
      // Each scale twice per row lane; the int16 pair (scale_2t, scale_2t+1) (as Q6_K's) times
      // −4.
      const __m256i scale[2] = {SignedRowPairs(p->scales[2 * t], half),
                                SignedRowPairs(p->scales[2 * t + 1], half)};
      const __m256i pairs = _mm256_blend_epi16(scale[0], scale[1], 0xAA);
      const __m256i offset_pairs =
          _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(pairs, 2));
      SHARDLM_UNROLL for (int h = 0; h < 2; ++h) {
        const int i = 2 * t + h;
        const __m256i raw = avx2::Load32(p->q[i] + 32 * half);
        __m256i s[NC];
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) s[c] = _mm256_setzero_si256();
        SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
          const __m256i u = _mm256_or_si256(Digit(raw, l), HighBits(&p->qh[4 * i + l], half, 4));
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            s[c] =
                _mm256_add_epi16(s[c], _mm256_maddubs_epi16(u, Bcast32(a[c]->qs + 16 * i + 4 * l)));
            TileInRegister<NC>(s[c]);
          }
        }
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s[c], scale[h]));
        }
      }
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        isum[c] = _mm256_add_epi32(isum[c],
                                   _mm256_madd_epi16(offset_pairs, Bcast32(a[c]->bsums + 2 * t)));
      }
    }
    AddSuperBlock(isum, HalfFp16(p->d, half), a, f);
  }
};

}  // namespace
}  // namespace shardlm::internal::panels

namespace shardlm::internal {

void FillKQuantPanelsAvx2(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kQ2_K:
      return panels::Install<panels::Q2KPanelKernel>(traits);
    case GgmlType::kQ3_K:
      return panels::Install<panels::Q3KPanelKernel>(traits);
    case GgmlType::kQ4_K:
      return panels::Install<panels::ScaleMinPanelKernel<PanelQ4_K, false>>(traits);
    case GgmlType::kQ5_K:
      return panels::Install<panels::ScaleMinPanelKernel<PanelQ5_K, true>>(traits);
    case GgmlType::kQ6_K:
      return panels::Install<panels::Q6KPanelKernel>(traits);
    case GgmlType::kIq4Xs:
      return panels::Install<panels::Iq4XsPanelKernel>(traits);
    case GgmlType::kTq1_0:
    case GgmlType::kTq2_0:
      return panels::Install<panels::TernaryPanelKernel>(traits);
    default:
      return;
  }
}

}  // namespace shardlm::internal
