// LocalStage on the fixture models: chains of 2 and 3 owning stages give bitwise the logits
// of one stage over the whole model (prefill of two prompts in one batch, then greedy
// decode steps of both); copy-on-write copies are applied in every stage; info and stats;
// a pinned stage runs with its calling thread on its core; a StageChain of a split's stages
// computes as they do, its pages theirs end to end.
#include "pipeline/local_stage.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "pipeline/stage_chain.h"
#include "support/fixtures.h"

namespace shardlm {
namespace local_stage_test {

using nlohmann::json;
using testing::FixturePath;

// Small pages so that prompts span several of them and a fork shares a partial page.
constexpr int kPageTokens = 16;
constexpr int kPages = 64;
constexpr int kDecodeSteps = 6;

struct Golden {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  int safe_prefix = 0;
};

Golden ReadGolden(const std::string& entry_id) {
  const json e = testing::GoldenEntry(entry_id);
  if (e.is_null()) return {};
  return {e["prompt_ids"].get<std::vector<int32_t>>(), e["greedy_ids"].get<std::vector<int32_t>>(),
          e["greedy_safe_prefix"].get<int>()};
}

LocalStageOptions Options(int index, int threads) {
  LocalStageOptions options;
  options.index = index;
  options.threads = threads;
  options.kv.n_pages = kPages;
  options.kv.page_tokens = kPageTokens;
  options.kv.max_batch_tokens = 128;
  return options;
}

// Stages over the ranges PlanLayerRanges gives for n_stages equal weights, each with
// `threads` unpinned threads (thread counts differ from the whole model's on purpose).
std::vector<std::unique_ptr<LocalStage>> LoadSplit(std::shared_ptr<const GgufFile> file,
                                                   size_t n_stages, int threads) {
  auto config = ReadModelConfig(*file);
  EXPECT_TRUE(config.ok()) << config.status().message();
  auto ranges = PlanLayerRanges(LayerCosts(*file, config.value()), n_stages, {});
  EXPECT_TRUE(ranges.ok()) << ranges.status().message();
  std::vector<std::unique_ptr<LocalStage>> stages;
  for (size_t i = 0; ranges.ok() && i < ranges->size(); ++i) {
    auto stage = LocalStage::Load(file, ranges.value()[i], Options(int(i), threads));
    EXPECT_TRUE(stage.ok()) << stage.status().message();
    if (stage.ok()) stages.push_back(std::move(stage).value());
  }
  return stages;
}

// Runs one batch through the chain, stage by stage; returns the logits rows.
std::vector<float> RunChain(const std::vector<Stage*>& stages, const ModelConfig& config,
                            const StageBatch& batch) {
  const size_t n_logit_rows = std::count_if(batch.entries.begin(), batch.entries.end(),
                                            [](const BatchEntry& e) { return e.wants_logits; });
  std::vector<float> hidden;
  for (Stage* stage : stages) {
    std::vector<float> out(stage->info().last ? n_logit_rows * config.n_vocab
                                              : batch.entries.size() * config.n_embd);
    const Status status = stage->Run(batch, hidden.empty() ? nullptr : hidden.data(), out.data());
    EXPECT_TRUE(status.ok()) << "stage " << stage->info().index << ": " << status.message();
    hidden = std::move(out);
  }
  return hidden;
}

std::vector<float> RunChain(const std::vector<LocalStage*>& stages, const StageBatch& batch) {
  return RunChain(std::vector<Stage*>(stages.begin(), stages.end()),
                  stages.front()->model().config(), batch);
}

int32_t Argmax(const float* row, int n) { return int32_t(std::max_element(row, row + n) - row); }

// The pipeline's side of the KV: one allocator, one block table per sequence.
struct Sequences {
  std::unique_ptr<PageAllocator> allocator;
  std::vector<BlockTable> tables;
  std::vector<std::vector<PageId>> page_lists;  // copies, valid for one batch
  std::vector<PageList> pages_by_slot;
  std::vector<PageCopy> copies;

  explicit Sequences(size_t n) {
    auto created = PageAllocator::Create(kPages, kPageTokens);
    EXPECT_TRUE(created.ok()) << created.status().message();
    allocator = std::move(created).value();
    for (size_t i = 0; i < n; ++i) tables.emplace_back(allocator.get());
  }
  // Makes [begin, end) of `slot` writable (collecting copies) and lists every slot's pages.
  void Prepare(const std::vector<std::pair<int, int>>& writes_by_slot) {
    copies.clear();
    for (size_t slot = 0; slot < tables.size(); ++slot) {
      const auto [begin, end] = writes_by_slot[slot];
      if (end > begin) {
        EXPECT_TRUE(tables[slot].PrepareWrite(begin, end, &copies).ok());
      }
    }
    page_lists.clear();
    pages_by_slot.clear();
    for (const BlockTable& table : tables) page_lists.push_back(table.pages());
    for (const auto& list : page_lists) pages_by_slot.push_back(list);
  }
  void Finish(const std::vector<std::pair<int, int>>& writes_by_slot) {
    for (size_t slot = 0; slot < tables.size(); ++slot) {
      if (writes_by_slot[slot].second > writes_by_slot[slot].first) {
        tables[slot].SetTokens(writes_by_slot[slot].second);
      }
    }
  }
  StageBatch Batch(const std::vector<BatchEntry>& entries) const {
    return StageBatch{entries, pages_by_slot, copies};
  }
};

// Prefills both prompts in one batch (logits of every position), then decodes greedily
// kDecodeSteps tokens of both sequences in one batch per step. Returns every logits row.
std::vector<float> Generate(const std::vector<Stage*>& stages, const ModelConfig& config,
                            const std::vector<std::vector<int32_t>>& prompts,
                            std::vector<std::vector<int32_t>>* generated) {
  const int n_vocab = config.n_vocab;
  Sequences seqs(prompts.size());
  std::vector<float> all_logits;
  std::vector<BatchEntry> entries;
  std::vector<std::pair<int, int>> writes;
  for (size_t slot = 0; slot < prompts.size(); ++slot) {
    for (size_t pos = 0; pos < prompts[slot].size(); ++pos) {
      entries.push_back({prompts[slot][pos], int32_t(pos), int32_t(slot), true});
    }
    writes.emplace_back(0, int(prompts[slot].size()));
  }
  generated->assign(prompts.size(), {});
  for (int step = 0; step <= kDecodeSteps; ++step) {
    seqs.Prepare(writes);
    const std::vector<float> logits = RunChain(stages, config, seqs.Batch(entries));
    seqs.Finish(writes);
    all_logits.insert(all_logits.end(), logits.begin(), logits.end());
    // Next batch: the argmax after each sequence's last row, at the next position.
    std::vector<BatchEntry> next;
    for (size_t slot = 0, row = 0; slot < prompts.size(); ++slot) {
      const auto rows = std::count_if(entries.begin(), entries.end(),
                                      [&](const BatchEntry& e) { return e.slot == int(slot); });
      row += rows;
      const int32_t token = Argmax(&logits[(row - 1) * n_vocab], n_vocab);
      (*generated)[slot].push_back(token);
      next.push_back({token, writes[slot].second, int32_t(slot), true});
      writes[slot] = {writes[slot].second, writes[slot].second + 1};
    }
    entries = std::move(next);
  }
  return all_logits;
}

std::vector<LocalStage*> Raw(const std::vector<std::unique_ptr<LocalStage>>& stages) {
  std::vector<LocalStage*> raw;
  for (const auto& stage : stages) raw.push_back(stage.get());
  return raw;
}

std::vector<Stage*> Stages(const std::vector<std::unique_ptr<LocalStage>>& stages) {
  std::vector<Stage*> raw;
  for (const auto& stage : stages) raw.push_back(stage.get());
  return raw;
}

void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t n_diff = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && n_diff++ == 0) first = i;
  }
  EXPECT_EQ(n_diff, 0u) << what << ": first difference at " << first << ": " << got[first] << " vs "
                        << want[first];
}

struct ModelCase {
  const char* file;
  const char* prompt_a;
  const char* prompt_b;
};

class LocalStageTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    SHARDLM_REQUIRE_FIXTURES();
    auto file = GgufFile::Open(FixturePath(GetParam().file));
    ASSERT_TRUE(file.ok()) << file.status().message();
    file_ = std::move(file).value();
    auto model = Model::Load(file_);
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_ = std::move(model).value();
    auto whole = LocalStage::Borrow(*model_, Options(0, 2));
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    whole_ = std::move(whole).value();
    golden_a_ = ReadGolden(GetParam().prompt_a);
    golden_b_ = ReadGolden(GetParam().prompt_b);
  }
  std::vector<std::vector<int32_t>> Prompts() const { return {golden_a_.prompt, golden_b_.prompt}; }
  const ModelConfig& Config() const { return model_->config(); }

  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<LocalStage> whole_;
  Golden golden_a_, golden_b_;
};

TEST_P(LocalStageTest, SplitChainsGiveTheWholeModelsLogitsBitwise) {
  std::vector<std::vector<int32_t>> want_tokens;
  const std::vector<float> want = Generate({whole_.get()}, Config(), Prompts(), &want_tokens);
  // The harness drives the KV right: the whole model continues like llama.cpp.
  for (size_t i = 0; i < size_t(std::min(golden_a_.safe_prefix, kDecodeSteps)); ++i) {
    EXPECT_EQ(want_tokens[0][i], golden_a_.greedy[i]) << "step " << i;
  }
  const int n_layers = model_->config().n_layers;
  for (size_t n_stages = 2; n_stages <= std::min<size_t>(3, n_layers); ++n_stages) {
    for (int threads : {1, 2}) {
      const auto stages = LoadSplit(file_, n_stages, threads);
      ASSERT_EQ(stages.size(), n_stages);
      std::vector<std::vector<int32_t>> tokens;
      const std::vector<float> got = Generate(Stages(stages), Config(), Prompts(), &tokens);
      ExpectBitwise(got, want,
                    std::to_string(n_stages) + " stages, " + std::to_string(threads) + " threads");
      EXPECT_EQ(tokens, want_tokens);
    }
  }
}

// A StageChain of a split's stages (what a prefill worker over a split server's pages runs)
// computes as its stages do, and its pages are theirs laid end to end in layer order.
TEST_P(LocalStageTest, AChainOfTheSplitsStagesGivesTheWholeModelsLogits) {
  std::vector<std::vector<int32_t>> want_tokens;
  const std::vector<float> want = Generate({whole_.get()}, Config(), Prompts(), &want_tokens);
  auto split = LoadSplit(file_, 2, 1);
  ASSERT_EQ(split.size(), 2u);
  const std::vector<Stage*> parts = Stages(split);
  std::vector<std::unique_ptr<Stage>> owned;
  for (auto& stage : split) owned.push_back(std::move(stage));
  auto chain = StageChain::Create(std::move(owned), 128, Config().n_embd);
  ASSERT_TRUE(chain.ok()) << chain.status().message();
  Stage& chained = **chain;
  std::vector<std::vector<int32_t>> tokens;
  ExpectBitwise(Generate({&chained}, Config(), Prompts(), &tokens), want, "a chain of 2 stages");
  EXPECT_EQ(tokens, want_tokens);
  EXPECT_EQ(chained.info().layers.begin, 0);
  EXPECT_EQ(chained.info().layers.end, Config().n_layers);
  EXPECT_TRUE(chained.info().first && chained.info().last);
  EXPECT_EQ(chained.info().weight_bytes,
            parts[0]->info().weight_bytes + parts[1]->info().weight_bytes);
  EXPECT_EQ(chained.Stats().batches, uint64_t(kDecodeSteps + 1));

  // Its pages: each part's page in layer order; an import lands in the parts.
  const size_t page_bytes = chained.page_bytes();
  ASSERT_EQ(page_bytes, parts[0]->page_bytes() + parts[1]->page_bytes());
  const std::vector<PageId> written = {0, 1, 2};
  std::vector<uint8_t> pages(written.size() * page_bytes);
  ASSERT_TRUE(chained.ExportPages(written, pages.data()).ok());
  for (size_t p = 0; p < written.size(); ++p) {
    size_t offset = p * page_bytes;
    for (Stage* part : parts) {
      std::vector<uint8_t> own(part->page_bytes());
      ASSERT_TRUE(part->ExportPages({&written[p], 1}, own.data()).ok());
      EXPECT_EQ(std::memcmp(own.data(), pages.data() + offset, own.size()), 0) << "page " << p;
      offset += own.size();
    }
  }
  const std::vector<PageId> fresh = {40, 41, 42};
  ASSERT_TRUE(chained.ImportPages(fresh, pages.data()).ok());
  std::vector<uint8_t> again(pages.size());
  ASSERT_TRUE(chained.ExportPages(fresh, again.data()).ok());
  EXPECT_EQ(again, pages);
  EXPECT_FALSE(chained.ExportPages(std::vector<PageId>{kPages}, again.data()).ok());

  // Stages that do not follow each other are refused.
  auto gap = LoadSplit(file_, 2, 1);
  ASSERT_EQ(gap.size(), 2u);
  std::vector<std::unique_ptr<Stage>> reversed;
  reversed.push_back(std::move(gap[1]));
  reversed.push_back(std::move(gap[0]));
  EXPECT_EQ(StageChain::Create(std::move(reversed), 128, Config().n_embd).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(LocalStageTest, InfoDescribesTheSplit) {
  const StageInfo& whole = whole_->info();
  EXPECT_EQ(whole.layers.begin, 0);
  EXPECT_EQ(whole.layers.end, model_->config().n_layers);
  EXPECT_TRUE(whole.first);
  EXPECT_TRUE(whole.last);
  EXPECT_EQ(whole.device, "cpu");
  EXPECT_FALSE(whole.remote);
  EXPECT_EQ(whole.threads, 2);
  size_t file_tensor_bytes = 0;
  for (const GgufTensorInfo& tensor : file_->tensors()) file_tensor_bytes += tensor.n_bytes;
  EXPECT_EQ(whole.weight_bytes, file_tensor_bytes);

  const auto stages = LoadSplit(file_, 2, 1);
  ASSERT_EQ(stages.size(), 2u);
  const StageInfo& a = stages[0]->info();
  const StageInfo& b = stages[1]->info();
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(b.index, 1);
  EXPECT_EQ(a.layers.begin, 0);
  EXPECT_EQ(a.layers.end, b.layers.begin);
  EXPECT_EQ(b.layers.end, model_->config().n_layers);
  EXPECT_TRUE(a.first && !a.last);
  EXPECT_TRUE(!b.first && b.last);
  EXPECT_EQ(a.threads, 1);
  EXPECT_EQ(a.weight_bytes + b.weight_bytes, whole.weight_bytes);
  EXPECT_LT(a.weight_bytes, whole.weight_bytes);
  EXPECT_EQ(a.kv_bytes + b.kv_bytes, whole.kv_bytes);  // pages hold only a stage's layers
  EXPECT_EQ(stages[0]->pool().n_pages(), kPages);
}

TEST_P(LocalStageTest, StatsCountBatchesTokensAndBytes) {
  const auto stages = LoadSplit(file_, 2, 1);
  ASSERT_EQ(stages.size(), 2u);
  std::vector<std::vector<int32_t>> tokens;
  Generate(Stages(stages), Config(), Prompts(), &tokens);
  const ModelConfig& c = model_->config();
  const uint64_t prompt_tokens = golden_a_.prompt.size() + golden_b_.prompt.size();
  const uint64_t n_tokens = prompt_tokens + 2 * kDecodeSteps;
  const StageStats first = stages[0]->Stats();
  const StageStats last = stages[1]->Stats();
  for (const StageStats& s : {first, last}) {
    EXPECT_EQ(s.batches, uint64_t(kDecodeSteps + 1));
    EXPECT_EQ(s.tokens, n_tokens);
    EXPECT_GT(s.busy_seconds, 0.0);
  }
  EXPECT_EQ(first.bytes_in, 0u);  // token ids, no hidden rows
  EXPECT_EQ(first.bytes_out, n_tokens * c.n_embd * sizeof(float));
  EXPECT_EQ(last.bytes_in, first.bytes_out);
  EXPECT_EQ(last.bytes_out, n_tokens * c.n_vocab * sizeof(float));  // every row wanted logits
}

// A fork shares the prompt's partial last page; decoding on the fork copies it first. The
// copy reaches every stage: the fork's logits equal the original's for the same token, in
// the whole model and in a split; without the copy they differ.
std::vector<float> ForkAndDecode(const std::vector<LocalStage*>& stages,
                                 const std::vector<int32_t>& prompt, bool drop_copies) {
  Sequences seqs(1);
  std::vector<BatchEntry> entries;
  for (size_t pos = 0; pos < prompt.size(); ++pos) {
    entries.push_back({prompt[pos], int32_t(pos), 0, pos + 1 == prompt.size()});
  }
  const int n = int(prompt.size());
  seqs.Prepare({{0, n}});
  RunChain(stages, seqs.Batch(entries));
  seqs.Finish({{0, n}});
  seqs.tables.push_back(seqs.tables[0].Fork());  // slot 1 shares every page of slot 0
  seqs.Prepare({{0, 0}, {n, n + 1}});
  EXPECT_EQ(seqs.copies.size(), 1u);  // the partial last page
  for (const PageCopy& copy : seqs.copies) {
    for (LocalStage* stage : stages) {  // stale contents must not pass for a copy
      std::memset(stage->pool().page_data(copy.dst), 0x55, stage->pool().page_bytes());
    }
  }
  if (drop_copies) seqs.copies.clear();
  const std::vector<BatchEntry> decode = {{prompt[0], n, 1, true}};
  return RunChain(stages, seqs.Batch(decode));
}

std::vector<float> DecodeUnshared(const std::vector<LocalStage*>& stages,
                                  const std::vector<int32_t>& prompt) {
  Sequences seqs(1);
  std::vector<BatchEntry> entries;
  for (size_t pos = 0; pos < prompt.size(); ++pos) {
    entries.push_back({prompt[pos], int32_t(pos), 0, false});
  }
  entries.push_back({prompt[0], int32_t(prompt.size()), 0, true});
  seqs.Prepare({{0, int(entries.size())}});
  return RunChain(stages, seqs.Batch(entries));
}

TEST_P(LocalStageTest, CopyOnWriteCopiesReachEveryStage) {
  const std::vector<int32_t>& prompt = golden_b_.prompt;
  ASSERT_NE(prompt.size() % kPageTokens, 0u) << "the test needs a partial last page";
  const std::vector<float> want = DecodeUnshared({whole_.get()}, prompt);
  ExpectBitwise(ForkAndDecode({whole_.get()}, prompt, false), want, "whole model");
  const auto stages = LoadSplit(file_, 2, 1);
  ASSERT_EQ(stages.size(), 2u);
  ExpectBitwise(ForkAndDecode(Raw(stages), prompt, false), want, "2 stages");
  EXPECT_NE(ForkAndDecode(Raw(stages), prompt, true), want) << "the copy must matter";
}

// Prefills `prompt` into fresh pages; with `imported`, the first decode step instead reads
// KV pages imported into fresh stages from the prefilled ones (ExportPages/ImportPages):
// the decode logits must be the same bitwise.
TEST_P(LocalStageTest, ExportedPagesImportIntoFreshStagesBitwise) {
  const std::vector<int32_t>& prompt = golden_b_.prompt;
  const int n = int(prompt.size());
  const auto source = LoadSplit(file_, 2, 1);
  ASSERT_EQ(source.size(), 2u);
  Sequences seqs(1);
  std::vector<BatchEntry> entries;
  for (int pos = 0; pos < n; ++pos) entries.push_back({prompt[pos], pos, 0, pos + 1 == n});
  seqs.Prepare({{0, n}});
  RunChain(Raw(source), seqs.Batch(entries));
  seqs.Finish({{0, n}});

  const std::vector<BatchEntry> decode = {{prompt[0], n, 0, true}};
  seqs.Prepare({{0, n + 1}});
  const std::vector<PageId> pages(seqs.tables[0].pages().begin(), seqs.tables[0].pages().end());
  std::vector<std::vector<uint8_t>> bytes;
  for (const auto& stage : source) {
    ASSERT_EQ(stage->page_bytes(), stage->pool().page_bytes());
    bytes.emplace_back(pages.size() * stage->page_bytes());
    ASSERT_TRUE(stage->ExportPages(pages, bytes.back().data()).ok());
  }
  const std::vector<float> want = RunChain(Raw(source), seqs.Batch(decode));

  const auto fresh = LoadSplit(file_, 2, 1);
  ASSERT_EQ(fresh.size(), 2u);
  EXPECT_NE(RunChain(Raw(fresh), seqs.Batch(decode)), want) << "the import must matter";
  for (size_t s = 0; s < fresh.size(); ++s) {
    ASSERT_TRUE(fresh[s]->ImportPages(pages, bytes[s].data()).ok());
  }
  ExpectBitwise(RunChain(Raw(fresh), seqs.Batch(decode)), want, "imported pages");

  const std::vector<PageId> outside = {kPages};
  const Status refused = fresh[0]->ExportPages(outside, bytes[0].data());
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("outside"), std::string::npos) << refused.message();
  EXPECT_EQ(fresh[0]->ImportPages(outside, bytes[0].data()).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LocalStageTest,
    ::testing::Values(ModelCase{"stories260K.gguf", "stories260K.p2", "stories260K.p3"},
                      ModelCase{"qwen3-tiny-f32.gguf", "qwen3-tiny-f32.p2", "qwen3-tiny-f32.p3"},
                      ModelCase{"qwen3-tiny-q4_k_m.gguf", "qwen3-tiny-q4_k_m.p2",
                                "qwen3-tiny-q4_k_m.p3"}),
    [](const auto& info) {
      std::string name = info.param.file;
      name = name.substr(0, name.find('.'));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// The set of cores the calling thread may run on.
std::vector<int> CurrentAffinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(set), &set), 0);
  std::vector<int> cores;
  for (int core = 0; core < CPU_SETSIZE; ++core) {
    if (CPU_ISSET(core, &set)) cores.push_back(core);
  }
  return cores;
}

TEST(LocalStagePinnedTest, PinnedStageRunsOnItsCoreAndMatchesUnpinned) {
  SHARDLM_REQUIRE_FIXTURES();
  auto opened = GgufFile::Open(FixturePath("stories260K.gguf"));
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::shared_ptr<const GgufFile> file = std::move(opened).value();
  const int n_cores = std::max(1, int(std::thread::hardware_concurrency()));
  auto devices = ParseDevices(n_cores > 1 ? "cpu:0,cpu:0-1" : "cpu:0,cpu:0", n_cores);
  ASSERT_TRUE(devices.ok()) << devices.status().message();
  std::vector<std::unique_ptr<LocalStage>> pinned;
  const LayerRange ranges[] = {{0, 2}, {2, 5}};
  for (int i = 0; i < 2; ++i) {
    LocalStageOptions options = Options(i, 0);
    options.device = devices.value()[i];
    auto stage = LocalStage::Load(file, ranges[i], options);
    ASSERT_TRUE(stage.ok()) << stage.status().message();
    pinned.push_back(std::move(stage).value());
  }
  EXPECT_EQ(pinned[0]->info().device, "cpu:0");
  EXPECT_EQ(pinned[0]->info().threads, 1);
  EXPECT_EQ(pinned[1]->info().threads, int(devices.value()[1].cores.size()));
  const std::vector<std::vector<int32_t>> prompts = {ReadGolden("stories260K.p2").prompt,
                                                     ReadGolden("stories260K.p1").prompt};
  std::vector<std::vector<int32_t>> want_tokens;
  const auto unpinned = LoadSplit(file, 2, 2);
  const std::vector<float> want =
      Generate(Stages(unpinned), unpinned.front()->model().config(), prompts, &want_tokens);
  // Like the pipeline: the stages run from a thread of their own, which they pin.
  std::vector<float> got;
  std::vector<int> affinity;
  std::thread stage0_thread([&] {
    std::vector<std::vector<int32_t>> tokens;
    got = Generate(Stages(pinned), unpinned.front()->model().config(), prompts, &tokens);
    affinity = CurrentAffinity();
  });
  stage0_thread.join();
  ExpectBitwise(got, want, "pinned vs unpinned");
  EXPECT_EQ(affinity, std::vector<int>{0});
}

TEST(LocalStageErrorsTest, RemoteDevicesAndBadRangesAreRefused) {
  SHARDLM_REQUIRE_FIXTURES();
  auto opened = GgufFile::Open(FixturePath("stories260K.gguf"));
  ASSERT_TRUE(opened.ok());
  std::shared_ptr<const GgufFile> file = std::move(opened).value();
  LocalStageOptions options = Options(1, 1);
  options.device.kind = DeviceSpec::Kind::kUnix;
  options.device.socket_path = "/x.sock";
  auto stage = LocalStage::Load(file, {0, 2}, options);
  ASSERT_FALSE(stage.ok());
  EXPECT_EQ(stage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(stage.status().message().find("unix:/x.sock"), std::string::npos);
  EXPECT_FALSE(LocalStage::Load(file, {3, 9}, Options(0, 1)).ok());
  LocalStageOptions no_pages = Options(0, 1);
  no_pages.kv.n_pages = 0;
  EXPECT_FALSE(LocalStage::Load(file, {0, 2}, no_pages).ok());
}

TEST(LocalStageErrorsTest, CopiesOutsideThePoolAreRefused) {
  SHARDLM_REQUIRE_FIXTURES();
  auto opened = GgufFile::Open(FixturePath("stories260K.gguf"));
  ASSERT_TRUE(opened.ok());
  auto stage = LocalStage::Load(std::move(opened).value(), {0, 5}, Options(0, 1));
  ASSERT_TRUE(stage.ok());
  const std::vector<BatchEntry> entries = {{1, 0, 0, true}};
  const std::vector<PageId> pages = {0};
  const std::vector<PageList> pages_by_slot = {pages};
  const std::vector<PageCopy> copies = {{0, kPages}};
  std::vector<float> logits(stage.value()->model().config().n_vocab);
  const Status status =
      stage.value()->Run({entries, pages_by_slot, copies}, nullptr, logits.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("outside"), std::string::npos) << status.message();
  EXPECT_EQ(stage.value()->Stats().batches, 0u);
}

// A bounded stage whose pool is shared (a decode stage beside a prefill worker) moves a batch's
// pages and computes nothing when asked to apply it only; a follower over its region (the
// worker's stage) then computes the batch in the frames it is given: bitwise the logits of a
// bounded stage that does both. Each refuses what belongs to the other.
TEST(LocalStageErrorsTest, AFollowerComputesInTheFramesItsDecodeStageMoved) {
  SHARDLM_REQUIRE_FIXTURES();
  auto opened = GgufFile::Open(FixturePath("stories260K.gguf"));
  ASSERT_TRUE(opened.ok());
  std::shared_ptr<const GgufFile> file = std::move(opened).value();
  LocalStageOptions bounded = Options(0, 1);
  bounded.kv.n_frames = 4;
  bounded.kv.key_summaries = true;
  auto alone = LocalStage::Load(file, {0, 5}, bounded);
  LocalStageOptions shared = bounded;
  shared.share_kv = true;
  auto decode = LocalStage::Load(file, {0, 5}, shared);
  ASSERT_TRUE(alone.ok() && decode.ok());
  const ShmRegion* region = decode.value()->shared_kv();
  ASSERT_NE(region, nullptr);
  auto mapped = ShmRegion::Map(dup(region->fd()), region->size());
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  LocalStageOptions follows = bounded;
  follows.kv_region = std::move(mapped).value();
  auto worker = LocalStage::Load(file, {0, 5}, follows);
  ASSERT_TRUE(worker.ok()) << worker.status().message();

  // 20 positions over logical pages 9 and 30, placed in frames 2 and 0; the last scores them.
  std::vector<BatchEntry> entries;
  for (int pos = 0; pos < 20; ++pos) entries.push_back({1 + pos, pos, 0, pos == 19});
  entries.back().score_pages = true;
  const std::vector<PageId> pages = {9, 30};
  const std::vector<PageList> pages_by_slot = {pages};
  PagingOps moves;
  moves.maps = {{.page = 9, .frame = 2}, {.page = 30, .frame = 0}};
  const size_t n_vocab = size_t(alone.value()->model().config().n_vocab);
  std::vector<float> want(n_vocab), got(n_vocab, 0.0f);
  std::vector<float> want_scores(2, -INFINITY), got_scores(2, -INFINITY);
  StageBatch both{entries, pages_by_slot, {}};
  both.paging = &moves;
  both.page_scores = want_scores;
  ASSERT_TRUE(alone.value()->Run(both, nullptr, want.data()).ok());

  StageBatch apply = both;
  apply.apply_only = true;
  apply.page_scores = {};
  ASSERT_TRUE(decode.value()->Run(apply, nullptr, nullptr).ok());
  EXPECT_EQ(decode.value()->Stats().batches, 0u);  // moved, not computed
  const std::vector<PageId> frames = {2, 0};
  const std::vector<PageList> frames_by_slot = {frames};
  StageBatch compute{entries, pages_by_slot, {}};
  compute.frames_by_slot = frames_by_slot;
  compute.page_scores = got_scores;
  const Status computed = worker.value()->Run(compute, nullptr, got.data());
  ASSERT_TRUE(computed.ok()) << computed.message();
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_scores, want_scores);
  EXPECT_GT(got_scores[0], -INFINITY);
  // The pages are the decode stage's: it exports what the worker wrote (the full first page;
  // the second one's unwritten positions hold whatever each pool's memory held).
  const std::vector<PageId> full = {9};
  std::vector<uint8_t> exported(decode.value()->page_bytes()), expected(exported.size());
  ASSERT_TRUE(decode.value()->ExportPages(full, exported.data()).ok());
  ASSERT_TRUE(alone.value()->ExportPages(full, expected.data()).ok());
  EXPECT_EQ(exported, expected);

  // What each refuses: the worker moves nothing and has no logical pages of its own; the
  // decode stage places its own pages; an unbounded stage has nothing to apply.
  const auto refused = [](const Status& status, const char* why) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(status.message().find(why), std::string::npos) << status.message();
  };
  refused(worker.value()->Run(apply, nullptr, nullptr), "without a bounded KV pool of its own");
  StageBatch with_moves = compute;
  with_moves.paging = &moves;
  refused(worker.value()->Run(with_moves, nullptr, got.data()), "moves no pages");
  refused(worker.value()->Run({entries, pages_by_slot, {}}, nullptr, got.data()),
          "no frame for each of its pages");
  refused(worker.value()->ExportPages(pages, exported.data()), "export and import them there");
  refused(decode.value()->Run(compute, nullptr, got.data()), "places its own pages");
  auto unbounded = LocalStage::Load(file, {0, 5}, Options(0, 1));
  ASSERT_TRUE(unbounded.ok());
  refused(unbounded.value()->Run(apply, nullptr, nullptr), "without a bounded KV pool");
}

}  // namespace local_stage_test
}  // namespace shardlm
