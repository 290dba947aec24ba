// Tests of the panel repack of a stage (model/panel_repack.h): which matrices become panels,
// what stays in the file, and that a stage's share of the model does not change.
#include "model/panel_repack.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "model/model.h"
#include "support/fixtures.h"
#include "tensor/panels.h"
#include "tensor/thread_pool.h"
#include "tensor/type_traits.h"

namespace shardlm {
namespace {

bool InFile(const GgufFile& file, const void* p) {
  const auto* first = file.header_bytes().data();
  return p >= first && p < first + file.file_size();
}

// Whether this CPU repacks both of the fixture's layer types (AVX-512: yes; AVX2: Q4_K only).
bool RepackTestHasPanelKernels() {
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const TypeTraits* traits = GetTypeTraits(type);
    if (traits == nullptr || traits->panel_dot == nullptr) return false;
  }
  return true;
}

// The fixture whose layer matrices are Q4_K and Q6_K (nullptr, with a failure, if it fails
// to open).
std::shared_ptr<const GgufFile> RepackTestOpenQ4KM() {
  auto opened = GgufFile::Open(testing::FixturePath("qwen3-tiny-q4_k_m.gguf"));
  EXPECT_TRUE(opened.ok()) << opened.status().message();
  if (!opened.ok()) return nullptr;
  return std::move(opened).value();
}

// Each test runs on the fixture whose layer matrices are Q4_K and Q6_K, on a CPU that
// repacks them.
class PanelRepackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SHARDLM_REQUIRE_FIXTURES();
    if (!RepackTestHasPanelKernels()) {
      GTEST_SKIP() << "this CPU has no panel kernels for Q4_K and Q6_K (AVX-512 VNNI)";
    }
    file_ = RepackTestOpenQ4KM();
    ASSERT_NE(file_, nullptr);
  }

  std::shared_ptr<const GgufFile> file_;
};

TEST_F(PanelRepackTest, StageMatricesBecomePanelsAndTheEmbeddingStaysInTheFile) {
  auto plain = Model::Load(file_, kAllLayers, /*repack=*/false);
  auto packed = Model::Load(file_, kAllLayers, /*repack=*/true);
  ASSERT_TRUE(plain.ok() && packed.ok());
  EXPECT_EQ((*plain)->panels().matrices(), 0);
  const StageWeights& w = (*packed)->weights();
  // Every layer matrix (Q4_K / Q6_K, 256 columns) and the Q6_K head.
  EXPECT_EQ((*packed)->panels().matrices(), 7 * int(w.blocks.size()) + 1);
  EXPECT_GT((*packed)->panels().bytes(), 0u);
  for (const WeightView* view : {&w.output, &w.blocks[0].attn_q, &w.blocks.back().ffn_down}) {
    EXPECT_NE(view->panel_bytes, 0);
    EXPECT_FALSE(InFile(*file_, view->data));
  }
  EXPECT_EQ(w.token_embd.panel_bytes, 0);  // looked up by row
  EXPECT_TRUE(InFile(*file_, w.token_embd.data));
  // The stage's share of the model is counted in file bytes either way.
  EXPECT_EQ(StageWeightBytes(w), StageWeightBytes((*plain)->weights()));

  // A last stage holds the head as panels and no embedding.
  const int n_layers = (*packed)->config().n_layers;
  auto last = Model::Load(file_, {n_layers - 1, n_layers});
  ASSERT_TRUE(last.ok());
  EXPECT_NE((*last)->weights().output.panel_bytes, 0);
  EXPECT_EQ((*last)->weights().token_embd.data, nullptr);
}

// The bytes of this process's address space (/proc/self/statm's first field), 0 if unknown.
size_t RepackTestAddressSpace() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  unsigned long pages = 0;
  const bool read = std::fscanf(statm, "%lu", &pages) == 1;
  std::fclose(statm);
  return read ? size_t(pages) * size_t(sysconf(_SC_PAGESIZE)) : 0;
}

// In a process whose address space is capped just above what it holds, the repack fails
// with ResourceExhausted naming the panels' size, and the size is what an uncapped load of
// the same model holds. Exits with 0, or a code naming what went wrong.
[[noreturn]] void RepackTestLoadCapped(std::shared_ptr<const GgufFile> file) {
  // The stage's threads exist before the cap, as a stage's do before it loads.
  ThreadPool threads(2);
  const size_t held = RepackTestAddressSpace();
  rlimit limit{};
  if (held == 0 || getrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
  // 1 MiB for what a load allocates besides the panels (the panels take 2 MiB at least).
  const rlimit cap{held + (size_t{1} << 20), limit.rlim_max};
  if (setrlimit(RLIMIT_AS, &cap) != 0) _exit(2);
  auto capped = Model::Load(file, kAllLayers, /*repack=*/true, &threads);
  if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
  if (capped.ok()) _exit(3);
  std::fprintf(stderr, "%s\n", std::string(capped.status().message()).c_str());
  if (capped.status().code() != StatusCode::kResourceExhausted) _exit(4);
  auto model = Model::Load(file, kAllLayers, /*repack=*/true, &threads);
  if (!model.ok() || (*model)->panels().bytes() == 0) _exit(5);
  const std::string size = std::to_string((*model)->panels().bytes()) + " bytes";
  _exit(capped.status().message().find(size) == std::string::npos ? 6 : 0);
}

// Out of memory for the panels is an error that names their size, not an abort. The capped
// load runs in a fresh process (a death test re-executes the binary): memory that earlier
// tests freed would otherwise serve the panels under the cap.
TEST_F(PanelRepackTest, OutOfMemoryIsResourceExhaustedNamingTheSize) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer reserves terabytes of address space for its shadow memory at start: under a
  // capped address space the child cannot even begin. The Release build runs this test.
  GTEST_SKIP() << "the address-space cap this test sets leaves a sanitizer no room";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // 2: no cap, 3: the capped load succeeded, 4: another error, 5: the uncapped load failed,
  // 6: the message does not name the size.
  EXPECT_EXIT(RepackTestLoadCapped(file_), ::testing::ExitedWithCode(0), "out of memory for");
}

}  // namespace
}  // namespace shardlm
