// Time since a steady-clock instant, as a double: what the stats, the request log lines and
// the progress lines report.
#pragma once

#include <chrono>

namespace shardlm {

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace shardlm
