// Avx512 kernels: overrides of the generic traits rows for the types this ISA accelerates.
// Compiled with the avx512 flags (CMakeLists.txt); only called when the CPU has avx512.
#include "tensor/kernels_impl.h"

namespace shardlm::internal {

void FillAvx512Kernels(TypeTraits& traits) { (void)traits; }

}  // namespace shardlm::internal
