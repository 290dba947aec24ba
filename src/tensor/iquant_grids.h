// The grids of the IQ1, IQ2 and IQ3 weight types: the fixed sets of magnitudes a group of 8
// (IQ1, IQ2) or 4 (IQ3) weights is rounded to, so that one grid index of 8 to 11 bits stands
// for a whole group. The grids are part of the file format (a file stores indices into them).
//
// Layout, as the kernels read them: entry i of an 8-wide grid is a uint64 whose byte k is
// element k's magnitude (IQ2: 8, 25 or 43; IQ1_S: −1, 0 or 1 as int8), of a 4-wide grid a
// uint32 (IQ3_XXS: 4..62, IQ3_S: 1..15, odd). They are built at compile time from packed
// codes (below), each element a 2- or 3-bit index into its grid's levels.
//
// Sign codes: IQ2_XXS, IQ2_XS and IQ3_XXS store 7 of a group's 8 signs; the eighth makes the
// number of negative signs even (EvenSigns).
//
// Thread safety: constant data.
#pragma once

#include <array>
#include <cstdint>

namespace shardlm {

// The levels a grid's packed codes index: IQ2 magnitudes, IQ3 magnitudes, IQ1 values (int8).
inline constexpr uint8_t kIq2Levels[3] = {8, 25, 43};
inline constexpr uint8_t kIq3XxsLevels[8] = {4, 12, 20, 28, 36, 44, 52, 62};
inline constexpr uint8_t kIq3SLevels[8] = {1, 3, 5, 7, 9, 11, 13, 15};
inline constexpr uint8_t kIq1Levels[3] = {0xFF, 0, 1};  // int8 −1, 0, 1

// The packed codes the grids are built from: element k of entry i is bits [b·k, b·k + b) of
// code i, an index into the grid's levels (b = 2 for the 8-wide grids, 3 for the 4-wide
// ones). Kernels that decode entries with vector permutes look these up instead of the grids.
extern const std::array<uint16_t, 256> kIq2XxsCodes;
extern const std::array<uint16_t, 512> kIq2XsCodes;
extern const std::array<uint16_t, 1024> kIq2SCodes;
extern const std::array<uint16_t, 256> kIq3XxsCodes;
extern const std::array<uint16_t, 512> kIq3SCodes;
extern const std::array<uint16_t, 2048> kIq1SCodes;

extern const std::array<uint64_t, 256> kIq2XxsGrid;
extern const std::array<uint64_t, 512> kIq2XsGrid;
extern const std::array<uint64_t, 1024> kIq2SGrid;
extern const std::array<uint32_t, 256> kIq3XxsGrid;
extern const std::array<uint32_t, 512> kIq3SGrid;
extern const std::array<uint64_t, 2048> kIq1SGrid;

// The 8 signs of a group from its 7-bit code: bit k set = element k negative.
constexpr uint8_t EvenSigns(uint32_t code7) {
  const uint32_t c = code7 & 127;
  return static_cast<uint8_t>(c | ((__builtin_popcount(c) & 1) << 7));
}

// For each 7-bit sign code, the 8 signs as bytes +1 / −1 (what a SIMD sign instruction takes).
inline constexpr std::array<uint64_t, 128> kEvenSignBytes = [] {
  std::array<uint64_t, 128> table{};
  for (uint32_t code = 0; code < 128; ++code) {
    const uint8_t signs = EvenSigns(code);
    uint64_t bytes = 0;
    for (int k = 0; k < 8; ++k) bytes |= uint64_t{(signs >> k) & 1 ? 0xFFu : 0x01u} << (8 * k);
    table[code] = bytes;
  }
  return table;
}();

// For each byte of 8 explicit signs (IQ2_S, IQ3_S), the signs as bytes +1 / −1.
inline constexpr std::array<uint64_t, 256> kSignBytes = [] {
  std::array<uint64_t, 256> table{};
  for (uint32_t signs = 0; signs < 256; ++signs) {
    uint64_t bytes = 0;
    for (int k = 0; k < 8; ++k) bytes |= uint64_t{(signs >> k) & 1 ? 0xFFu : 0x01u} << (8 * k);
    table[signs] = bytes;
  }
  return table;
}();

}  // namespace shardlm
