// AVX2 SwiGLU: 8 lanes, the operations of the generic form in the same order
// (ffn_kernels.h).
#include "model/fast_exp_simd.h"
#include "model/ffn_kernels.h"

namespace shardlm::internal {
namespace {

void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 limit = _mm256_set1_ps(-kExpLowest);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), g);
    const __m256 e =
        _mm256_and_ps(_mm256_cmp_ps(a, limit, _CMP_LE_OQ), ExpNonPositive8(_mm256_sub_ps(zero, a)));
    const __m256 num =
        _mm256_mul_ps(g, _mm256_blendv_ps(e, one, _mm256_cmp_ps(g, zero, _CMP_GE_OQ)));
    const __m256 silu = _mm256_div_ps(num, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = SwiGluOne(gate[i], up[i]);
}

}  // namespace

void FillFfnAvx2(FfnKernels& k) { k.swiglu = SwiGluAvx2; }

}  // namespace shardlm::internal
