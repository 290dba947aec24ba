// Test harness for model tests: one stage (or a chain of stages) with its page allocator,
// pool, threads and forward pass, plus logits comparison that reports the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "kv/page_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "tensor/thread_pool.h"

namespace shardlm::testing {

struct HarnessOptions {
  int n_threads = 1;
  int max_batch = 128;
  int n_pages = 16;
  int page_tokens = 16;  // small pages so the fixtures' prompts span several
  KvType kv_type = KvType::kF32;
  LayerRange layers = kAllLayers;
  WindowKv window_kv = WindowKv::kRing;
};

// One stage of a model. Owns everything; the block tables it hands out use its allocator.
class Harness {
 public:
  static std::unique_ptr<Harness> Open(const std::string& path, const HarnessOptions& options,
                                       std::shared_ptr<const GgufFile> shared_file = nullptr) {
    auto h = std::make_unique<Harness>();
    if (shared_file == nullptr) {
      auto file = GgufFile::Open(path);
      if (!file.ok()) {
        ADD_FAILURE() << file.status().message();
        return nullptr;
      }
      shared_file = std::move(file).value();
    }
    auto model = Model::Load(shared_file, options.layers);
    if (!model.ok()) {
      ADD_FAILURE() << model.status().message();
      return nullptr;
    }
    h->file = shared_file;
    h->model = std::move(model).value();
    auto pool = PagePool::Create(h->model->KvPoolConfig(options.n_pages, options.page_tokens,
                                                        options.kv_type, options.window_kv));
    if (!pool.ok()) {
      ADD_FAILURE() << pool.status().message();
      return nullptr;
    }
    h->pool = std::move(pool).value();
    auto allocator = PageAllocator::Create(options.n_pages, options.page_tokens);
    if (!allocator.ok()) {
      ADD_FAILURE() << allocator.status().message();
      return nullptr;
    }
    h->allocator = std::move(allocator).value();
    h->threads = std::make_unique<ThreadPool>(options.n_threads);
    h->forward = std::make_unique<ForwardPass>(*h->model, *h->pool, *h->threads, options.max_batch);
    return h;
  }

  BlockTable NewTable() { return BlockTable(allocator.get()); }
  int n_vocab() const { return model->config().n_vocab; }

  // What a caller of ForwardPass does around a batch writing [begin, end) of `table`:
  // make those positions private and apply the page copies to this stage's pool.
  void PrepareWrite(BlockTable& table, int begin, int end) {
    std::vector<PageCopy> copies;
    Status st = table.PrepareWrite(begin, end, &copies);
    ASSERT_TRUE(st.ok()) << st.message();
    for (const PageCopy& copy : copies) pool->CopyPage(copy.src, copy.dst);
  }

  // Runs tokens at positions start.. of one sequence; returns logits rows of the tokens
  // flagged (all, or only the last).
  std::vector<float> Run(BlockTable& table, const std::vector<int32_t>& tokens, int start,
                         bool all_logits) {
    std::vector<float> logits;
    Status st = TryRun(table, tokens, start, all_logits, &logits);
    EXPECT_TRUE(st.ok()) << st.message();
    return logits;
  }
  Status TryRun(BlockTable& table, const std::vector<int32_t>& tokens, int start, bool all_logits,
                std::vector<float>* out) {
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < tokens.size(); ++i) {
      batch.push_back({tokens[i], int32_t(start + i), 0, all_logits || i + 1 == tokens.size()});
    }
    std::vector<float>& logits = *out;
    // A stage before the last gives every token's hidden row.
    const bool last = model->is_last_stage();
    logits.assign((all_logits || !last ? tokens.size() : 1) *
                      size_t(last ? n_vocab() : model->config().n_embd),
                  0.0f);
    const int end = start + int(tokens.size());
    PrepareWrite(table, start, end);
    const PageList pages[] = {table.page_list()};
    Status st = forward->Run(batch, pages, nullptr, logits.data());
    if (st.ok()) table.SetTokens(end);
    return st;
  }

  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<PageAllocator> allocator;  // must outlive the tables it hands out
  std::unique_ptr<PagePool> pool;
  std::unique_ptr<ThreadPool> threads;
  std::unique_ptr<ForwardPass> forward;
};

// Argmax with the lowest id winning ties.
inline int Argmax(const float* row, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

struct Diff {
  double max_abs = 0;
  double rms = 0;
  size_t worst = 0;
};

inline Diff Compare(const float* got, const float* want, size_t n) {
  Diff d;
  double sq = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(double(got[i]) - double(want[i]));
    if (!(e <= d.max_abs)) {  // also catches NaN
      d.max_abs = std::isnan(e) ? INFINITY : e;
      d.worst = i;
    }
    sq += e * e;
  }
  d.rms = std::sqrt(sq / double(n));
  return d;
}

// EXPECTs |got - want| <= atol everywhere and rms <= rms_tol; prints the worst element.
inline bool ExpectClose(const float* got, const float* want, size_t n, double atol, double rms_tol,
                        const std::string& what) {
  const Diff d = Compare(got, want, n);
  const bool ok = d.max_abs <= atol && d.rms <= rms_tol;
  EXPECT_TRUE(ok) << what << ": max abs " << d.max_abs << " (atol " << atol << ") at [" << d.worst
                  << "] got " << got[d.worst] << " want " << want[d.worst] << "; rms " << d.rms
                  << " (tol " << rms_tol << ")";
  return ok;
}

// EXPECTs bitwise equality; prints the first and the worst differing element.
inline bool ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want,
                          const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return false;
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) return true;
  const Diff d = Compare(got.data(), want.data(), got.size());
  ADD_FAILURE() << what << ": not bitwise equal; max abs " << d.max_abs << " at [" << d.worst
                << "] got " << got[d.worst] << " want " << want[d.worst];
  return false;
}

}  // namespace shardlm::testing
