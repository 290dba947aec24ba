// CHECK (always on) and DCHECK (debug only): broken invariants, never bad input.
//
// Bad files and requests return a Status (status.h); these macros are for states that
// mean a bug in shardlm. They print the condition, the place and a message, then abort.
#pragma once

#include <cstdio>
#include <cstdlib>

#define SHARDLM_CHECK(cond)                                                          \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

#define SHARDLM_CHECK_MSG(cond, ...)                                                  \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);  \
      std::fprintf(stderr, __VA_ARGS__);                                              \
      std::fputc('\n', stderr);                                                       \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#ifdef NDEBUG
#define SHARDLM_DCHECK(cond) \
  do {                       \
  } while (0)
#else
#define SHARDLM_DCHECK(cond) SHARDLM_CHECK(cond)
#endif
