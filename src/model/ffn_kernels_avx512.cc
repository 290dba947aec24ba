// AVX512 SwiGLU: 16 lanes, the operations of the generic form in the same order
// (ffn_kernels.h).
#include "model/fast_exp_simd.h"
#include "model/ffn_kernels.h"

namespace shardlm::internal {
namespace {

void SwiGluAvx512(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 limit = _mm512_set1_ps(-kExpLowest);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 a = _mm512_abs_ps(g);
    const __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, limit, _CMP_LE_OQ),
                                         ExpNonPositive16(_mm512_sub_ps(zero, a)));
    const __m512 num =
        _mm512_mul_ps(g, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, zero, _CMP_GE_OQ), e, one));
    const __m512 silu = _mm512_div_ps(num, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = SwiGluOne(gate[i], up[i]);
}

}  // namespace

void FillFfnAvx512(FfnKernels& k) { k.swiglu = SwiGluAvx512; }

}  // namespace shardlm::internal
