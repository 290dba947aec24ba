// AVX-512 attention kernels; 16 lanes in one register (see attention_kernels.h).
#include <cmath>

#include "model/attention_kernels.h"
#include "model/fast_exp_simd.h"
#include "tensor/intrinsics.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

// SumLanes' tree in registers: (j, j+8), (j, j+4), (j, j+2), (j, j+1).
inline float ReduceLanes(__m512 acc) {
  const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(acc, 0), _mm512_extractf32x8_ps(acc, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// ReduceLanes of four registers at once: the same pairwise adds, on transposed halves.
inline void ReduceLanes4(__m512 a, __m512 b, __m512 c, __m512 d, float* out) {
  // (j, j+8): [a j<8 | b j<8] and [c | d]
  const __m512 ab8 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, a, b, 0x44),
                                   _mm512_maskz_shuffle_f32x4(0xFFFF, a, b, 0xEE));
  const __m512 cd8 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, c, d, 0x44),
                                   _mm512_maskz_shuffle_f32x4(0xFFFF, c, d, 0xEE));
  // (j, j+4): one 128-bit quarter per register
  const __m512 s4 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, ab8, cd8, 0x88),
                                  _mm512_maskz_shuffle_f32x4(0xFFFF, ab8, cd8, 0xDD));
  // (j, j+2) then (j, j+1) inside each quarter
  const __m512 s2 = _mm512_add_ps(s4, _mm512_shuffle_ps(s4, s4, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 s1 = _mm512_add_ps(s2, _mm512_shuffle_ps(s2, s2, _MM_SHUFFLE(2, 3, 0, 1)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s1);
  out[0] = lanes[0];
  out[1] = lanes[4];
  out[2] = lanes[8];
  out[3] = lanes[12];
}

// 16 elements of a row from p: F32 as they are, F16 widened by vcvtph2ps (exact).
inline __m512 LoadRow(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 LoadRow(const fp16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The lanes' sum, then the tail [n16, n) in order.
template <typename Row>
inline float Finish(__m512 acc, const float* a, const Row* b, int n16, int n) {
  float sum = ReduceLanes(acc);
  for (int i = n16; i < n; ++i) sum = std::fma(a[i], RowValue(b, i), sum);
  return sum;
}

template <typename Row>
float DotAvx512(const float* a, const Row* b, int n) {
  __m512 acc = _mm512_setzero_ps();
  const int n16 = n - n % 16;
  for (int i = 0; i < n16; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), LoadRow(b + i), acc);
  return Finish(acc, a, b, n16, n);
}

// Four rows at a time: four independent FMA chains hide the FMA latency; each row's
// arithmetic is exactly DotAvx512's.
template <typename Row>
void DotRowsAvx512(const float* q, const Row* const* rows, int n_rows, int n, float* out,
                   Ahead ahead) {
  const int n16 = n - n % 16;
  int r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    AskAhead(ahead, r, r + 4, n_rows);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < n16; i += 16) {
      const __m512 vq = _mm512_loadu_ps(q + i);
      a0 = _mm512_fmadd_ps(vq, LoadRow(rows[r] + i), a0);
      a1 = _mm512_fmadd_ps(vq, LoadRow(rows[r + 1] + i), a1);
      a2 = _mm512_fmadd_ps(vq, LoadRow(rows[r + 2] + i), a2);
      a3 = _mm512_fmadd_ps(vq, LoadRow(rows[r + 3] + i), a3);
    }
    out[r] = Finish(a0, q, rows[r], n16, n);
    out[r + 1] = Finish(a1, q, rows[r + 1], n16, n);
    out[r + 2] = Finish(a2, q, rows[r + 2], n16, n);
    out[r + 3] = Finish(a3, q, rows[r + 3], n16, n);
  }
  AskAhead(ahead, r, n_rows, n_rows);
  for (; r < n_rows; ++r) out[r] = DotAvx512(q, rows[r], n);
}

void AxpyAvx512(float a, const float* x, float* y, int n) {
  const __m512 va = _mm512_set1_ps(a);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

// kRegs registers of y[col, col + 16·kRegs) stay loaded while every row is folded in.
template <int kRegs, typename Row>
void AxpyRowsBlock(const float* w, const Row* const* rows, int n_rows, int col, float* y,
                   Ahead ahead) {
  __m512 acc[kRegs];
  SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) acc[j] = _mm512_loadu_ps(y + col + 16 * j);
  for (int r = 0; r < n_rows; ++r) {
    AskAhead(ahead, r, r + 1, n_rows);
    const __m512 wr = _mm512_set1_ps(w[r]);
    const Row* x = rows[r] + col;
    SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) {
      acc[j] = _mm512_fmadd_ps(wr, LoadRow(x + 16 * j), acc[j]);
    }
  }
  SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) _mm512_storeu_ps(y + col + 16 * j, acc[j]);
}

// Column blocks of 128 (eight independent FMA chains), then 64, 16, then the scalar tail; the
// first block asks for `ahead` (the tail, when there is no block).
template <typename Row>
void AxpyRowsAvx512(const float* w, const Row* const* rows, int n_rows, float* y, int n,
                    Ahead ahead) {
  int col = 0;
  for (; col + 128 <= n; col += 128, ahead = {}) AxpyRowsBlock<8>(w, rows, n_rows, col, y, ahead);
  for (; col + 64 <= n; col += 64, ahead = {}) AxpyRowsBlock<4>(w, rows, n_rows, col, y, ahead);
  for (; col + 16 <= n; col += 16, ahead = {}) AxpyRowsBlock<1>(w, rows, n_rows, col, y, ahead);
  AskAhead(ahead, 0, n_rows, n_rows);
  AxpyRowsTail(w, rows, n_rows, col, y, n);
}

// 4 queries × 4 rows: 16 accumulators, 8 loads per 16 FMAs.
template <typename Row>
void DotBlock4x4(const float* const* qs, const Row* const* rows, int n, float* const* outs,
                 int r0) {
  const int n16 = n - n % 16;
  __m512 acc[4][4];
  SHARDLM_UNROLL for (int q = 0; q < 4; ++q) {
    SHARDLM_UNROLL for (int r = 0; r < 4; ++r) acc[q][r] = _mm512_setzero_ps();
  }
  const Row* k_rows[4] = {rows[r0], rows[r0 + 1], rows[r0 + 2], rows[r0 + 3]};
  const float* q_rows[4] = {qs[0], qs[1], qs[2], qs[3]};
  for (int i = 0; i < n16; i += 16) {
    __m512 vk[4];
    SHARDLM_UNROLL for (int r = 0; r < 4; ++r) vk[r] = LoadRow(k_rows[r] + i);
    SHARDLM_UNROLL for (int q = 0; q < 4; ++q) {
      const __m512 vq = _mm512_loadu_ps(q_rows[q] + i);
      SHARDLM_UNROLL for (int r = 0; r < 4; ++r) acc[q][r] = _mm512_fmadd_ps(vq, vk[r], acc[q][r]);
    }
  }
  for (int q = 0; q < 4; ++q) {
    float sums[4];
    ReduceLanes4(acc[q][0], acc[q][1], acc[q][2], acc[q][3], sums);
    for (int r = 0; r < 4; ++r) {
      const Row* row = rows[r0 + r];
      for (int i = n16; i < n; ++i) sums[r] = std::fma(qs[q][i], RowValue(row, i), sums[r]);
      outs[q][r0 + r] = sums[r];
    }
  }
}

// Every pass over the rows (a block of 4 queries, or one) asks for `ahead` (see AskAhead).
template <typename Row>
void DotTileAvx512(const float* const* qs, int n_q, const Row* const* rows, int n_rows, int n,
                   float* const* outs, Ahead ahead) {
  int q0 = 0;
  for (; q0 + 4 <= n_q; q0 += 4) {
    int r0 = 0;
    for (; r0 + 4 <= n_rows; r0 += 4) {
      AskAhead(ahead, r0, r0 + 4, n_rows);
      DotBlock4x4(qs + q0, rows, n, outs + q0, r0);
    }
    AskAhead(ahead, r0, n_rows, n_rows);
    for (int q = q0; q < q0 + 4; ++q) {
      for (int r = r0; r < n_rows; ++r) outs[q][r] = DotAvx512(qs[q], rows[r], n);
    }
  }
  for (; q0 < n_q; ++q0) DotRowsAvx512(qs[q0], rows, n_rows, n, outs[q0], ahead);
}

// 4 queries × kRegs registers of y[col, col + 16·kRegs): per row kRegs loads, 4 broadcasts,
// 4·kRegs FMAs.
template <int kRegs, typename Row>
void AxpyBlock4(const float* const* ws, const Row* const* rows, int n_rows, int col,
                float* const* ys, Ahead ahead) {
  __m512 acc[4][kRegs];
  const float* w_rows[4] = {ws[0], ws[1], ws[2], ws[3]};
  SHARDLM_UNROLL for (int q = 0; q < 4; ++q) {
    SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) acc[q][j] =
        _mm512_loadu_ps(ys[q] + col + 16 * j);
  }
  for (int r = 0; r < n_rows; ++r) {
    AskAhead(ahead, r, r + 1, n_rows);
    __m512 v[kRegs];
    const Row* x = rows[r] + col;
    SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) v[j] = LoadRow(x + 16 * j);
    SHARDLM_UNROLL for (int q = 0; q < 4; ++q) {
      const __m512 w = _mm512_set1_ps(w_rows[q][r]);
      SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) acc[q][j] =
          _mm512_fmadd_ps(w, v[j], acc[q][j]);
    }
  }
  SHARDLM_UNROLL for (int q = 0; q < 4; ++q) {
    SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j)
        _mm512_storeu_ps(ys[q] + col + 16 * j, acc[q][j]);
  }
}

// Every pass over the rows (a block of 4 queries, or one) asks for `ahead` (see AskAhead).
template <typename Row>
void AxpyTileAvx512(const float* const* ws, int n_q, const Row* const* rows, int n_rows,
                    float* const* ys, int n, Ahead ahead) {
  int q0 = 0;
  for (; q0 + 4 <= n_q; q0 += 4) {
    int col = 0;
    Ahead pass = ahead;  // the first column block's
    for (; col + 64 <= n; col += 64, pass = {}) {
      AxpyBlock4<4>(ws + q0, rows, n_rows, col, ys + q0, pass);
    }
    for (; col + 16 <= n; col += 16, pass = {}) {
      AxpyBlock4<1>(ws + q0, rows, n_rows, col, ys + q0, pass);
    }
    AskAhead(pass, 0, n_rows, n_rows);
    for (int q = q0; q < q0 + 4; ++q) AxpyRowsTail(ws[q], rows, n_rows, col, ys[q], n);
  }
  for (; q0 < n_q; ++q0) AxpyRowsAvx512(ws[q0], rows, n_rows, ys[q0], n, ahead);
}

// SumLanes<double> of lanes 0-7 (lo) and 8-15 (hi).
inline double ReduceLanesPd(__m512d lo, __m512d hi) {
  const __m512d s8 = _mm512_add_pd(lo, hi);
  const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

void SoftmaxAvx512(float* x, int n, float scale) {
  const int n16 = n - n % 16;
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int i = 0; i < n16; i += 16) {
    const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(x + i), vscale);
    _mm512_storeu_ps(x + i, s);
    vmax = _mm512_max_ps(vmax, s);
  }
  float max = _mm512_reduce_max_ps(vmax);
  for (int i = n16; i < n; ++i) {
    x[i] *= scale;
    max = x[i] > max ? x[i] : max;
  }
  const __m512 vm = _mm512_set1_ps(max);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (int i = 0; i < n16; i += 16) {
    const __m512 e = ExpNonPositive16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(x + i, e);
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  double sum = ReduceLanesPd(lo, hi);
  for (int i = n16; i < n; ++i) {
    x[i] = ExpNonPositive(x[i] - max);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  const __m512 vinv = _mm512_set1_ps(inv);
  for (int i = 0; i < n16; i += 16)
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv));
  for (int i = n16; i < n; ++i) x[i] *= inv;
}

}  // namespace

void FillAttentionAvx512(AttentionKernels& k) {
  k.dot = DotAvx512<float>;
  k.dot_rows = [](const float* q, const float* const* rows, int n_rows, int n, float* out) {
    DotRowsAvx512<float>(q, rows, n_rows, n, out, {});
  };
  k.axpy = AxpyAvx512;
  k.axpy_rows = [](const float* w, const float* const* rows, int n_rows, float* y, int n) {
    AxpyRowsAvx512<float>(w, rows, n_rows, y, n, {});
  };
  k.dot_tile = DotTileAvx512<float>;
  k.axpy_tile = AxpyTileAvx512<float>;
  k.softmax = SoftmaxAvx512;
  k.dot_tile_f16 = DotTileAvx512<fp16_t>;
  k.axpy_tile_f16 = AxpyTileAvx512<fp16_t>;
}

}  // namespace shardlm::internal
