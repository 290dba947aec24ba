// LoadModelFile implementation: open, page in with progress, bind model and tokenizer.
#include "runtime/model_loader.h"

#include <chrono>
#include <span>
#include <vector>

#include "model/prefault.h"

namespace shardlm {

Result<LoadedModel> LoadModelFile(const std::string& path, const LoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  loaded.file = std::move(file);
  auto model = Model::Load(loaded.file);
  if (!model.ok()) return model.status().WithContext(path);
  loaded.model = std::move(model).value();
  auto tokenizer = Tokenizer::FromGguf(*loaded.file);
  if (!tokenizer.ok()) return tokenizer.status().WithContext(path);
  loaded.tokenizer = std::move(tokenizer).value();
  if (options.prefault) {
    // Every tensor of the file, in file order (a split pages in per stage instead).
    std::vector<std::span<const uint8_t>> ranges;
    for (const GgufTensorInfo& tensor : loaded.file->tensors()) {
      ranges.emplace_back(tensor.data, tensor.n_bytes);
    }
    PrefaultBytes(ranges, loaded.file->name(), options.show_progress);
  }
  loaded.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

}  // namespace shardlm
