// AVX-512 VNNI kernels over the panels of the 32-element block types (panels.h): Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4; 16 rows × up to 8 tokens per call, per GGUF block of 32
// columns. Registered by kernels_avx512.cc, with the activation side data (PanelActSide) for
// every type that converts to Q8_0.
//
// Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4 have signed weights and signed activations, and vpdpbusd
// multiplies unsigned by signed: their weights enter as w + 128 (Q8_0's stored so; the
// levels of the others looked up so, with vpshufb once per block for all tokens), which adds
// 128·Σa per row: each block's sum starts at −128·Σa, one broadcast per token and block
// (PanelActSide, after the activation row). Per block F += float(I)·(d·d_act), I exact
// (|I| ≤ 32·255·128). Q4_1 and Q5_1 (Q8_1 activations) multiply q unsigned as it is and add
// m·s_a. Flipping the activations instead (an XOR per broadcast, a −128·Σw start per block)
// left IQ4_NL's Qwen3-0.6B pp512 at 520 t/s against 620 this way (2 threads).
//
// Goals: batched decode and prefill at several times the row kernels' speed (panels.h).
// Non-goals: AVX2 (panels_blocks_avx2.cc).
#include "tensor/panel_kernel_avx512_inl.h"

namespace shardlm::internal::panels {
namespace {

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
      SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
        PrefetchAhead<2>(p, k);
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

// IQ4_NL, Q4_0 and MXFP4: the levels of `values` at the nibbles, block scales by
// Scale::Of(panel, k).
template <class Panel, const int8_t* kValues, class Scale>
struct NibbleKernel {
  template <int NC>
  static void Run(int64_t n, const uint8_t* panel, const uint8_t* act, int64_t act_stride,
                  float* out, int64_t out_stride, int nr) {
    const int64_t units = n / (2 * kQK);
    const __m512i table = UnsignedLevels(kValues);
    __m512 f[NC];
    SHARDLM_UNROLL for (int c = 0; c < NC; ++c) f[c] = _mm512_setzero_ps();
    for (int64_t u = 0; u < units; ++u) {
      const auto* p = reinterpret_cast<const Panel*>(panel) + u;
      SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
        PrefetchAhead<2>(p, k);
        __m512i w[8];
        NibbleLevels(p->qs[k], table, w);
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
      SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
        PrefetchAhead<2>(p, k);
        __m512i w[8];
        Nibbles(p->qs[k], w);
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
      SHARDLM_UNROLL for (int k = 0; k < 2; ++k) {
        PrefetchAhead<2>(p, k);
        __m512i w[8];
        Nibbles(p->qs[k], w);
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

}  // namespace
}  // namespace shardlm::internal::panels

namespace shardlm::internal {

void FillBlockPanelsAvx512(TypeTraits& traits) {
  panels::InstallQ8_0ActSide(traits);
  switch (traits.type) {
    case GgmlType::kQ8_0:
      return panels::Install<panels::Q80Kernel>(traits);
    case GgmlType::kQ4_0:
      return panels::Install<panels::Q4_0Kernel>(traits);
    case GgmlType::kQ4_1:
      return panels::Install<panels::Q4_1Kernel>(traits);
    case GgmlType::kQ5_0:
      return panels::Install<panels::Q5_0Kernel>(traits);
    case GgmlType::kQ5_1:
      return panels::Install<panels::Q5_1Kernel>(traits);
    case GgmlType::kIq4Nl:
      return panels::Install<panels::Iq4NlKernel>(traits);
    case GgmlType::kMxfp4:
      return panels::Install<panels::Mxfp4Kernel>(traits);
    default:
      return;
  }
}

}  // namespace shardlm::internal
