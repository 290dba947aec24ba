// read_bandwidth: the machine's memory read bandwidth, the ceiling of a decode step (which
// streams every weight once per token). Threads sum disjoint slices of a buffer much larger
// than the caches, several passes, and the best pass counts.
//
// Usage: read_bandwidth [--threads N] [--mib M] [--passes P]
// Prints one JSON line: {"threads", "mib", "gb_per_s"} (10^9 bytes per second).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Sums 64-byte lines with AVX2 loads (four independent accumulators, so the loads are the
// only limit); the sum is returned so the compiler keeps the loads.
__attribute__((target("avx2"))) uint64_t SumSlice(const uint8_t* p, size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t off = 0; off + 128 <= bytes; off += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + off)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + off + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + off + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + off + 96)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, passes = 5;
  size_t mib = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    if (flag == "--mib") mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--passes") passes = std::atoi(argv[i + 1]);
  }
  if (threads < 1 || mib < 1 || passes < 1) {
    std::fprintf(stderr, "usage: read_bandwidth [--threads N] [--mib M] [--passes P]\n");
    return 2;
  }
  const size_t bytes = mib << 20;
  auto* buffer = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
  if (buffer == nullptr) return 1;
  std::memset(buffer, 1, bytes);  // touch every page before timing
  const size_t slice = bytes / threads / 128 * 128;
  double best = 0;
  uint64_t checksum = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<uint64_t> sums(threads);
    std::vector<std::thread> workers;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { sums[t] = SumSlice(buffer + t * slice, slice); });
    }
    for (std::thread& w : workers) w.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (uint64_t s : sums) checksum += s;
    best = std::max(best, static_cast<double>(slice) * threads / seconds / 1e9);
  }
  std::free(buffer);
  std::printf("{\"threads\":%d,\"mib\":%zu,\"gb_per_s\":%.2f,\"checksum\":%llu}\n", threads, mib,
              best, static_cast<unsigned long long>(checksum));
  return 0;
}
