// <immintrin.h> for the *_avx2.cc / *_avx512.cc kernels, without GCC 12's false warnings.
//
// GCC 12 flags its own intrinsics' "undefined upper half" idiom (__m512 __Y = __Y) as
// uninitialized at every inlined use; the warning is a known false positive, silenced for
// the header only, so the kernels themselves stay under -Wall -Wextra.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
