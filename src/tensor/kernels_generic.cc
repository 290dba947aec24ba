// FillGenericKernels: the scalar traits row of every weight type shardlm computes, which
// type_traits.cc then hands to the ISA files for overrides.
#include "tensor/kernels_generic.h"

#include "gguf/ggml_type.h"
#include "tensor/kernels_impl.h"

namespace shardlm::internal {

void FillGenericKernels(TypeTraits& traits) {
  const GgmlType type = traits.type;
  traits = TypeTraits{};
  traits.type = type;
  FillGenericFloatKernels(traits);
  FillGenericLegacyKernels(traits);
  FillGenericKQuantKernels(traits);
  FillGenericIQuantKernels(traits);
  FillGenericGridKernels(traits);
  FillGenericTernaryKernels(traits);
  if (const auto info = LookupGgmlType(static_cast<uint32_t>(type))) {
    traits.block_size = info->block_size;
  }
}

}  // namespace shardlm::internal
