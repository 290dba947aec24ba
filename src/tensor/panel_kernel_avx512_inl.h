// Internal to the panel kernel files (panels_kquants_avx512.cc, panels_blocks_avx512.cc,
// compiled with the avx512 flags): what their kernels share. Per-lane arithmetic over 16 row
// lanes (tensor/panels.h), the token loop's pieces, and Install (panel_dispatch_inl.h at 8
// tokens per call).
//
// Anonymous namespace: each including file gets its own copies, compiled for its ISA.
#pragma once

#include "tensor/intrinsics.h"
#include "tensor/panel_dispatch_inl.h"
#include "tensor/panels.h"
#include "tensor/simd_tile.h"
#include "tensor/type_traits.h"

namespace shardlm::internal::panels {
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

// The 16 levels of `values` + 128 in each 128-bit lane, for vpshufb.
inline __m512i UnsignedLevels(const int8_t* values) {
  return _mm512_xor_si512(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values))),
      _mm512_set1_epi8(static_cast<char>(0x80)));
}

// The 4-bit fields of one 32-column block's 4 pair vectors (qs[pair][4r + e]: low nibble =
// group 2·pair, high = group 2·pair + 1) as its 8 group vectors; with a table, the levels
// there (vpshufb).
inline void Nibbles(const uint8_t (*qs)[64], __m512i (&w)[8]) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  SHARDLM_UNROLL for (int pair = 0; pair < 4; ++pair) {
    const __m512i raw = _mm512_loadu_si512(qs[pair]);
    w[2 * pair] = _mm512_and_si512(raw, nibble);
    w[2 * pair + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
  }
}
inline void NibbleLevels(const uint8_t (*qs)[64], __m512i table, __m512i (&w)[8]) {
  Nibbles(qs, w);
  SHARDLM_UNROLL for (int g = 0; g < 8; ++g) w[g] = _mm512_shuffle_epi8(table, w[g]);
}

template <class K>
void Install(TypeTraits& traits) {
  InstallPanelKernel<K, kMaxTokens>(traits);
}

}  // namespace
}  // namespace shardlm::internal::panels
