// LoadModelFile: open a GGUF, bind the whole model and its tokenizer, with progress.
//
// Goals: one call for the CLI (`run`, `bench`) and tests; clear errors naming the file; a
// progress line on stderr while the weights are paged in (the mapping is read once, in
// file order, so the first forward pass does not stall on page faults and benchmarks do not
// measure disk reads).
// Non-goals: layer splits (stages are loaded by the pipeline: load with prefault = false,
// then each stage pages in only its own tensors, model/prefault.h).
//
// Thread safety: none needed (a free function). Lifetime: LoadedModel owns everything; the
// Model and Tokenizer point into the file, which the shared_ptr keeps alive.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct LoadedModel {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  double load_seconds = 0.0;
};

struct LoadOptions {
  bool show_progress = false;  // "loading <file>: NN%" on stderr
  bool prefault = true;        // read every weight page once before returning
  bool repack = true;          // the model computes: repack into panels (Model::Load)
  // The cores of the one stage that will compute with this binding (its device's, pinned),
  // which repack the panels so that their memory is first touched there; empty: every core.
  std::vector<int> repack_cores = {};
};

// "loading <label>: N matrices repacked into panels (MiB) in s" on stderr, when
// show_progress and the model has panels; start: when Model::Load began.
void ReportPanels(const Model& model, const std::string& label,
                  std::chrono::steady_clock::time_point start, bool show_progress);

Result<LoadedModel> LoadModelFile(const std::string& path, const LoadOptions& options = {});

}  // namespace shardlm
