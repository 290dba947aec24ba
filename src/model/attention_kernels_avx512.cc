// AVX-512 attention kernels; 16 lanes in one register (see attention_kernels.h).
#include <immintrin.h>

#include <cmath>

#include "model/attention_kernels.h"

namespace shardlm::internal {
namespace {

float DotAvx512(const float* a, const float* b, int n) {
  __m512 acc = _mm512_setzero_ps();
  const int n16 = n - n % 16;
  for (int i = 0; i < n16; i += 16) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  }
  // SumLanes' tree in registers: (j, j+8), (j, j+4), (j, j+2), (j, j+1).
  const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(acc, 0), _mm512_extractf32x8_ps(acc, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  float sum = _mm_cvtss_f32(s1);
  for (int i = n16; i < n; ++i) sum = std::fma(a[i], b[i], sum);
  return sum;
}

void AxpyAvx512(float a, const float* x, float* y, int n) {
  const __m512 va = _mm512_set1_ps(a);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

// Four registers of y stay loaded while every row is folded in.
void AxpyRowsAvx512(const float* w, const float* const* rows, int n_rows, float* y, int n) {
  constexpr int kW = 16;
  int i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    __m512 a0 = _mm512_loadu_ps(y + i), a1 = _mm512_loadu_ps(y + i + kW);
    __m512 a2 = _mm512_loadu_ps(y + i + 2 * kW), a3 = _mm512_loadu_ps(y + i + 3 * kW);
    for (int r = 0; r < n_rows; ++r) {
      const __m512 wr = _mm512_set1_ps(w[r]);
      const float* x = rows[r] + i;
      a0 = _mm512_fmadd_ps(wr, _mm512_loadu_ps(x), a0);
      a1 = _mm512_fmadd_ps(wr, _mm512_loadu_ps(x + kW), a1);
      a2 = _mm512_fmadd_ps(wr, _mm512_loadu_ps(x + 2 * kW), a2);
      a3 = _mm512_fmadd_ps(wr, _mm512_loadu_ps(x + 3 * kW), a3);
    }
    _mm512_storeu_ps(y + i, a0);
    _mm512_storeu_ps(y + i + kW, a1);
    _mm512_storeu_ps(y + i + 2 * kW, a2);
    _mm512_storeu_ps(y + i + 3 * kW, a3);
  }
  if (i < n) {
    for (int r = 0; r < n_rows; ++r) AxpyAvx512(w[r], rows[r] + i, y + i, n - i);
  }
}

void HalfRowAvx512(const uint16_t* src, float* dst, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xffff, h));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace

void FillAttentionAvx512(AttentionKernels& k) {
  k.dot = DotAvx512;
  k.axpy = AxpyAvx512;
  k.half_row = HalfRowAvx512;
  k.axpy_rows = AxpyRowsAvx512;
}

}  // namespace shardlm::internal
