// Internal to the per-ISA kernel files (*_avx2.cc, *_avx512.cc): turns one tile kernel
// template `K::Run<NR, NC>` into the two traits entry points, vec_dot (NR = NC = 1) and
// vec_dot_tile (runtime nr, nc dispatched to a compile-time instantiation).
//
// Goals: one source of truth per type and ISA. vec_dot is literally the 1x1 instantiation
// of the tile kernel, and every instantiation computes a (row, token) pair with the same
// sequence of operations (per-lane accumulators over blocks in order, one fixed horizontal
// reduction at the end), so an output never depends on the tile it was computed in.
// Non-goals: intrinsics (this header is ISA-neutral); choosing tile sizes (each type does).
//
// ODR note: every kernel struct K lives in an anonymous namespace of its ISA file, so the
// instantiations below are distinct per ISA and the linker never mixes them up.
#pragma once

#include <cstdint>
#include <utility>

#include "tensor/type_traits.h"

// Fully unrolls a loop over tile rows/tokens, so that per-pair accumulator arrays live in
// registers (GCC -O2 does not unroll on its own; an indexed array would stay in memory).
#define SHARDLM_UNROLL _Pragma("GCC unroll 16")

namespace shardlm::internal::simd {

// Prefetches `bytes` at the same offset in row r + NR, i.e. what the next tile will read.
// A tile interleaves NR row streams, which the hardware prefetcher follows poorly on Zen 4
// when the rows come from DRAM: Q6_K at 4x4 streamed 5 GB/s without this, 18 with it
// (one thread), and the L2-resident speed does not change. The 1-row kernels (decode)
// stream one row after another; they get PrefetchRowsAhead below.
template <int NR>
inline void PrefetchNextTile(const void* p, int64_t w_stride, int bytes) {
  if constexpr (NR > 1) {
    for (int line = 0; line < bytes; line += 64) {
      __builtin_prefetch(static_cast<const char*>(p) + NR * w_stride + line, 0, 3);
    }
  }
}

// Prefetches the nr rows after the nr rows at w (rows are contiguous: w_stride bytes each),
// i.e. what the next decode tile of the same task reads. With both threads streaming, the
// hardware prefetcher alone left each core at ~12 GB/s: Qwen3-0.6B Q4_K_M tg128 (2 threads)
// went from 54 to 61 t/s with this; two tiles ahead gave 59.
inline void PrefetchRowsAhead(const void* w, int64_t w_stride, int nr) {
  const char* next = static_cast<const char*>(w) + nr * w_stride;
  for (int64_t off = 0; off < nr * w_stride; off += 64) __builtin_prefetch(next + off, 0, 3);
}

using TileFn = void (*)(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* act,
                        int64_t act_stride, float* out, int64_t out_stride);

template <class K, int kMaxC, size_t... kIdx>
constexpr void FillTileTable(TileFn* table, std::index_sequence<kIdx...>) {
  ((table[kIdx] = &K::template Run<int(kIdx) / kMaxC + 1, int(kIdx) % kMaxC + 1>), ...);
}

// Function table indexed by (nr - 1) * kMaxC + (nc - 1).
template <class K, int kMaxR, int kMaxC>
struct TileTable {
  TileFn fns[kMaxR * kMaxC] = {};
  constexpr TileTable() { FillTileTable<K, kMaxC>(fns, std::make_index_sequence<kMaxR * kMaxC>()); }
};

template <class K, int kMaxR, int kMaxC>
inline constexpr TileTable<K, kMaxR, kMaxC> kTileTable{};

// How a tile with a single token (decode) goes through its rows.
enum class DecodeRows {
  // One after another through the 1x1 kernel, so the weights are read as one sequential
  // stream. Measured on Zen 4 (one thread, 256 MiB of weights) this streams ~2x faster than
  // interleaving 4 rows: Q8_0 25 vs 12 GB/s, Q4_K 24 vs 16, Q6_K 22 vs 10, F16 28 vs 18. A
  // kernel may provide RunRows(n, w, w_stride, nr, act, out, out_stride) doing the same with
  // its activation preparation hoisted out of the row loop; it must give, row by row, exactly
  // what Run<1, 1> gives.
  kOneByOne,
  // Together, as the tile Run<nr, 1> (bitwise the 1x1 kernel's per row, by the tile contract):
  // the rows share the activation loads and run as two independent dependency chains, which
  // pays where decode is bound by a kernel's instructions rather than by the memory: on a Zen 3
  // (AVX2 only) one core decodes Q4_K at ~10 GB/s, half what it can read. Qwen3-0.6B tg64
  // there, paired against kOneByOne: at 1 thread Q4_K_M 1.18x, Q4_0 1.11x (medians of 4); at 2
  // threads Q8_0 1.18x, IQ4_NL 1.14x, IQ4_XS 1.09x, Q4_0 1.0x, but Q4_K_M 0.97x and TQ2_0
  // 0.90x (medians of 3 and 7), so the K-quants and the ternary types keep kOneByOne.
  kTogether,
};

template <class K, int kMaxR, int kMaxC, DecodeRows kDecode>
void VecDotTile(int64_t n, const void* w, int64_t w_stride, int nr, const void* act,
                int64_t act_stride, int nc, float* out, int64_t out_stride) {
  if (nc == 1) {
    // Decode: ask for the rows of the next tile while these stream (the task's rows are
    // contiguous, so that is where this thread reads next).
    PrefetchRowsAhead(w, w_stride, nr);
    if constexpr (kDecode == DecodeRows::kOneByOne) {
      if constexpr (requires { &K::RunRows; }) {
        // Same per-row sequence, with the activation-side work done once for all rows.
        K::RunRows(n, static_cast<const uint8_t*>(w), w_stride, nr,
                   static_cast<const uint8_t*>(act), out, out_stride);
        return;
      }
      for (int r = 0; r < nr; ++r) {
        K::template Run<1, 1>(n, static_cast<const uint8_t*>(w) + r * w_stride, 0,
                              static_cast<const uint8_t*>(act), 0, out + r * out_stride, 0);
      }
      return;
    }
  }
  kTileTable<K, kMaxR, kMaxC>.fns[(nr - 1) * kMaxC + (nc - 1)](
      n, static_cast<const uint8_t*>(w), w_stride, static_cast<const uint8_t*>(act), act_stride,
      out, out_stride);
}

template <class K>
void VecDot(int64_t n, const void* w_row, const void* act_row, float* out) {
  K::template Run<1, 1>(n, static_cast<const uint8_t*>(w_row), 0,
                        static_cast<const uint8_t*>(act_row), 0, out, 0);
}

// Installs both entry points of K with a kMaxR x kMaxC tile.
template <class K, int kMaxR, int kMaxC, DecodeRows kDecode = DecodeRows::kOneByOne>
void Install(TypeTraits& traits) {
  traits.vec_dot = &VecDot<K>;
  traits.vec_dot_tile = &VecDotTile<K, kMaxR, kMaxC, kDecode>;
  traits.tile_rows = kMaxR;
  traits.tile_cols = kMaxC;
}

}  // namespace shardlm::internal::simd
