// Generic (scalar) attention kernels and the per-ISA table (see attention_kernels.h).
#include "model/attention_kernels.h"

#include <cmath>

namespace shardlm {
namespace {

template <typename Row>
float DotGeneric(const float* a, const Row* b, int n) {
  float lanes[16] = {};
  const int n16 = n - n % 16;
  for (int i = 0; i < n16; i += 16) {
    for (int j = 0; j < 16; ++j)
      lanes[j] = std::fma(a[i + j], internal::RowValue(b, i + j), lanes[j]);
  }
  float sum = internal::SumLanes(lanes);
  for (int i = n16; i < n; ++i) sum = std::fma(a[i], internal::RowValue(b, i), sum);
  return sum;
}

template <typename Row>
void DotRowsGeneric(const float* q, const Row* const* rows, int n_rows, int n, float* out,
                    Ahead ahead) {
  for (int r = 0; r < n_rows; ++r) {
    internal::AskAhead(ahead, r, r + 1, n_rows);
    out[r] = DotGeneric(q, rows[r], n);
  }
}

void AxpyGeneric(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

template <typename Row>
void AxpyRowsGeneric(const float* w, const Row* const* rows, int n_rows, float* y, int n) {
  internal::AxpyRowsTail(w, rows, n_rows, 0, y, n);
}

// Every query's pass over the rows asks for `ahead` (see AskAhead).
template <typename Row>
void DotTileGeneric(const float* const* qs, int n_q, const Row* const* rows, int n_rows, int n,
                    float* const* outs, Ahead ahead) {
  for (int q = 0; q < n_q; ++q) DotRowsGeneric(qs[q], rows, n_rows, n, outs[q], ahead);
}

template <typename Row>
void AxpyTileGeneric(const float* const* ws, int n_q, const Row* const* rows, int n_rows,
                     float* const* ys, int n, Ahead ahead) {
  for (int q = 0; q < n_q; ++q) {
    internal::AskAhead(ahead, 0, n_rows, n_rows);
    AxpyRowsGeneric(ws[q], rows, n_rows, ys[q], n);
  }
}

void SoftmaxGeneric(float* x, int n, float scale) {
  float max = -INFINITY;
  for (int i = 0; i < n; ++i) {
    x[i] *= scale;
    max = x[i] > max ? x[i] : max;
  }
  double lanes[16] = {};
  const int n16 = n - n % 16;
  for (int i = 0; i < n16; i += 16) {
    for (int j = 0; j < 16; ++j) {
      x[i + j] = internal::ExpNonPositive(x[i + j] - max);
      lanes[j] += x[i + j];
    }
  }
  double sum = internal::SumLanes(lanes);
  for (int i = n16; i < n; ++i) {
    x[i] = internal::ExpNonPositive(x[i] - max);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

AttentionKernels Build(Isa isa) {
  AttentionKernels k;
  k.dot = DotGeneric<float>;
  k.dot_rows = [](const float* q, const float* const* rows, int n_rows, int n, float* out) {
    DotRowsGeneric<float>(q, rows, n_rows, n, out, {});
  };
  k.axpy = AxpyGeneric;
  k.axpy_rows = AxpyRowsGeneric<float>;
  k.dot_tile = DotTileGeneric<float>;
  k.axpy_tile = AxpyTileGeneric<float>;
  k.softmax = SoftmaxGeneric;
  k.dot_tile_f16 = DotTileGeneric<fp16_t>;
  k.axpy_tile_f16 = AxpyTileGeneric<fp16_t>;
  if (isa == Isa::kAvx2 || isa == Isa::kAvx512) internal::FillAttentionAvx2(k);
  if (isa == Isa::kAvx512) internal::FillAttentionAvx512(k);
  return k;
}

}  // namespace

const AttentionKernels* GetAttentionKernelsFor(Isa isa) {
  static const AttentionKernels kTables[] = {Build(Isa::kGeneric), Build(Isa::kAvx2),
                                             Build(Isa::kAvx512)};
  // The tensor module knows which ISAs this CPU runs; F32 traits exist for each it supports.
  if (int(isa) < 0 || isa >= Isa::kSentinel) return nullptr;
  if (GetTypeTraitsFor(GgmlType::kF32, isa) == nullptr) return nullptr;
  return &kTables[int(isa)];
}

const AttentionKernels& GetAttentionKernels() {
  static const AttentionKernels* kernels = GetAttentionKernelsFor(DetectIsa());
  return *kernels;
}

}  // namespace shardlm
