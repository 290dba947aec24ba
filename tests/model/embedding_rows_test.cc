// Embedding rows of the last stage (BatchEntry::wants_embedding): the final hidden state
// after output_norm, the vector the LM head turns into logits. They follow the determinism
// contract (bitwise the same whatever the thread count, the chunking of the prompt, or what
// else shares the batch) and sit after the logits rows in the output.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/model_harness.h"
#include "support/fixtures.h"
#include "tensor/matmul.h"

namespace shardlm::testing {
namespace {

using nlohmann::json;

std::vector<int32_t> PromptOf(const std::string& entry_id) {
  const json e = GoldenEntry(entry_id);
  return e.is_null() ? std::vector<int32_t>() : e["prompt_ids"].get<std::vector<int32_t>>();
}

struct Outputs {
  std::vector<float> logits;      // [rows wanting logits][n_vocab]
  std::vector<float> embeddings;  // [rows wanting embeddings][n_embd]
};

class EmbeddingRowsTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    SHARDLM_REQUIRE_FIXTURES();
    tokens_ = PromptOf(std::string(GetParam()) + ".p3");
    ASSERT_GE(tokens_.size(), 4u);
  }
  std::unique_ptr<Harness> Open(int n_threads) {
    HarnessOptions options;
    options.n_threads = n_threads;
    return Harness::Open(FixturePath(std::string(GetParam()) + ".gguf"), options);
  }
  // Runs `entries` (slot 0: the sequence of `table`, positions [begin, end)) with the other
  // slots' pages given; splits the output into logits and embedding rows.
  Outputs RunBatch(Harness& h, const std::vector<BatchEntry>& entries,
                   std::span<const PageList> pages) {
    const BatchOutputRows rows = CountOutputRows(entries);
    const size_t n_vocab = size_t(h.n_vocab());
    const size_t n_embd = size_t(h.model->config().n_embd);
    std::vector<float> out(size_t(rows.logits) * n_vocab + size_t(rows.embeddings) * n_embd);
    Status st = h.forward->Run(entries, pages, nullptr, out.data());
    EXPECT_TRUE(st.ok()) << st.message();
    Outputs o;
    o.logits.assign(out.begin(), out.begin() + ptrdiff_t(rows.logits * n_vocab));
    o.embeddings.assign(out.begin() + ptrdiff_t(rows.logits * n_vocab), out.end());
    return o;
  }
  // The prompt in chunks of `chunk` tokens, every position wanting its embedding (and its
  // logits when `logits`).
  Outputs Chunked(Harness& h, size_t chunk, bool logits) {
    BlockTable table = h.NewTable();
    Outputs all;
    for (size_t begin = 0; begin < tokens_.size(); begin += chunk) {
      const size_t end = std::min(tokens_.size(), begin + chunk);
      std::vector<BatchEntry> entries;
      for (size_t i = begin; i < end; ++i) {
        entries.push_back({.token = tokens_[i],
                           .position = int32_t(i),
                           .slot = 0,
                           .wants_logits = logits,
                           .wants_embedding = true});
      }
      h.PrepareWrite(table, int(begin), int(end));
      const PageList pages[] = {table.page_list()};
      Outputs o = RunBatch(h, entries, pages);
      table.SetTokens(int(end));
      all.logits.insert(all.logits.end(), o.logits.begin(), o.logits.end());
      all.embeddings.insert(all.embeddings.end(), o.embeddings.begin(), o.embeddings.end());
    }
    return all;
  }
  std::vector<int32_t> tokens_;
};

TEST_P(EmbeddingRowsTest, OneRowPerEntryThatAsks) {
  auto h = Open(2);
  const Outputs o = Chunked(*h, tokens_.size(), /*logits=*/false);
  EXPECT_TRUE(o.logits.empty());
  ASSERT_EQ(o.embeddings.size(), tokens_.size() * size_t(h->model->config().n_embd));
  for (float v : o.embeddings) ASSERT_TRUE(std::isfinite(v));
}

// The LM head applied to the embedding rows gives the logits rows bitwise: the rows are the
// output-normed hidden state itself, not a look-alike.
TEST_P(EmbeddingRowsTest, LogitsAreTheHeadOfTheEmbeddingRows) {
  auto h = Open(2);
  const Outputs o = Chunked(*h, tokens_.size(), /*logits=*/true);
  const size_t n = tokens_.size();
  ASSERT_EQ(o.logits.size(), n * size_t(h->n_vocab()));
  std::vector<float> head(o.logits.size());
  MatMulScratch scratch;
  MatMul(h->model->weights().output, o.embeddings.data(), int64_t(n), head.data(), *h->threads,
         scratch);
  ExpectBitwise(head, o.logits, "output · embedding rows vs logits rows");
}

TEST_P(EmbeddingRowsTest, ThreadCountAndChunkingDoNotChangeThem) {
  auto h1 = Open(1);
  const std::vector<float> want = Chunked(*h1, tokens_.size(), false).embeddings;
  auto h3 = Open(3);
  ExpectBitwise(Chunked(*h3, tokens_.size(), false).embeddings, want, "3 threads vs 1");
  for (size_t chunk : {1, 3}) {
    ExpectBitwise(Chunked(*h3, chunk, true).embeddings, want,
                  "chunks of " + std::to_string(chunk) + " with logits vs one batch");
  }
}

// Another sequence's entries in the batch (decoding, wanting logits only) change neither
// the rows nor their order.
TEST_P(EmbeddingRowsTest, OtherSequencesInTheBatchDoNotChangeThem) {
  auto h = Open(2);
  const std::vector<float> want = Chunked(*h, tokens_.size(), false).embeddings;
  BlockTable other = h->NewTable();
  std::vector<float> other_logits = h->Run(other, {tokens_[1], tokens_[0]}, 0, false);
  BlockTable table = h->NewTable();
  std::vector<BatchEntry> entries = {
      {.token = tokens_[2], .position = 2, .slot = 1, .wants_logits = true}};
  for (size_t i = 0; i < tokens_.size(); ++i) {
    entries.push_back({.token = tokens_[i],
                       .position = int32_t(i),
                       .slot = 0,
                       .wants_logits = i == 1,
                       .wants_embedding = true});
  }
  h->PrepareWrite(table, 0, int(tokens_.size()));
  h->PrepareWrite(other, 2, 3);
  const PageList pages[] = {table.page_list(), other.page_list()};
  const Outputs o = RunBatch(*h, entries, pages);
  EXPECT_EQ(o.logits.size(), 2 * size_t(h->n_vocab()));
  ExpectBitwise(o.embeddings, want, "a batch shared with another sequence vs alone");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EmbeddingRowsTest,
                         ::testing::Values("stories260K", "qwen3-tiny-f32", "qwen3-tiny-q4_k_m"),
                         [](const auto& info) { return FixtureTestName(info.param); });

}  // namespace
}  // namespace shardlm::testing
