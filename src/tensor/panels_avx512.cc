// AVX-512 VNNI kernels over weight panels (panels.h): 16 rows × up to 8 tokens per call.
// Registered by kernels_avx512.cc as TypeTraits::panel_dot for every type with panels.
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
// Q8_0, IQ4_NL, MXFP4 and IQ4_XS have signed weights and signed activations, and vpdpbusd
// multiplies unsigned by signed: their weights enter as w + 128 (Q8_0's stored so; the
// levels of the others looked up so, with vpshufb once per block for all tokens), which adds
// 128·Σa per row: each block's sum starts at −128·Σa, one broadcast per token and block
// (Q8_0 activations: PanelActSide after the row; Q8_K: its bsums). Per block
// F += float(I)·(d·d_act), I exact (|I| ≤ 32·255·128); IQ4_XS multiplies each sub-block's
// exact sum by its scale ls − 32 first (|I| ≤ 256·127·128·32 < 2^31). Flipping the
// activations instead (an XOR per broadcast, a −128·Σw start per block) left IQ4_NL's
// Qwen3-0.6B pp512 at 520 t/s against 620 this way (2 threads).
//
// Goals: batched decode and prefill at several times the row kernels' speed (panels.h).
// Non-goals: AVX2 (it keeps the row layout), other types.
#include <array>
#include <utility>

#include "tensor/intrinsics.h"
#include "tensor/panels.h"
#include "tensor/simd_tile.h"
#include "tensor/type_traits.h"

namespace shardlm::internal {
namespace {

constexpr int kMaxTokens = 8;

inline __m512i Bcast32(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline const BlockQ8_K* ActBlock(const uint8_t* act, int64_t act_stride, int c, int64_t b) {
  return reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + b;
}

// Asks for every line of the block two ahead (the next panel's first blocks at the end of a
// panel: panels are contiguous). The hardware prefetcher alone streamed Q6_K panels from
// DRAM at ~18 GB/s per thread against ~27 for the row kernels with their prefetches.
template <class Panel>
inline void PrefetchAhead(const Panel* p) {
  const char* ahead = reinterpret_cast<const char*>(p + 2);
  for (size_t line = 0; line < sizeof(Panel); line += 64) __builtin_prefetch(ahead + line, 0, 3);
}

inline void Store(float* out, int nr, __m512 v) {
  _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << nr) - 1), v);
}

inline __m512 Fp16Row(const fp16_t* d) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d)));
}

// The end of a super-block against Q8_K activations: F[c] += float(I[c])·(d·d_act), then, with
// mins, F[c] −= float(M[c])·(dmin·d_act).
template <int NC>
inline void AddSuperBlock(const __m512i (&isum)[NC], __m512 d, const uint8_t* act,
                          int64_t act_stride, int64_t b, __m512 (&f)[NC],
                          const __m512i* msum = nullptr, __m512 dmin = _mm512_setzero_ps()) {
  SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
    const __m512 ad = _mm512_set1_ps(ActBlock(act, act_stride, c, b)->d);
    f[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, ad), f[c]);
    if (msum != nullptr) {
      f[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[c]), _mm512_mul_ps(dmin, ad), f[c]);
    }
  }
}

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
      PrefetchAhead(p);
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
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
      PrefetchAhead(p);
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
      for (int t = 0; t < 8; ++t) {
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

// F[c] += dot(w, act block b of token c) · (d · d_act) for the 32 columns of a 32-element
// block: w[g] holds columns 4g .. 4g + 3 of the 16 rows as w + 128.
template <int NC>
inline void DotBlock(const __m512i (&w)[8], __m512 d, const uint8_t* act, int64_t act_stride,
                     int64_t n, int64_t b, __m512 (&f)[NC]) {
  const int64_t side_offset = n / kQK * int64_t(sizeof(BlockQ8_0));
  SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
    const uint8_t* row = act + c * act_stride;
    const auto* a = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const auto* side = reinterpret_cast<const PanelActSide*>(row + side_offset) + b;
    __m512i s = _mm512_set1_epi32(side->offset);
    SHARDLM_UNROLL for (int g = 0; g < 8; ++g) {
      s = _mm512_dpbusd_epi32(s, w[g], Bcast32(a->qs + 4 * g));
    }
    f[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(side->d)), f[c]);
  }
}

// The 16 rows' MXFP4 scales 2^(e − 128) as floats (e < 2: the subnormals 2^−127, 2^−126).
inline __m512 Mxfp4Row(const uint8_t* e) {
  const __m512i ev = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e)));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(ev, one), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), ev);
  const __mmask16 small = _mm512_cmplt_epu32_mask(ev, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal));
}

struct Q80Kernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const int64_t units = n / (2 * kQK);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t u = 0; u < units; ++u) {
      const auto* p = reinterpret_cast<const PanelQ8_0*>(panel) + u;
      PrefetchAhead(p);
      SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
        __m512i w[8];
        SHARDLM_UNROLL for (int g = 0; g < 8; ++g) w[g] = _mm512_loadu_si512(p->u[k][g]);
        DotBlock(w, Fp16Row(p->d[k]), act, act_stride, n, 2 * u + k, f);
      }
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

// Q4_0's levels, q − 8, as a table for the nibble kernel.
constexpr int8_t kQ4_0Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

// The 16 levels of `values` + 128 in each 128-bit lane, for vpshufb.
inline __m512i UnsignedLevels(const int8_t* values) {
  return _mm512_xor_si512(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values))),
      _mm512_set1_epi8(static_cast<char>(0x80)));
}

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
      PrefetchAhead(p);
      __m512i isum[NC], msum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        isum[c] = _mm512_setzero_si512();
        msum[c] = _mm512_setzero_si512();
      }
      for (int i = 0; i < 16; ++i) {
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
      PrefetchAhead(p);
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
      for (int i = 0; i < 16; ++i) {
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
struct TernaryKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const int64_t nb = n / kQK_K;
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const auto* p = reinterpret_cast<const PanelTernary*>(panel) + b;
      PrefetchAhead(p);
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
        const BlockQ8_K* a = ActBlock(act, act_stride, c, b);
        int32_t sum = 0;
        for (int k = 0; k < kQK_K / 16; ++k) sum += a->bsums[k];
        isum[c] = _mm512_set1_epi32(-sum);
      }
      for (int i = 0; i < 16; ++i) {
        __m512i q[4];
        Digits2(p->q[i], q);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const int8_t* a = ActBlock(act, act_stride, c, b)->qs + 16 * i;
          SHARDLM_UNROLL for (int l = 0; l < 4; ++l) {
            isum[c] = _mm512_dpbusd_epi32(isum[c], q[l], Bcast32(a + 4 * l));
          }
        }
      }
      AddSuperBlock(isum, Fp16Row(p->d), act, act_stride, b, f);
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

// IQ4_NL, Q4_0 and MXFP4: the levels of `values` at the nibbles, block scales by
// Scale::Of(panel, k).
template <class Panel, const int8_t* kValues, class Scale>
struct NibbleKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const int64_t units = n / (2 * kQK);
    const __m512i table = UnsignedLevels(kValues);
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t u = 0; u < units; ++u) {
      const auto* p = reinterpret_cast<const Panel*>(panel) + u;
      PrefetchAhead(p);
      SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
        __m512i w[8];
        SHARDLM_UNROLL for (int pair = 0; pair < 4; ++pair) {
          const __m512i raw = _mm512_loadu_si512(p->qs[k][pair]);
          w[2 * pair] = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, nibble));
          w[2 * pair + 1] =
              _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble));
        }
        DotBlock(w, Scale::Of(*p, k), act, act_stride, n, 2 * u + k, f);
      }
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

struct NibbleScale {
  static __m512 Of(const PanelNibbles& p, int k) { return Fp16Row(p.d[k]); }
};
struct Mxfp4Scale {
  static __m512 Of(const PanelMxfp4& p, int k) { return Mxfp4Row(p.e[k]); }
};

using Iq4NlKernel = NibbleKernel<PanelNibbles, kIq4NlValues, NibbleScale>;
using Q4_0Kernel = NibbleKernel<PanelNibbles, kQ4_0Values, NibbleScale>;
using Mxfp4Kernel = NibbleKernel<PanelMxfp4, kMxfp4Values, Mxfp4Scale>;

// The 16 rows' 4 low bits of two groups per byte (pair p of block k) as two vectors.
template <class Panel>
inline void LowNibbles(const Panel& p, int k, __m512i (&w)[8]) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  SHARDLM_UNROLL for (int pair = 0; pair < 4; ++pair) {
    const __m512i raw = _mm512_loadu_si512(p.qs[k][pair]);
    w[2 * pair] = _mm512_and_si512(raw, nibble);
    w[2 * pair + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
  }
}

// Sets bit 4 of the bytes whose bit is set in their group's 5th-bit mask (Q5_0, Q5_1).
template <class Panel>
inline void AddHighBits(const Panel& p, int k, __m512i (&w)[8]) {
  const __m512i sixteen = _mm512_set1_epi8(16);
  SHARDLM_UNROLL for (int g = 0; g < 8; ++g) {
    w[g] = _mm512_or_si512(w[g], _mm512_maskz_mov_epi8(p.qh[k][g], sixteen));
  }
}

// Q5_0: q + 112 = (q − 16) + 128, Q8_0 activations.
struct Q5_0Kernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const __m512i bias = _mm512_set1_epi8(112);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t u = 0; u < n / (2 * kQK); ++u) {
      const auto* p = reinterpret_cast<const PanelQ5_0*>(panel) + u;
      PrefetchAhead(p);
      SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
        __m512i w[8];
        LowNibbles(*p, k, w);
        AddHighBits(*p, k, w);
        SHARDLM_UNROLL for (int g = 0; g < 8; ++g) w[g] = _mm512_add_epi8(w[g], bias);
        DotBlock(w, Fp16Row(p->d[k]), act, act_stride, n, 2 * u + k, f);
      }
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};

// Q4_1 and Q5_1 against Q8_1 activations: Σ (d·q + m)·d_a·a = d·d_a·Σ q·a + m·s_a, q unsigned
// as it is (no offset), s_a = d_a·Σa as the activation block stores it.
template <class Panel, bool kHighBits>
struct MinKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t u = 0; u < n / (2 * kQK); ++u) {
      const auto* p = reinterpret_cast<const Panel*>(panel) + u;
      PrefetchAhead(p);
      SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
        __m512i w[8];
        LowNibbles(*p, k, w);
        if constexpr (kHighBits) AddHighBits(*p, k, w);
        const __m512 d = Fp16Row(p->d[k]), m = Fp16Row(p->m[k]);
        SHARDLM_UNROLL for (int c = 0; c < NC; ++c) {
          const auto* a = reinterpret_cast<const BlockQ8_1*>(act + c * act_stride) + 2 * u + k;
          __m512i s = _mm512_setzero_si512();
          SHARDLM_UNROLL for (int g = 0; g < 8; ++g) {
            s = _mm512_dpbusd_epi32(s, w[g], Bcast32(a->qs + 4 * g));
          }
          const __m512 ad = _mm512_set1_ps(_cvtsh_ss(a->d));
          f[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, ad), f[c]);
          f[c] = _mm512_fmadd_ps(m, _mm512_set1_ps(_cvtsh_ss(a->s)), f[c]);
        }
      }
    }
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) Store(out + c * out_stride, nr, f[c]);
  }
};
using Q4_1Kernel = MinKernel<PanelQ4_1, false>;
using Q5_1Kernel = MinKernel<PanelQ5_1, true>;

struct Iq4XsKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const int64_t nb = n / kQK_K;
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const __m512i table = UnsignedLevels(kIq4NlValues);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const auto* p = reinterpret_cast<const PanelIq4Xs*>(panel) + b;
      PrefetchAhead(p);
      __m512i isum[NC];
      SHARDLM_UNROLL for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        __m512i w[8];
        SHARDLM_UNROLL for (int pair = 0; pair < 4; ++pair) {
          const __m512i raw = _mm512_loadu_si512(p->qs[j][pair]);
          w[2 * pair] = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, nibble));
          w[2 * pair + 1] =
              _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble));
        }
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

using PanelFn = void (*)(int64_t, const uint8_t*, const uint8_t*, int64_t, float*, int64_t, int);

// Kernel K's Run<NC> for NC = 1 .. kMaxTokens, by token count.
template <class K, int... kNc>
constexpr std::array<PanelFn, sizeof...(kNc)> RunTable(std::integer_sequence<int, kNc...>) {
  return {&K::template Run<kNc + 1>...};
}
template <class K>
constexpr auto kRunTable = RunTable<K>(std::make_integer_sequence<int, kMaxTokens>());

template <class K>
void PanelDot(int64_t n, const void* panel, const void* act, int64_t act_stride, int nc, float* out,
              int64_t out_stride, int nr) {
  kRunTable<K>[nc - 1](n, static_cast<const uint8_t*>(panel), static_cast<const uint8_t*>(act),
                       act_stride, out, out_stride, nr);
}

template <class K>
void Install(TypeTraits& traits) {
  traits.panel_dot = &PanelDot<K>;
  traits.panel_tokens = kMaxTokens;
}

}  // namespace

void FillPanelsAvx512(TypeTraits& traits) {
  // Every type converting to Q8_0 gets the side data, so that one conversion serves all.
  if (traits.act_type == GgmlType::kQ8_0) {
    traits.panel_act_side = &FillQ8_0ActSide;
    traits.act_side_bytes = sizeof(PanelActSide);
  }
  switch (traits.type) {
    case GgmlType::kQ2_K:
      return Install<Q2KKernel>(traits);
    case GgmlType::kQ3_K:
      return Install<Q3KKernel>(traits);
    case GgmlType::kQ4_K:
      return Install<ScaleMinKernel<PanelQ4_K, false>>(traits);
    case GgmlType::kQ5_K:
      return Install<ScaleMinKernel<PanelQ5_K, true>>(traits);
    case GgmlType::kQ6_K:
      return Install<Q6KKernel>(traits);
    case GgmlType::kQ8_0:
      return Install<Q80Kernel>(traits);
    case GgmlType::kQ4_0:
      return Install<Q4_0Kernel>(traits);
    case GgmlType::kQ4_1:
      return Install<Q4_1Kernel>(traits);
    case GgmlType::kQ5_0:
      return Install<Q5_0Kernel>(traits);
    case GgmlType::kQ5_1:
      return Install<Q5_1Kernel>(traits);
    case GgmlType::kIq4Nl:
      return Install<Iq4NlKernel>(traits);
    case GgmlType::kIq4Xs:
      return Install<Iq4XsKernel>(traits);
    case GgmlType::kTq1_0:
    case GgmlType::kTq2_0:
      return Install<TernaryKernel>(traits);
    case GgmlType::kMxfp4:
      return Install<Mxfp4Kernel>(traits);
    default:
      return;
  }
}

}  // namespace shardlm::internal
