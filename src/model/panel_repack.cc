// RepackPanels: which matrices, the copies, and the pages given back (panel_repack.h).
#include "model/panel_repack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "base/check.h"
#include "base/thread_name.h"
#include "tensor/panels.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

// Panels per work item: the head (151936 rows) splits into many, a layer matrix into few.
constexpr int64_t kPanelsPerItem = 256;

struct RepackItem {
  const WeightView* src;  // the GGUF rows
  uint8_t* dst;           // the matrix's panels
  int64_t first_panel, end_panel;
};

bool WantsPanels(const WeightView& view) {
  if (view.data == nullptr || view.panel_bytes != 0 || !HasPanelLayout(view.type)) return false;
  const TypeTraits* traits = GetTypeTraits(view.type);
  return traits != nullptr && traits->panel_dot != nullptr && view.cols % kQK_K == 0;
}

// Drops this process's mapping of the whole pages inside [data, data + bytes) of the file
// (read-only, private: they are read back from the file if touched again).
void ReleaseFilePages(const void* data, size_t bytes) {
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(data) + page - 1) / page * page;
  const uintptr_t end = (uintptr_t(data) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// 2 MiB-aligned and, where the kernel allows it, backed by huge pages: a decode step streams
// every panel once, and with 4 KiB pages that is a TLB miss per page.
uint8_t* AllocatePanels(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHuge, rounded));
  SHARDLM_CHECK_MSG(p != nullptr, "out of memory for %zu bytes of weight panels", bytes);
  madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace

void PanelStore::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

PanelStore RepackPanels(StageWeights* weights) {
  PanelStore store;
  std::vector<WeightView*> views;
  if (weights->has_head) views.push_back(&weights->output);
  for (LayerWeights& w : weights->blocks) {
    for (WeightView* view :
         {&w.attn_q, &w.attn_k, &w.attn_v, &w.attn_output, &w.ffn_gate, &w.ffn_up, &w.ffn_down}) {
      views.push_back(view);
    }
  }
  std::vector<WeightView> sources;  // the row views, kept until the copies are done
  std::vector<WeightView*> targets;
  for (WeightView* view : views) {
    if (WantsPanels(*view)) {
      sources.push_back(*view);
      targets.push_back(view);
    }
  }
  std::vector<RepackItem> items;
  for (size_t m = 0; m < sources.size(); ++m) {
    const WeightView& src = sources[m];
    const auto bytes = size_t(PanelMatrixBytes(src.type, src.rows, src.cols));
    auto* dst = AllocatePanels(bytes);
    store.buffers_.emplace_back(dst);
    store.bytes_ += bytes;
    const int64_t panels = (src.rows + kPanelRows - 1) / kPanelRows;
    for (int64_t p = 0; p < panels; p += kPanelsPerItem) {
      items.push_back({&sources[m], dst, p, std::min(panels, p + kPanelsPerItem)});
    }
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < items.size(); i = next++) {
      const RepackItem& item = items[i];
      shardlm::RepackPanels(item.src->type, item.src->data, item.src->row_bytes, item.src->rows,
                            item.src->cols, item.first_panel, item.end_panel, item.dst);
    }
  };
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < hardware && t < items.size(); ++t) {
    helpers.emplace_back([&] {
      SetThreadName("repack");
      work();
    });
  }
  work();
  for (std::thread& helper : helpers) helper.join();

  for (size_t m = 0; m < sources.size(); ++m) {
    WeightView& view = *targets[m];
    view.data = store.buffers_[m].get();
    view.panel_bytes = PanelStrideBytes(view.type, view.cols);
    const bool looked_up = weights->has_embedding && sources[m].data == weights->token_embd.data;
    if (!looked_up)
      ReleaseFilePages(sources[m].data, size_t(sources[m].row_bytes * sources[m].rows));
  }
  // A last stage binds a tied embedding only as its head, which is now the panels.
  if (!weights->has_embedding && weights->output.panel_bytes != 0) weights->token_embd = {};
  return store;
}

}  // namespace shardlm
