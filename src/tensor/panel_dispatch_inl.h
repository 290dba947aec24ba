// Internal to the panel kernel files of every ISA (panels_*_avx512.cc, panels_blocks_avx2.cc):
// what turns a kernel's Run<NC> (NC tokens per call, up to the ISA's register budget) into
// TypeTraits::panel_dot, the activation side data, and the prefetch of the panel blocks ahead.
// ISA-neutral.
//
// Anonymous namespace: each including file gets its own copies, compiled for its ISA.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "tensor/panels.h"
#include "tensor/type_traits.h"

namespace shardlm::internal::panels {
namespace {

// Asks for part `part` of kParts of the lines of the block two ahead of p (the next panel's
// first blocks at the end of a panel: panels are contiguous). A kernel asks for one part at each
// step of its work on a block. The hardware prefetcher alone streamed Q6_K panels from DRAM at
// ~18 GB/s per thread against ~27 for the row kernels with their prefetches; all 37-53 lines of
// a 256-column block asked for at once stalled the core on the prefetches themselves (Zen 3: the
// samples sat on the prefetch loop), and spread over the block's steps decode ran 1.1-1.5x
// faster on Zen 4 (Q4_K_M, Q5_K_M, Q6_K, Q3_K_M).
//
// Each part is a fixed count of lines (the last may reach into the next block, which is
// harmless): with each part's bounds computed from `part` at run time, GCC 12 emitted no
// prefetch at all in the kernels these were inlined into.
template <int kParts = 1, class Panel>
inline void PrefetchAhead(const Panel* p, int part = 0) {
  constexpr size_t kLines = (sizeof(Panel) + 63) / 64;
  constexpr size_t kPartLines = (kLines + kParts - 1) / kParts;
  const char* ahead = reinterpret_cast<const char*>(p + 2) + 64 * kPartLines * part;
  for (size_t line = 0; line < kPartLines; ++line) __builtin_prefetch(ahead + 64 * line, 0, 3);
}

using PanelFn = void (*)(int64_t, const uint8_t*, const uint8_t*, int64_t, float*, int64_t, int);

// Kernel K's Run<NC> for NC = 1 .. kMaxTokens, by token count.
template <class K, int... kNc>
constexpr std::array<PanelFn, sizeof...(kNc)> RunTable(std::integer_sequence<int, kNc...>) {
  return {&K::template Run<kNc + 1>...};
}
template <class K, int kMaxTokens>
constexpr auto kRunTable = RunTable<K>(std::make_integer_sequence<int, kMaxTokens>());

template <class K, int kMaxTokens>
void PanelDot(int64_t n, const void* panel, const void* act, int64_t act_stride, int nc, float* out,
              int64_t out_stride, int nr) {
  kRunTable<K, kMaxTokens>[nc - 1](n, static_cast<const uint8_t*>(panel),
                                   static_cast<const uint8_t*>(act), act_stride, out, out_stride,
                                   nr);
}

// The activation side data (PanelActSide) of the 32-element panel kernels, for every type that
// converts to Q8_0, whether or not it has panels itself: so that one conversion serves all the
// matrices of a fused call.
inline void InstallQ8_0ActSide(TypeTraits& traits) {
  if (traits.act_type == GgmlType::kQ8_0) {
    traits.act_side = &FillQ8_0ActSide;
    traits.act_side_bytes = sizeof(PanelActSide);
  }
}

// Sets K as the type's panel kernel, taking up to kMaxTokens tokens per call.
template <class K, int kMaxTokens>
void InstallPanelKernel(TypeTraits& traits) {
  traits.panel_dot = &PanelDot<K, kMaxTokens>;
  traits.panel_tokens = kMaxTokens;
}

}  // namespace
}  // namespace shardlm::internal::panels
