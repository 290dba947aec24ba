// RepackPanels: which matrices, the copies, and the pages given back (panel_repack.h).
#include "model/panel_repack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "tensor/panels.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

// Panels per work item: the head (151936 rows) splits into many, a layer matrix into few.
constexpr int64_t kPanelsPerItem = 256;

struct RepackItem {
  size_t matrix;
  int64_t first_panel, end_panel;
};

bool WantsPanels(const WeightView& view) {
  if (view.data == nullptr || view.panel_bytes != 0 || !HasPanelLayout(view.type)) return false;
  const TypeTraits* traits = GetTypeTraits(view.type);
  return traits != nullptr && traits->panel_dot != nullptr &&
         view.cols % PanelColumns(view.type) == 0;
}

// Drops this process's mapping of the whole pages inside [data, data + bytes) of the file
// (read-only, private: they are read back from the file if touched again).
void ReleaseFilePages(const void* data, size_t bytes) {
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(data) + page - 1) / page * page;
  const uintptr_t end = (uintptr_t(data) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

constexpr size_t kMatrixAlign = 64;

// The matrices of the stage a repack may copy: every matrix of the tensor list but the
// embeddings (looked up by row), and the head (the embedding's rows when tied).
std::vector<WeightView*> StageMatrices(const ModelConfig& config, StageWeights* weights) {
  std::vector<WeightView*> views;
  if (weights->has_head) views.push_back(&weights->output);
  ForEachStageTensor(config, weights->layers, [&](const TensorSpec& spec) {
    if (!spec.matrix() || spec.role == TensorRole::kTokenEmbd ||
        spec.role == TensorRole::kPerLayerTokenEmbd || spec.role == TensorRole::kOutput) {
      return;
    }
    views.push_back(SlotOf(*weights, spec.role, spec.layer).matrix);
  });
  return views;
}

}  // namespace

Result<PanelStore> RepackPanels(const ModelConfig& config, StageWeights* weights,
                                ThreadPool& threads) {
  PanelStore store;
  const std::vector<WeightView*> views = StageMatrices(config, weights);
  std::vector<WeightView> sources;  // the row views, kept until the copies are done
  std::vector<WeightView*> targets;
  for (WeightView* view : views) {
    if (WantsPanels(*view)) {
      sources.push_back(*view);
      targets.push_back(view);
    }
  }
  std::vector<size_t> offsets;  // [matrix] → its panels in the arena
  for (const WeightView& src : sources) {
    offsets.push_back(store.bytes_);
    const auto bytes = size_t(PanelMatrixBytes(src.type, src.rows, src.cols));
    store.bytes_ += (bytes + kMatrixAlign - 1) / kMatrixAlign * kMatrixAlign;
  }
  store.matrices_ = int(sources.size());
  if (sources.empty()) return store;
  // One arena for every matrix (one allocation per matrix rounded to 2 MiB each held ~170
  // MiB more), on huge pages: a decode step streams every panel once.
  store.arena_ = AllocateHugePages(store.bytes_);
  if (store.arena_ == nullptr) {
    return ResourceExhausted(
        "out of memory for {} bytes ({:.1f} MiB) of weight panels ({} matrices of layers "
        "[{}, {}))",
        store.bytes_, double(store.bytes_) / (1024.0 * 1024.0), sources.size(),
        weights->layers.begin, weights->layers.end);
  }
  uint8_t* arena = store.arena_.get();

  std::vector<RepackItem> items;
  std::vector<std::atomic<int>> items_left(sources.size());
  for (size_t m = 0; m < sources.size(); ++m) {
    const int64_t panels = (sources[m].rows + kPanelRows - 1) / kPanelRows;
    for (int64_t p = 0; p < panels; p += kPanelsPerItem) {
      items.push_back({m, p, std::min(panels, p + kPanelsPerItem)});
      ++items_left[m];
    }
  }
  // The file's rows of a copied matrix go back at once, unless they are the embedding
  // (looked up by row later: on stage 0, and on every stage where layers take per-layer
  // inputs).
  const bool embeds = weights->has_embedding || config.n_embd_per_layer > 0;
  auto release = [&](size_t m) {
    const WeightView& src = sources[m];
    const bool looked_up = embeds && src.data == weights->token_embd.data;
    if (!looked_up) ReleaseFilePages(src.data, size_t(src.row_bytes * src.rows));
  };
  // The pool hands the items out through its atomic counter, so uneven matrices balance.
  threads.ParallelForAsGuest(items.size(), [&](size_t i, size_t) {
    const RepackItem& item = items[i];
    const WeightView& src = sources[item.matrix];
    shardlm::RepackPanels(src.type, src.data, src.row_bytes, src.rows, src.cols, item.first_panel,
                          item.end_panel, arena + offsets[item.matrix]);
    if (--items_left[item.matrix] == 0) release(item.matrix);
  });

  for (size_t m = 0; m < sources.size(); ++m) {
    WeightView& view = *targets[m];
    view.data = arena + offsets[m];
    view.panel_bytes = PanelStrideBytes(view.type, view.cols);
  }
  // A last stage binds a tied embedding only as its head, which is now the panels.
  if (!embeds && weights->output.panel_bytes != 0) weights->token_embd = {};
  return store;
}

}  // namespace shardlm
