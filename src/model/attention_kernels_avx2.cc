// AVX2 + FMA attention kernels; 16 lanes as two 8-float registers (see attention_kernels.h).
#include <immintrin.h>

#include <cmath>

#include "model/attention_kernels.h"
#include "model/fast_exp_simd.h"
#include "tensor/simd_tile.h"

namespace shardlm::internal {
namespace {

// 8 elements of a row from p: F32 as they are, F16 widened by vcvtph2ps (exact).
inline __m256 LoadRow(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 LoadRow(const fp16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// SumLanes' tree in registers: (j, j+8), (j, j+4), (j, j+2), (j, j+1); then the tail.
template <typename Row>
inline float Finish(__m256 lo, __m256 hi, const float* a, const Row* b, int n16, int n) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  float sum = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  for (int i = n16; i < n; ++i) sum = std::fma(a[i], RowValue(b, i), sum);
  return sum;
}

template <typename Row>
float DotAvx2(const float* a, const Row* b, int n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  const int n16 = n - n % 16;
  for (int i = 0; i < n16; i += 16) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LoadRow(b + i), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), LoadRow(b + i + 8), hi);
  }
  return Finish(lo, hi, a, b, n16, n);
}

// Two rows at a time (four FMA chains); each row's arithmetic is exactly DotAvx2's.
template <typename Row>
void DotRowsAvx2(const float* q, const Row* const* rows, int n_rows, int n, float* out,
                 Ahead ahead) {
  const int n16 = n - n % 16;
  int r = 0;
  for (; r + 2 <= n_rows; r += 2) {
    AskAhead(ahead, r, r + 2, n_rows);
    __m256 lo0 = _mm256_setzero_ps(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
    const Row* k0 = rows[r];
    const Row* k1 = rows[r + 1];
    for (int i = 0; i < n16; i += 16) {
      const __m256 qlo = _mm256_loadu_ps(q + i), qhi = _mm256_loadu_ps(q + i + 8);
      lo0 = _mm256_fmadd_ps(qlo, LoadRow(k0 + i), lo0);
      hi0 = _mm256_fmadd_ps(qhi, LoadRow(k0 + i + 8), hi0);
      lo1 = _mm256_fmadd_ps(qlo, LoadRow(k1 + i), lo1);
      hi1 = _mm256_fmadd_ps(qhi, LoadRow(k1 + i + 8), hi1);
    }
    out[r] = Finish(lo0, hi0, q, k0, n16, n);
    out[r + 1] = Finish(lo1, hi1, q, k1, n16, n);
  }
  AskAhead(ahead, r, n_rows, n_rows);
  for (; r < n_rows; ++r) out[r] = DotAvx2(q, rows[r], n);
}

void AxpyAvx2(float a, const float* x, float* y, int n) {
  const __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

// kRegs registers of y[col, col + 8·kRegs) stay loaded while every row is folded in.
template <int kRegs, typename Row>
void AxpyRowsBlock(const float* w, const Row* const* rows, int n_rows, int col, float* y,
                   Ahead ahead) {
  __m256 acc[kRegs];
  SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) acc[j] = _mm256_loadu_ps(y + col + 8 * j);
  for (int r = 0; r < n_rows; ++r) {
    AskAhead(ahead, r, r + 1, n_rows);
    const __m256 wr = _mm256_set1_ps(w[r]);
    const Row* x = rows[r] + col;
    SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) {
      acc[j] = _mm256_fmadd_ps(wr, LoadRow(x + 8 * j), acc[j]);
    }
  }
  SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) _mm256_storeu_ps(y + col + 8 * j, acc[j]);
}

// Column blocks of 64 (eight independent FMA chains), then 8, then the scalar tail; the first
// block asks for `ahead` (the tail, when there is no block).
template <typename Row>
void AxpyRowsAvx2(const float* w, const Row* const* rows, int n_rows, float* y, int n,
                  Ahead ahead) {
  int col = 0;
  for (; col + 64 <= n; col += 64, ahead = {}) AxpyRowsBlock<8>(w, rows, n_rows, col, y, ahead);
  for (; col + 8 <= n; col += 8, ahead = {}) AxpyRowsBlock<1>(w, rows, n_rows, col, y, ahead);
  AskAhead(ahead, 0, n_rows, n_rows);
  AxpyRowsTail(w, rows, n_rows, col, y, n);
}

// One query at a time: a 2 × 2 block of queries and rows (eight FMA chains, one load per FMA)
// measured no faster in a 2048-token prefill on a Zen 3, and with the four dots' lanes reduced
// together (two dots per register, the same tree) slower (1.15x this kernel's share).
template <typename Row>
void DotTileAvx2(const float* const* qs, int n_q, const Row* const* rows, int n_rows, int n,
                 float* const* outs, Ahead ahead) {
  for (int q = 0; q < n_q; ++q) DotRowsAvx2(qs[q], rows, n_rows, n, outs[q], ahead);
}

// Queries q0, q0 + 1 × kRegs registers of y[col, col + 8·kRegs): per row kRegs loads and two
// broadcasts for 2·kRegs FMAs (AxpyRowsBlock: a load per FMA).
template <int kRegs, typename Row>
void AxpyBlock2(const float* const* ws, const Row* const* rows, int n_rows, int col,
                float* const* ys, Ahead ahead) {
  __m256 acc[2][kRegs];
  SHARDLM_UNROLL for (int q = 0; q < 2; ++q) {
    SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) acc[q][j] = _mm256_loadu_ps(ys[q] + col + 8 * j);
  }
  for (int r = 0; r < n_rows; ++r) {
    AskAhead(ahead, r, r + 1, n_rows);
    const Row* x = rows[r] + col;
    __m256 v[kRegs];
    SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) v[j] = LoadRow(x + 8 * j);
    SHARDLM_UNROLL for (int q = 0; q < 2; ++q) {
      const __m256 w = _mm256_set1_ps(ws[q][r]);
      SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) acc[q][j] =
          _mm256_fmadd_ps(w, v[j], acc[q][j]);
    }
  }
  SHARDLM_UNROLL for (int q = 0; q < 2; ++q) {
    SHARDLM_UNROLL for (int j = 0; j < kRegs; ++j) _mm256_storeu_ps(ys[q] + col + 8 * j, acc[q][j]);
  }
}

// Every pass over the rows asks for `ahead` (see AskAhead).
template <typename Row>
void AxpyTileAvx2(const float* const* ws, int n_q, const Row* const* rows, int n_rows,
                  float* const* ys, int n, Ahead ahead) {
  int q0 = 0;
  for (; q0 + 2 <= n_q; q0 += 2) {
    int col = 0;
    Ahead pass = ahead;  // the first column block's
    for (; col + 32 <= n; col += 32, pass = {}) {
      AxpyBlock2<4>(ws + q0, rows, n_rows, col, ys + q0, pass);
    }
    for (; col + 8 <= n; col += 8, pass = {}) {
      AxpyBlock2<1>(ws + q0, rows, n_rows, col, ys + q0, pass);
    }
    AskAhead(pass, 0, n_rows, n_rows);
    for (int q = q0; q < q0 + 2; ++q) AxpyRowsTail(ws[q], rows, n_rows, col, ys[q], n);
  }
  for (; q0 < n_q; ++q0) AxpyRowsAvx2(ws[q0], rows, n_rows, ys[q0], n, ahead);
}

// Lanes 0-15 of the double sums as four registers of 4; SumLanes<double>'s tree.
inline double ReduceLanesPd(const __m256d* d) {
  const __m256d s8a = _mm256_add_pd(d[0], d[2]), s8b = _mm256_add_pd(d[1], d[3]);
  const __m256d s4 = _mm256_add_pd(s8a, s8b);
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

void SoftmaxAvx2(float* x, int n, float scale) {
  const int n16 = n - n % 16;
  const __m256 vscale = _mm256_set1_ps(scale);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int i = 0; i < n16; i += 8) {
    const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x + i), vscale);
    _mm256_storeu_ps(x + i, s);
    vmax = _mm256_max_ps(vmax, s);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float max = -INFINITY;
  for (float lane : lanes) max = lane > max ? lane : max;
  for (int i = n16; i < n; ++i) {
    x[i] *= scale;
    max = x[i] > max ? x[i] : max;
  }
  const __m256 vm = _mm256_set1_ps(max);
  __m256d d[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                  _mm256_setzero_pd()};
  for (int i = 0; i < n16; i += 16) {
    SHARDLM_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256 e = ExpNonPositive8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * h), vm));
      _mm256_storeu_ps(x + i + 8 * h, e);
      d[2 * h] = _mm256_add_pd(d[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
      d[2 * h + 1] = _mm256_add_pd(d[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
  }
  double sum = ReduceLanesPd(d);
  for (int i = n16; i < n; ++i) {
    x[i] = ExpNonPositive(x[i] - max);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  const __m256 vinv = _mm256_set1_ps(inv);
  for (int i = 0; i < n16; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
  for (int i = n16; i < n; ++i) x[i] *= inv;
}

}  // namespace

void FillAttentionAvx2(AttentionKernels& k) {
  k.dot = DotAvx2<float>;
  k.dot_rows = [](const float* q, const float* const* rows, int n_rows, int n, float* out) {
    DotRowsAvx2<float>(q, rows, n_rows, n, out, {});
  };
  k.axpy = AxpyAvx2;
  k.axpy_rows = [](const float* w, const float* const* rows, int n_rows, float* y, int n) {
    AxpyRowsAvx2<float>(w, rows, n_rows, y, n, {});
  };
  k.dot_tile = DotTileAvx2<float>;
  k.axpy_tile = AxpyTileAvx2<float>;
  k.softmax = SoftmaxAvx2;
  k.dot_tile_f16 = DotTileAvx2<fp16_t>;
  k.axpy_tile_f16 = AxpyTileAvx2<fp16_t>;
}

}  // namespace shardlm::internal
