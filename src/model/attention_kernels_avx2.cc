// AVX2 + FMA attention kernels; 16 lanes as two 8-float registers (see attention_kernels.h).
#include <immintrin.h>

#include <cmath>

#include "model/attention_kernels.h"

namespace shardlm::internal {
namespace {

float DotAvx2(const float* a, const float* b, int n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  const int n16 = n - n % 16;
  for (int i = 0; i < n16; i += 16) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
  }
  alignas(32) float lanes[16];
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  float sum = SumLanes(lanes);
  for (int i = n16; i < n; ++i) sum = std::fma(a[i], b[i], sum);
  return sum;
}

void AxpyAvx2(float a, const float* x, float* y, int n) {
  const __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void HalfRowAvx2(const uint16_t* src, float* dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace

void FillAttentionAvx2(AttentionKernels& k) {
  k.dot = DotAvx2;
  k.axpy = AxpyAvx2;
  k.half_row = HalfRowAvx2;
}

}  // namespace shardlm::internal
