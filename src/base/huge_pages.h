// Large buffers that are streamed every step (weight panels, the KV page pool), allocated
// 2 MiB-aligned and, where the kernel allows it (transparent huge pages in `madvise` or
// `always` mode), backed by huge pages: with 4 KiB pages a stream over hundreds of MiB
// takes a TLB miss per page and the hardware prefetcher stops at every page boundary.
//
// Goals: one allocation helper for both users. Non-goals: explicit hugetlbfs pages, NUMA
// placement. The memory is not zeroed and stays uncommitted until first touched.
//
// Thread safety: the functions are thread-safe; a buffer is owned by its unique_ptr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shardlm {

struct HugePageFree {
  void operator()(uint8_t* p) const;
};
using HugePageBuffer = std::unique_ptr<uint8_t[], HugePageFree>;

// `bytes` (> 0) rounded up to 2 MiB, 2 MiB-aligned, huge pages asked for; nullptr when the
// memory cannot be had.
HugePageBuffer AllocateHugePages(size_t bytes);

}  // namespace shardlm
