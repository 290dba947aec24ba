// Generic (scalar) attention kernels and the per-ISA table (see attention_kernels.h).
#include "model/attention_kernels.h"

#include <cmath>

namespace shardlm {
namespace {

float DotGeneric(const float* a, const float* b, int n) {
  float lanes[16] = {};
  const int n16 = n - n % 16;
  for (int i = 0; i < n16; i += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] = std::fma(a[i + j], b[i + j], lanes[j]);
  }
  float sum = internal::SumLanes(lanes);
  for (int i = n16; i < n; ++i) sum = std::fma(a[i], b[i], sum);
  return sum;
}

void DotRowsGeneric(const float* q, const float* const* rows, int n_rows, int n, float* out) {
  for (int r = 0; r < n_rows; ++r) out[r] = DotGeneric(q, rows[r], n);
}

void AxpyGeneric(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void AxpyRowsGeneric(const float* w, const float* const* rows, int n_rows, float* y, int n) {
  for (int r = 0; r < n_rows; ++r) AxpyGeneric(w[r], rows[r], y, n);
}

void DotTileGeneric(const float* const* qs, int n_q, const float* const* rows, int n_rows, int n,
                    float* const* outs) {
  for (int q = 0; q < n_q; ++q) DotRowsGeneric(qs[q], rows, n_rows, n, outs[q]);
}

void AxpyTileGeneric(const float* const* ws, int n_q, const float* const* rows, int n_rows,
                     float* const* ys, int n) {
  for (int q = 0; q < n_q; ++q) AxpyRowsGeneric(ws[q], rows, n_rows, ys[q], n);
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
  k.dot = DotGeneric;
  k.dot_rows = DotRowsGeneric;
  k.axpy = AxpyGeneric;
  k.axpy_rows = AxpyRowsGeneric;
  k.dot_tile = DotTileGeneric;
  k.axpy_tile = AxpyTileGeneric;
  k.softmax = SoftmaxGeneric;
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
