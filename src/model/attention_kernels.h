// Attention row kernels (q·k dot, p·v accumulate) with one fixed arithmetic order shared by
// every ISA, so generic, AVX2 and AVX-512 give bitwise-equal results. F16 cache rows are either
// widened inside the *_f16 tile kernels or, like the block types' (Q8_0, Q4_0, ...), converted
// by their element type's TypeTraits (dequantize_row, quantize_act).
//
// Order: Dot splits [0, n16) (n16 = n rounded down to 16) into 16 lanes, lane j taking the
// elements i ≡ j (mod 16) in increasing i with a fused multiply-add; the lanes are summed by
// the fixed tree of SumLanes; the tail [n16, n) is then added with fused multiply-adds in
// order. Axpy computes y[i] = fma(a, x[i], y[i]) per element; AxpyRows applies that for
// several rows in order, keeping y in registers. The *_tile forms run several queries over
// the same rows with the same per-element arithmetic. Softmax
// scales, takes the max, exponentiates with ExpNonPositive (fused multiply-adds in a fixed
// order), sums the exponentials in double over the same 16 lanes + SumLanes tree + tail as
// Dot, and multiplies by the float reciprocal of the sum.
// Goals: attention that keeps up with the matmuls; ISA chosen once (DetectIsa).
// Rows are F32, or F16 for the *_f16 tiles (decode over an F16 cache). Non-goals: other element
// types (a block-type cache's rows are converted by the type traits first).
//
// Thread safety: the table is immutable after first use.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/fast_exp.h"
#include "tensor/fp16.h"
#include "tensor/type_traits.h"

namespace shardlm {

// Bytes the memory should bring into L2 while a tile kernel reads its rows (the next run of K
// or V rows of the kv head): the kernel asks for them spread over its rows, a share before each
// row (or block of rows) it reads, so the next run streams in while this one is used. One
// thread read an F16 cache at 11 GB/s without it, at 20 GB/s with it (Zen 4, depth 2048).
// Asking for the whole next run at once before a piece of rows gained nothing: the requests
// queue behind each other. Empty: nothing to ask for.
struct Ahead {
  const uint8_t* p = nullptr;
  size_t bytes = 0;
};

struct AttentionKernels {
  float (*dot)(const float* a, const float* b, int n) = nullptr;
  // out[r] = dot(q, rows[r], n) for r < n_rows, each bitwise equal to `dot`.
  void (*dot_rows)(const float* q, const float* const* rows, int n_rows, int n,
                   float* out) = nullptr;
  void (*axpy)(float a, const float* x, float* y, int n) = nullptr;  // y += a·x
  // y += Σ_r w[r]·rows[r] for r = 0, 1, ... in order: per element exactly n_rows axpy calls.
  void (*axpy_rows)(const float* w, const float* const* rows, int n_rows, float* y,
                    int n) = nullptr;
  // Several queries against the same rows (register blocking over queries × rows):
  // outs[q][r] = dot(qs[q], rows[r], n), each bitwise equal to `dot`; `ahead` asked for.
  void (*dot_tile)(const float* const* qs, int n_q, const float* const* rows, int n_rows, int n,
                   float* const* outs, Ahead ahead) = nullptr;
  // ys[q] += Σ_r ws[q][r]·rows[r], each bitwise equal to axpy_rows(ws[q], rows, n_rows, ys[q]);
  // `ahead` asked for.
  void (*axpy_tile)(const float* const* ws, int n_q, const float* const* rows, int n_rows,
                    float* const* ys, int n, Ahead ahead) = nullptr;
  // x[i] ← exp(s_i − m) / Σ_j exp(s_j − m) with s_i = x[i]·scale and m = max_j s_j (n >= 1).
  void (*softmax)(float* x, int n, float scale) = nullptr;
  // dot_tile and axpy_tile over rows of IEEE halves (an F16 cache's stored rows, widened as they
  // are loaded instead of converted into a buffer first): bitwise what dot_tile and axpy_tile
  // give on the widened rows.
  void (*dot_tile_f16)(const float* const* qs, int n_q, const fp16_t* const* rows, int n_rows,
                       int n, float* const* outs, Ahead ahead) = nullptr;
  void (*axpy_tile_f16)(const float* const* ws, int n_q, const fp16_t* const* rows, int n_rows,
                        float* const* ys, int n, Ahead ahead) = nullptr;
};

// Kernels for DetectIsa().
const AttentionKernels& GetAttentionKernels();
// Kernels for one ISA (tests), or nullptr when this CPU lacks it.
const AttentionKernels* GetAttentionKernelsFor(Isa isa);

namespace internal {
// The lane reduction every ISA uses: ((l0+l8)+(l4+l12)) + ((l2+l10)+(l6+l14)) + ... as a
// balanced tree over lane pairs (j, j+8), then (j, j+4), (j, j+2), (j, j+1).
template <typename T>
inline T SumLanes(const T* lanes) {
  T s8[8], s4[4], s2[2];
  for (int j = 0; j < 8; ++j) s8[j] = lanes[j] + lanes[j + 8];
  for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
  for (int j = 0; j < 2; ++j) s2[j] = s4[j] + s4[j + 2];
  return s2[0] + s2[1];
}

// Asks for rows [r0, r1)'s share of `ahead` (of n_rows rows) to come into L2. Every pass of a
// tile kernel over its rows asks: a line already on its way costs little to ask for again, and
// one dropped while the memory's queue was full gets a second chance (one thread, F16 decode,
// group of 2: 18.8 GB/s asked by both queries' passes, 17.3 by the first only). Offsets from
// ahead.p, not addresses cast from integers: GCC at -O2 deleted that loop (no prefetch left).
inline void AskAhead(const Ahead& ahead, int r0, int r1, int n_rows) {
  const size_t from = ahead.bytes * size_t(r0) / size_t(n_rows);
  const size_t to = ahead.bytes * size_t(r1) / size_t(n_rows);
  for (size_t offset = from & ~size_t{63}; offset < to; offset += 64) {
    __builtin_prefetch(ahead.p + offset, 0, 1);
  }
}

// Element i of a row as float: F32 rows as they are, F16 rows widened (exactly).
inline float RowValue(const float* row, int i) { return row[i]; }
inline float RowValue(const fp16_t* row, int i) { return Fp16ToFp32(row[i]); }

// y[col, n) += Σ_r w[r]·rows[r][col, n), row after row in axpy's per-element order: the
// columns a SIMD axpy_rows or axpy_tile leaves after its vector blocks.
template <typename Row>
inline void AxpyRowsTail(const float* w, const Row* const* rows, int n_rows, int col, float* y,
                         int n) {
  for (int r = 0; r < n_rows; ++r) {
    for (int i = col; i < n; ++i) y[i] = std::fma(w[r], RowValue(rows[r], i), y[i]);
  }
}

void FillAttentionAvx2(AttentionKernels& k);    // attention_kernels_avx2.cc
void FillAttentionAvx512(AttentionKernels& k);  // attention_kernels_avx512.cc
}  // namespace internal

}  // namespace shardlm
