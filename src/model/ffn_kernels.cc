// Generic SwiGLU and the ISA table (ffn_kernels.h).
#include "model/ffn_kernels.h"

namespace shardlm {
namespace {

void SwiGluGeneric(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = internal::SwiGluOne(gate[i], up[i]);
}

FfnKernels Build(Isa isa) {
  FfnKernels k;
  k.swiglu = SwiGluGeneric;
  if (isa == Isa::kAvx2 || isa == Isa::kAvx512) internal::FillFfnAvx2(k);
  if (isa == Isa::kAvx512) internal::FillFfnAvx512(k);
  return k;
}

}  // namespace

const FfnKernels* GetFfnKernelsFor(Isa isa) {
  static const FfnKernels kTables[] = {Build(Isa::kGeneric), Build(Isa::kAvx2),
                                       Build(Isa::kAvx512)};
  if (int(isa) < 0 || isa >= Isa::kSentinel) return nullptr;
  if (GetTypeTraitsFor(GgmlType::kF32, isa) == nullptr) return nullptr;
  return &kTables[int(isa)];
}

const FfnKernels& GetFfnKernels() {
  static const FfnKernels* kernels = GetFfnKernelsFor(DetectIsa());
  return *kernels;
}

}  // namespace shardlm
