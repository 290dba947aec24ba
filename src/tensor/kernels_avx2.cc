// Avx2 kernels: overrides of the generic traits rows for the types this ISA accelerates.
// Compiled with the avx2 flags (CMakeLists.txt); only called when the CPU has avx2.
#include "tensor/kernels_impl.h"

namespace shardlm::internal {

void FillAvx2Kernels(TypeTraits& traits) { (void)traits; }

}  // namespace shardlm::internal
