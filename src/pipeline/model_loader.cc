// LoadModelFile implementation: open, page in with progress, bind model and tokenizer.
#include "pipeline/model_loader.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "base/elapsed.h"
#include "model/prefault.h"

namespace shardlm {

void ReportPanels(const Model& model, const std::string& label,
                  std::chrono::steady_clock::time_point start, bool show_progress) {
  if (!show_progress || model.panels().matrices() == 0) return;
  const double seconds = SecondsSince(start);
  std::fprintf(stderr, "loading %s: %d matrices repacked into panels (%.2f MiB) in %.2f s\n",
               label.c_str(), model.panels().matrices(),
               double(model.panels().bytes()) / (1024.0 * 1024.0), seconds);
}

Result<LoadedModel> LoadModelFile(const std::string& path, const LoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  loaded.file = std::move(file);
  const auto repack_start = std::chrono::steady_clock::now();
  // Pinned as the stage that will compute with it, or none: Model::Load's pool of every core.
  std::unique_ptr<ThreadPool> repack_threads;
  if (options.repack && !options.repack_cores.empty()) {
    repack_threads =
        std::make_unique<ThreadPool>(int(options.repack_cores.size()), options.repack_cores);
  }
  auto model = Model::Load(loaded.file, kAllLayers, options.repack, repack_threads.get());
  if (!model.ok()) return model.status().WithContext(path);
  loaded.model = std::move(model).value();
  ReportPanels(*loaded.model, loaded.file->name(), repack_start, options.show_progress);
  if (options.prefault) {
    // Every tensor the model computes with (a split pages in per stage instead), after the
    // repack: the panels are resident already, and the file pages of repacked matrices,
    // which the repack read and gave back, are not read again.
    PrefaultStage(loaded.model->weights(), loaded.file->name(), options.show_progress);
  }
  auto tokenizer = Tokenizer::FromGguf(*loaded.file);
  if (!tokenizer.ok()) return tokenizer.status().WithContext(path);
  loaded.tokenizer = std::move(tokenizer).value();
  loaded.load_seconds = SecondsSince(start);
  return loaded;
}

}  // namespace shardlm
