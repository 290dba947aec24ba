// Prefault (prefault.h): touch each page of the given byte ranges once, with progress.
#include "model/prefault.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <vector>

namespace shardlm {
namespace {

// The unit of a page fault on every platform shardlm runs on; touching more often is waste,
// less often leaves pages untouched.
constexpr uintptr_t kPageBytes = 4096;

// Reads the first byte of the range and the first byte of every later page it covers.
uint64_t TouchPages(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return 0;
  const volatile uint8_t* data = bytes.data();
  uint64_t checksum = data[0];
  const uintptr_t start = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t first_boundary = (start / kPageBytes + 1) * kPageBytes;
  for (uintptr_t address = first_boundary; address < start + bytes.size(); address += kPageBytes) {
    checksum += data[address - start];
  }
  return checksum;
}

}  // namespace

size_t PrefaultBytes(std::span<const std::span<const uint8_t>> ranges, const std::string& label,
                     bool show_progress) {
  const bool tty = show_progress && isatty(fileno(stderr));
  size_t total = 0;
  for (std::span<const uint8_t> bytes : ranges) total += bytes.size();
  size_t done = 0;
  uint64_t checksum = 0;
  int last_decile = -1;
  for (std::span<const uint8_t> bytes : ranges) {
    checksum += TouchPages(bytes);
    done += bytes.size();
    const int decile = total ? int(done * 10 / total) : 10;
    if (tty && decile != last_decile) {
      std::fprintf(stderr, "\rloading %s: %3d%%", label.c_str(), decile * 10);
      last_decile = decile;
    }
  }
  if (show_progress) {
    std::fprintf(stderr, "%sloading %s: %.2f MiB of weights paged in\n", tty ? "\r" : "",
                 label.c_str(), double(total) / (1024.0 * 1024.0));
  }
  // Keeps the reads from being optimized away (atomic: stages may prefault concurrently).
  static std::atomic<uint64_t> sink{0};
  sink.fetch_add(checksum, std::memory_order_relaxed);
  return total;
}

size_t PrefaultStage(const StageWeights& weights, const std::string& label, bool show_progress) {
  const std::vector<std::span<const uint8_t>> ranges = StageTensorBytes(weights);
  return PrefaultBytes(ranges, label, show_progress);
}

}  // namespace shardlm
