// LoadModelFile implementation: open, page in with progress, bind model and tokenizer.
#include "runtime/model_loader.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace shardlm {
namespace {

// Touches one byte per 4 KiB page of every tensor, in file order, printing the percentage
// every 10% (rewriting one line on a terminal; a single line when stderr is a file).
// Returns a checksum so the reads are not optimized away.
uint64_t Prefault(const GgufFile& file, bool show_progress) {
  const bool tty = isatty(fileno(stderr));
  constexpr uint64_t kPage = 4096;
  uint64_t total = 0;
  for (const GgufTensorInfo& tensor : file.tensors()) total += tensor.n_bytes;
  uint64_t done = 0;
  uint64_t checksum = 0;
  int last_decile = -1;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    const volatile uint8_t* bytes = tensor.data;
    for (uint64_t offset = 0; offset < tensor.n_bytes; offset += kPage) checksum += bytes[offset];
    done += tensor.n_bytes;
    const int decile = total ? int(done * 10 / total) : 10;
    if (show_progress && tty && decile != last_decile) {
      std::fprintf(stderr, "\rloading %s: %3d%%", file.name().c_str(), decile * 10);
      last_decile = decile;
    }
  }
  if (show_progress) {
    std::fprintf(stderr, "%sloading %s: %.2f MiB of weights paged in\n", tty ? "\r" : "",
                 file.name().c_str(), double(total) / (1024.0 * 1024.0));
  }
  return checksum;
}

}  // namespace

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
    static volatile uint64_t sink;
    sink = Prefault(*loaded.file, options.show_progress);
    (void)sink;
  }
  loaded.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

}  // namespace shardlm
