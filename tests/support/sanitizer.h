// Whether a test binary runs under a sanitizer, where every step is many times slower, and
// how long randomized tests shrink there: they run a share of their cases under the
// sanitizers (still every code path the cases reach) and all of them in the Release run.
#pragma once

namespace shardlm::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// `all` cases in the Release run, a quarter of them (the first ones) under a sanitizer.
inline constexpr int CasesUnlessSanitized(int all) { return kSanitizedBuild ? all / 4 : all; }

}  // namespace shardlm::testing
