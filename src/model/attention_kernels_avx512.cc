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
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  float sum = SumLanes(lanes);
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

void HalfRowAvx512(const uint16_t* src, float* dst, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace

void FillAttentionAvx512(AttentionKernels& k) {
  k.dot = DotAvx512;
  k.axpy = AxpyAvx512;
  k.half_row = HalfRowAvx512;
}

}  // namespace shardlm::internal
