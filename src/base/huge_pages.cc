// 2 MiB-aligned buffers with transparent huge pages asked for (see huge_pages.h).
#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace shardlm {

void HugePageFree::operator()(uint8_t* p) const { std::free(p); }

HugePageBuffer AllocateHugePages(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes == 0 || bytes > SIZE_MAX - kHuge) return nullptr;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHuge, rounded));
  if (p == nullptr) return nullptr;
  // Advice only: without THP support the buffer simply keeps 4 KiB pages.
  madvise(p, rounded, MADV_HUGEPAGE);
  return HugePageBuffer(p);
}

}  // namespace shardlm
