// The traits tables: one per ISA, built once (thread-safe static init) from the generic row
// plus the ISA file's overrides; and the CPU/ISA detection that picks one.
//
// Goals: dispatch happens here and nowhere else; a type an ISA does not accelerate keeps
// its generic kernels; SHARDLM_ISA=generic|avx2|avx512 forces a lower ISA (never a higher
// one than the CPU has), so the scalar path can be run on any machine.
// Non-goals: per-call dispatch, non-x86 ISAs.
#include "tensor/type_traits.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "tensor/kernels_impl.h"

namespace shardlm {
namespace {

constexpr size_t kNumTypes = static_cast<size_t>(GgmlType::kSentinel);
constexpr size_t kNumIsas = static_cast<size_t>(Isa::kSentinel);
using Table = std::array<TypeTraits, kNumTypes>;

constexpr GgmlType kComputable[] = {
    GgmlType::kF32,    GgmlType::kF16,   GgmlType::kBF16,  GgmlType::kQ4_0,   GgmlType::kQ4_1,
    GgmlType::kQ5_0,   GgmlType::kQ5_1,  GgmlType::kQ8_0,  GgmlType::kQ2_K,   GgmlType::kQ3_K,
    GgmlType::kQ4_K,   GgmlType::kQ5_K,  GgmlType::kQ6_K,  GgmlType::kIq4Nl,  GgmlType::kIq4Xs,
    GgmlType::kIq2Xxs, GgmlType::kIq2Xs, GgmlType::kIq2S,  GgmlType::kIq3Xxs, GgmlType::kIq3S,
    GgmlType::kIq1S,   GgmlType::kIq1M,  GgmlType::kTq1_0, GgmlType::kTq2_0,  GgmlType::kMxfp4,
};

bool CpuHasAvx2() {
  // bmi2 too: kernels_avx2.cc is compiled with -mbmi2 (CMakeLists.txt).
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
}

bool CpuHasAvx512() {
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("avx512bf16") &&  // kernels_avx512.cc may use vdpbf16ps
         __builtin_cpu_supports("avx512vbmi");    // and the grid kernels byte permutes
}

Isa BestCpuIsa() {
  __builtin_cpu_init();  // safe to repeat; needed if reached from a static initializer
  if (CpuHasAvx512()) return Isa::kAvx512;
  if (CpuHasAvx2()) return Isa::kAvx2;
  return Isa::kGeneric;
}

Table BuildTable(Isa isa) {
  Table table;
  for (GgmlType type : kComputable) {
    TypeTraits& row = table[static_cast<size_t>(type)];
    row.type = type;
    internal::FillGenericKernels(row);
    if (isa == Isa::kAvx2 || isa == Isa::kAvx512) internal::FillAvx2Kernels(row);
    if (isa == Isa::kAvx512) internal::FillAvx512Kernels(row);
  }
  return table;
}

const Table* TableFor(Isa isa) {
  static const std::array<Table, kNumIsas> tables = [] {
    std::array<Table, kNumIsas> all;
    for (size_t i = 0; i < kNumIsas; ++i) {
      const Isa isa = static_cast<Isa>(i);
      if (CpuHasIsa(isa)) all[i] = BuildTable(isa);
    }
    return all;
  }();
  return &tables[static_cast<size_t>(isa)];
}

}  // namespace

namespace internal {

Isa CapIsa(const char* forced, Isa best) {
  if (forced == nullptr) return best;
  Isa want = best;
  if (std::strcmp(forced, "generic") == 0) want = Isa::kGeneric;
  if (std::strcmp(forced, "avx2") == 0) want = Isa::kAvx2;
  if (std::strcmp(forced, "avx512") == 0) want = Isa::kAvx512;
  return static_cast<int>(want) < static_cast<int>(best) ? want : best;
}

}  // namespace internal

bool CpuHasIsa(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(BestCpuIsa()); }

Isa DetectIsa() {
  static const Isa isa = internal::CapIsa(std::getenv("SHARDLM_ISA"), BestCpuIsa());
  return isa;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    default:
      return "unknown";
  }
}

const TypeTraits* GetTypeTraitsFor(GgmlType type, Isa isa) {
  if (static_cast<size_t>(isa) >= kNumIsas || !CpuHasIsa(isa)) return nullptr;
  if (static_cast<size_t>(type) >= kNumTypes) return nullptr;
  const TypeTraits& row = (*TableFor(isa))[static_cast<size_t>(type)];
  return row.vec_dot != nullptr ? &row : nullptr;
}

const TypeTraits* GetTypeTraits(GgmlType type) { return GetTypeTraitsFor(type, DetectIsa()); }

int64_t ActRowBytes(const TypeTraits& traits, int64_t n) {
  const auto info = LookupGgmlType(static_cast<uint32_t>(traits.act_type));
  return info ? RowBytes(*info, n) + n / info->block_size * traits.act_side_bytes : 0;
}

void QuantizeActRow(const TypeTraits& traits, const float* src, void* dst, int64_t n) {
  traits.quantize_act(src, dst, n);
  if (traits.act_side != nullptr) traits.act_side(dst, n);
}

}  // namespace shardlm
