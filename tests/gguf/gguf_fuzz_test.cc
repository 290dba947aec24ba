// Fuzz tests for the GGUF reader (CI selects them with --gtest_filter='*Fuzz*'): random byte
// mutations of fixture files and of small written files must parse or fail cleanly; a file
// that parses must keep every tensor's data inside its buffer. Deterministic seed; bounded
// by an iteration count and a wall-clock budget so sanitizer builds stay fast.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "gguf/fingerprint.h"
#include "gguf/gguf_file.h"
#include "gguf_test_util.h"
#include "support/file_bytes.h"
#include "support/fixtures.h"

namespace shardlm {
namespace {

constexpr int kIterations = 2000;
constexpr double kBudgetSeconds = 5.0;  // per test; two tests keep the total near 10 s

// Values at the edges of every integer width, written over counts, lengths and offsets.
constexpr uint64_t kBoundary[] = {0,
                                  1,
                                  0x7f,
                                  0x80,
                                  0xff,
                                  0x7fff,
                                  0xffff,
                                  0x7fffffff,
                                  0xffffffff,
                                  0x7fffffffffffffffull,
                                  0xffffffffffffffffull,
                                  31,
                                  32,
                                  33,
                                  4096};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::vector<uint8_t> Mutate(std::vector<uint8_t> bytes) {
    int n_mutations = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < n_mutations; ++i) MutateOnce(bytes);
    return bytes;
  }

 private:
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  // Most interesting bytes are in the header; bias positions towards it.
  size_t Position(const std::vector<uint8_t>& bytes) {
    if (bytes.empty()) return 0;
    uint64_t limit = Below(2) ? std::min<uint64_t>(bytes.size(), 4096) : bytes.size();
    return static_cast<size_t>(Below(limit));
  }

  void MutateOnce(std::vector<uint8_t>& bytes) {
    size_t pos = Position(bytes);
    switch (Below(5)) {
      case 0:  // flip one bit
        if (!bytes.empty()) bytes[pos] ^= static_cast<uint8_t>(1u << Below(8));
        break;
      case 1: {  // overwrite 1/2/4/8 bytes with a boundary value
        uint64_t v = kBoundary[Below(std::size(kBoundary))];
        size_t width = size_t{1} << Below(4);
        for (size_t i = 0; i < width && pos + i < bytes.size(); ++i) bytes[pos + i] = v >> (8 * i);
        break;
      }
      case 2:  // insert random bytes
        bytes.insert(bytes.begin() + pos, 1 + Below(8), static_cast<uint8_t>(Below(256)));
        break;
      case 3:  // delete a run
        if (!bytes.empty()) {
          size_t n = std::min<size_t>(1 + Below(16), bytes.size() - pos);
          bytes.erase(bytes.begin() + pos, bytes.begin() + pos + n);
        }
        break;
      default:  // truncate
        bytes.resize(pos);
        break;
    }
  }

  std::mt19937_64 rng_;
};

// Parses `bytes`; if it parses, every tensor's data must lie inside the buffer and the
// fingerprint (which reads tensor edges) must be computable.
void CheckOne(const std::vector<uint8_t>& bytes, int* n_parsed) {
  auto file = GgufFile::FromBytes(bytes, "fuzz.gguf");
  if (!file.ok()) {
    ASSERT_FALSE(file.status().message().empty());
    ASSERT_EQ(file.status().message().rfind("fuzz.gguf: ", 0), 0u) << file.status().message();
    return;
  }
  ++*n_parsed;
  const uint8_t* begin = bytes.data();
  const uint8_t* end = bytes.data() + bytes.size();
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    ASSERT_GE(t.data, begin) << t.name;
    ASSERT_LE(t.n_bytes, static_cast<uint64_t>(end - t.data)) << t.name;
    auto info = LookupGgmlType(static_cast<uint32_t>(t.type));
    ASSERT_TRUE(info.has_value());
    ASSERT_EQ(t.n_bytes, t.rows() * RowBytes(*info, t.ne[0])) << t.name;
  }
  (void)ModelFingerprint(**file);
}

void FuzzCorpus(const std::vector<std::vector<uint8_t>>& corpus, uint64_t seed) {
  Mutator mutator(seed);
  auto start = std::chrono::steady_clock::now();
  int n_parsed = 0;
  int n_done = 0;
  for (; n_done < kIterations; ++n_done) {
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (elapsed.count() > kBudgetSeconds) break;
    const std::vector<uint8_t>& original = corpus[n_done % corpus.size()];
    CheckOne(mutator.Mutate(original), &n_parsed);
    if (::testing::Test::HasFatalFailure()) return;
  }
  ::testing::Test::RecordProperty("iterations", n_done);
  ::testing::Test::RecordProperty("parsed", n_parsed);
  EXPECT_GT(n_done, 50) << "fuzz budget too small to mean anything";
}

TEST(GgufFuzzTest, FuzzMutatedWrittenFiles) {
  std::vector<std::vector<uint8_t>> corpus = {testing::SmallGgufFile()};
  testing::RawGguf vocab_only;
  vocab_only.Header(0, 1).Str("tokenizer.ggml.tokens").U32(9).U32(8).U64(2).Str("a").Str("bc");
  corpus.push_back(vocab_only.bytes);
  FuzzCorpus(corpus, 0x5eed0001);
}

TEST(GgufFuzzTest, FuzzMutatedFixtures) {
  SHARDLM_REQUIRE_FIXTURES();
  // The smallest fixtures of three layouts (K-quants, SPM llama, trained llama); copying a
  // ~1 MB file per iteration keeps each iteration well under a millisecond.
  std::vector<std::vector<uint8_t>> corpus;
  for (const char* name : {"qwen3-tiny-q2_k.gguf", "qwen3-tiny-q4_k_m.gguf", "stories260K.gguf"}) {
    corpus.push_back(testing_util::ReadBytes(testing::FixturePath(name)));
    ASSERT_FALSE(corpus.back().empty()) << name;
  }
  FuzzCorpus(corpus, 0x5eed0002);
}

}  // namespace
}  // namespace shardlm
