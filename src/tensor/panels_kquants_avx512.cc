// AVX-512 VNNI kernels over the panels of the 256-column types (panels.h): Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0; 16 rows × up to 8 tokens per call. Registered by
// kernels_avx512.cc.
//
// Scheme: int32 lanes are the panel's 16 rows. Per group of 4 columns one vpdpbusd
// multiplies the unsigned quants of 16 rows by the token's 4 activation bytes (broadcast
// from memory) and adds them into the token's sub-block sum S; at the end of a sub-block
// S × scale (vpmulld, one scale per row lane) joins the block sum I. Offsets (Q4_K mins,
// Q6_K's −32) go through the activation block sums (bsums) with vpdpwssd. Per block, I
// becomes float once: F += float(I)·(d·d_act) (− float(M)·(dmin·d_act)). Everything per lane,
// so a (row, token) output is the same for any token count. Integer bounds: a Q4_K block
// sum |I| ≤ 256·15·63·128 < 2^31 (Q5_K: 256·31·63·128); Q6_K |I| ≤ 256·63·128·128 < 2^31.
//
// IQ4_XS's levels enter as v + 128 (looked up so, with vpshufb once per block for all tokens)
// and each sub-block's sum starts at −128·(its bsums); it multiplies each sub-block's exact sum
// by its scale ls − 32 (|I| ≤ 256·127·128·32 < 2^31).
//
// Goals: batched decode and prefill at several times the row kernels' speed (panels.h).
// Non-goals: AVX2 (panels_kquants_avx2.cc).
#include "tensor/panel_kernel_avx512_inl.h"

namespace shardlm::internal::panels {
namespace {

// Q4_K and Q5_K (6-bit scales and mins per 32 columns), Q5_K with its 5th bits (one byte-lane
// mask per group, as Q5_0's).
template <class Panel, bool kHighBits>
struct ScaleMinKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const int64_t nb = n / kQK_K;
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const auto* p = reinterpret_cast<const Panel*>(panel) + b;
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        PrefetchAhead<8>(p, j);
        __m512i s[NC];
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) s[c] = _mm512_setzero_si512();
        SHARDLM_UNROLL for (int q = 0; q < 4; ++q) {
          const int pair = 4 * j + q;
          const __m512i raw = _mm512_loadu_si512(p->qs[pair]);
          __m512i lo = _mm512_and_si512(raw, nibble);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
          if constexpr (kHighBits) {
            const __m512i sixteen = _mm512_set1_epi8(16);
            lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(p->qh[2 * pair], sixteen));
            hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(p->qh[2 * pair + 1], sixteen));
          }
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            const int8_t* a = ActBlock(act, act_stride, c, b)->qs + 8 * pair;
            s[c] = _mm512_dpbusd_epi32(s[c], lo, Bcast32(a));
            s[c] = _mm512_dpbusd_epi32(s[c], hi, Bcast32(a + 4));
          }
        }
        const __m512i scale =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p->scales[j])));
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s[c], scale));
        }
      }
      // Mins: M = Σ_j min_j · (bsum_2j + bsum_2j+1), the (min, min) int16 pair against the
      // two bsums of sub-block j.
      __m512i msum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) msum[c] = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        const __m512i m =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p->mins[j])));
        const __m512i pair = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          msum[c] = _mm512_dpwssd_epi32(msum[c], pair,
                                        Bcast32(ActBlock(act, act_stride, c, b)->bsums + 2 * j));
        }
      }
      AddSuperBlock(isum, Fp16Row(p->d), act, act_stride, b, f, msum, Fp16Row(p->dmin));
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

struct Q6KKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const int64_t nb = n / kQK_K;
    const __m512i six_bits = _mm512_set1_epi8(0x3f);
    const __m512i fields01 = _mm512_set1_epi8(0x03);
    const __m512i low_nibble = _mm512_set1_epi8(0x0f);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const auto* p = reinterpret_cast<const PanelQ6_K*>(panel) + b;
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
      for (int t = 0; t < 8; ++t) {
        PrefetchAhead<8>(p, t);
        // Scales of groups 2t (low int16 of each lane) and 2t + 1 (high int16).
        const __m512i pairs = _mm512_cvtepi8_epi16(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p->scales[t])));
        const __m512i group_scale[2] = {_mm512_srai_epi32(_mm512_slli_epi32(pairs, 16), 16),
                                        _mm512_srai_epi32(pairs, 16)};
        // The −32 offset, I −= 32·Σ_G scale_G·bsum_G, is one vpdpwssd per token with the pairs
        // times −32 (|32·scale| ≤ 4096 fits int16; the sum is exactly the same integer).
        const __m512i offset_pairs =
            _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(pairs, 5));
        SHARDLM_UNROLL for (int half = 0; half < 2; ++half) {
          const int g = 2 * t + half;  // 16 columns: k-groups 4g .. 4g + 3
          const __m512i v0 = _mm512_loadu_si512(p->q[g][0]);
          const __m512i v1 = _mm512_loadu_si512(p->q[g][1]);
          const __m512i v2 = _mm512_loadu_si512(p->q[g][2]);
          // The fourth quant: the top 2 bits of v0, v1, v2 as its bits 0-1, 2-3, 4-5. A 16-bit
          // shift fills a low byte's top with the high byte's bits; the selects (vpternlogd
          // 0xE4: mask bit set → first operand, clear → second) take each field from its own
          // shift and the AND clears bits 6-7.
          const __m512i low4 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v0, 6),
                                                         _mm512_srli_epi16(v1, 4), fields01, 0xE4);
          const __m512i q[4] = {
              _mm512_and_si512(v0, six_bits), _mm512_and_si512(v1, six_bits),
              _mm512_and_si512(v2, six_bits),
              _mm512_and_si512(
                  _mm512_ternarylogic_epi32(low4, _mm512_srli_epi16(v2, 2), low_nibble, 0xE4),
                  six_bits)};
          __m512i s[NC];
          SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
            const int8_t* a = ActBlock(act, act_stride, c, b)->qs + 16 * g;
            s[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], Bcast32(a));
            s[c] = _mm512_dpbusd_epi32(s[c], q[1], Bcast32(a + 4));
            s[c] = _mm512_dpbusd_epi32(s[c], q[2], Bcast32(a + 8));
            s[c] = _mm512_dpbusd_epi32(s[c], q[3], Bcast32(a + 12));
            isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s[c], group_scale[half]));
          }
        }
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          isum[c] = _mm512_dpwssd_epi32(isum[c], offset_pairs,
                                        Bcast32(ActBlock(act, act_stride, c, b)->bsums + 2 * t));
        }
      }
      AddSuperBlock(isum, Fp16Row(p->d), act, act_stride, b, f);
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

// The four 2-bit fields of a digits vector (groups 4i .. 4i + 3 of the 16 rows).
inline void Digits2(const uint8_t* v, __m512i (&q)[4]) {
  const __m512i two_bits = _mm512_set1_epi8(3);
  const __m512i raw = _mm512_loadu_si512(v);
  SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
    q[l] = _mm512_and_si512(_mm512_srli_epi16(raw, 2 * l), two_bits);
  }
}

// Q2_K: per 16 columns S = Σ q·a (4 vpdpbusd), I += S·scale, mins through the bsums (as Q4_K's).
struct Q2KKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const __m512i low_nibble = _mm512_set1_epi32(0x0f);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / kQK_K; ++b) {
      const auto* p = reinterpret_cast<const PanelQ2_K*>(panel) + b;
      __m512i isum[NC], msum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        isum[c] = _mm512_setzero_si512();
        msum[c] = _mm512_setzero_si512();
      }
      for (int i = 0; i < 16; ++i) {
        PrefetchAhead<16>(p, i);
        __m512i q[4];
        Digits2(p->q[i], q);
        const __m512i scale = _mm512_and_si512(
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p->scales[i]))),
            low_nibble);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const int8_t* a = ActBlock(act, act_stride, c, b)->qs + 16 * i;
          __m512i s = _mm512_setzero_si512();
          SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
            s = _mm512_dpbusd_epi32(s, q[l], Bcast32(a + 4 * l));
          }
          isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s, scale));
        }
      }
      // Mins: M = Σ_i min_i · bsum_i, the (min_2t, min_2t+1) int16 pair against two bsums.
      for (int t = 0; t < 8; ++t) {
        const __m512i m0 = _mm512_srli_epi32(
            _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(p->scales[2 * t]))),
            4);
        const __m512i m1 = _mm512_srli_epi32(
            _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(p->scales[2 * t + 1]))),
            4);
        const __m512i pair = _mm512_or_si512(m0, _mm512_slli_epi32(m1, 16));
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          msum[c] = _mm512_dpwssd_epi32(msum[c], pair,
                                        Bcast32(ActBlock(act, act_stride, c, b)->bsums + 2 * t));
        }
      }
      AddSuperBlock(isum, Fp16Row(p->d), act, act_stride, b, f, msum, Fp16Row(p->dmin));
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

// Q3_K: u = q + 4·h (the high bit a byte-lane mask per group), per 16 columns
// S = Σ u·a − 4·bsum, I += S·(scale − 32).
struct Q3KKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const __m512i four = _mm512_set1_epi8(4);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / kQK_K; ++b) {
      const auto* p = reinterpret_cast<const PanelQ3_K*>(panel) + b;
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
      for (int i = 0; i < 16; ++i) {
        PrefetchAhead<16>(p, i);
        __m512i q[4];
        Digits2(p->q[i], q);
        SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
          q[l] = _mm512_or_si512(q[l], _mm512_maskz_mov_epi8(p->qh[4 * i + l], four));
        }
        const __m512i scale =
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p->scales[i])));
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const BlockQ8_K* ab = ActBlock(act, act_stride, c, b);
          __m512i s = _mm512_set1_epi32(-4 * ab->bsums[i]);
          SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
            s = _mm512_dpbusd_epi32(s, q[l], Bcast32(ab->qs + 16 * i + 4 * l));
          }
          isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s, scale));
        }
      }
      AddSuperBlock(isum, Fp16Row(p->d), act, act_stride, b, f);
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

// TQ1_0 and TQ2_0: Σ (q − 1)·a = Σ q·a − Σ a, the second the block's bsums.
//
// With up to 4 tokens each token sums each of the 4 fields l of a digits byte in a chain of
// its own, from the byte masked in place (4^l·q, no shift: one instruction less per field)
// and divided by 4^l once per block: exact, as every term of chain l is a multiple of 4^l
// (|chain| ≤ 16·4·192·128 < 2^31). The chains also keep a block's 64 vpdpbusd per token
// from being one dependent sequence, which bound decode by the instruction's latency (kernel
// alone, one token, Zen 4: 3.3-3.7 -> 2.2 ns per block). With more tokens (prefill) their
// chains are independent already and the registers hold one sum per token.
struct TernaryKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    constexpr bool kFieldChains = NC <= 4;
    constexpr int kChains = kFieldChains ? 4 : 1;
    const int64_t nb = n / kQK_K;
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const auto* p = reinterpret_cast<const PanelTernary*>(panel) + b;
      __m512i chain[NC][kChains];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        SHARDLM_UNROLL for (int k = 0; k < kChains; ++k) chain[c][k] = _mm512_setzero_si512();
      }
      for (int i = 0; i < 16; ++i) {
        PrefetchAhead<16>(p, i);
        __m512i q[4];
        if constexpr (kFieldChains) {
          const __m512i raw = _mm512_loadu_si512(p->q[i]);
          SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
            q[l] = _mm512_and_si512(raw, _mm512_set1_epi8(static_cast<char>(3 << (2 * l))));
          }
        } else {
          Digits2(p->q[i], q);
        }
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const int8_t* a = ActBlock(act, act_stride, c, b)->qs + 16 * i;
          SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
            __m512i& s = chain[c][l % kChains];
            s = _mm512_dpbusd_epi32(s, q[l], Bcast32(a + 4 * l));
          }
        }
      }
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const BlockQ8_K* a = ActBlock(act, act_stride, c, b);
        int32_t sum = 0;
        for (int k = 0; k < kQK_K / 16; ++k) sum += a->bsums[k];
        isum[c] = _mm512_sub_epi32(chain[c][0], _mm512_set1_epi32(sum));
        SHARDLM_UNROLL for (int k = 1; k < kChains; ++k) {
          isum[c] = _mm512_add_epi32(isum[c], _mm512_srai_epi32(chain[c][k], 2 * k));
        }
      }
      AddSuperBlock(isum, Fp16Row(p->d), act, act_stride, b, f);
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

struct Iq4XsKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const int64_t nb = n / kQK_K;
    const __m512i table = UnsignedLevels(kIq4NlValues);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const auto* p = reinterpret_cast<const PanelIq4Xs*>(panel) + b;
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        PrefetchAhead<8>(p, j);
        __m512i w[8];
        NibbleLevels(p->qs[j], table, w);
        const __m512i scale =
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p->scales[j])));
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const BlockQ8_K* a = ActBlock(act, act_stride, c, b);
          __m512i s = _mm512_set1_epi32(-128 * (a->bsums[2 * j] + a->bsums[2 * j + 1]));
          SHARDLM_UNROLL for (int g = 0; g < 8; ++g) {
            s = _mm512_dpbusd_epi32(s, w[g], Bcast32(a->qs + 32 * j + 4 * g));
          }
          isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s, scale));
        }
      }
      AddSuperBlock(isum, Fp16Row(p->d), act, act_stride, b, f);
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

}  // namespace
}  // namespace shardlm::internal::panels

namespace shardlm::internal {

void FillKQuantPanelsAvx512(TypeTraits& traits) {
  switch (traits.type) {
    case GgmlType::kQ2_K:
      return panels::Install<panels::Q2KKernel>(traits);
    case GgmlType::kQ3_K:
      return panels::Install<panels::Q3KKernel>(traits);
    case GgmlType::kQ4_K:
      return panels::Install<panels::ScaleMinKernel<PanelQ4_K, false>>(traits);
    case GgmlType::kQ5_K:
      return panels::Install<panels::ScaleMinKernel<PanelQ5_K, true>>(traits);
    case GgmlType::kQ6_K:
      return panels::Install<panels::Q6KKernel>(traits);
    case GgmlType::kIq4Xs:
      return panels::Install<panels::Iq4XsKernel>(traits);
    case GgmlType::kTq1_0:
    case GgmlType::kTq2_0:
      return panels::Install<panels::TernaryKernel>(traits);
    default:
      return;
  }
}

}  // namespace shardlm::internal
