// Test stages: FakeStage computes a tiny made-up "model" (no weights) so pipeline
// mechanics can be checked exactly; FaultyStage wraps any stage and goes down on demand,
// the way a killed shard daemon does (Run and Health give kUnavailable until Reconnect).
//
// Goals: deterministic, checkable outputs; a switch to fail and to refuse reconnecting;
// counters of concurrent Runs across stages (pipelining shows as > 1).
// Non-goals: numerics of a real model (tests use local stages for that).
//
// Thread safety: as Stage (one Run at a time per stage); the switches are atomics.
// Lifetime: a FaultyStage owns the stage it wraps; Probe must outlive the stages using it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "pipeline/stage.h"

namespace shardlm::testing {

// Shared by the stages of one pipeline: how many Runs are executing right now, and the
// most at once.
struct Probe {
  std::atomic<int> running{0};
  std::atomic<int> max_running{0};
  void Enter() {
    const int now = ++running;
    int seen = max_running.load();
    while (now > seen && !max_running.compare_exchange_weak(seen, now)) {
    }
  }
  void Leave() { --running; }
};

// hidden row r of entry e after stage s = (token + Σ layers so far) in every column;
// logits row = hidden[0] × (v + 1) for v in [0, n_vocab); embedding row = hidden[0] × −1 in
// every column (after the logits rows, as ForwardPass writes them).
class FakeStage : public Stage {
 public:
  FakeStage(int index, LayerRange layers, bool last, int n_embd, int n_vocab, Probe* probe,
            std::chrono::microseconds delay)
      : n_embd_(n_embd), n_vocab_(n_vocab), probe_(probe), delay_(delay) {
    info_.index = index;
    info_.layers = layers;
    info_.first = index == 0;
    info_.last = last;
    info_.device = "fake:" + std::to_string(index);
  }
  const StageInfo& info() const override { return info_; }
  Status Run(const StageBatch& batch, const float* hidden_in, float* out) override {
    if (probe_) probe_->Enter();
    std::this_thread::sleep_for(delay_);
    int logit_row = 0;
    int embedding_row = 0;
    float* embeddings = out + size_t(CountOutputRows(batch.entries).logits) * n_vocab_;
    for (size_t e = 0; e < batch.entries.size(); ++e) {
      const float x = (info_.first ? float(batch.entries[e].token) : hidden_in[e * n_embd_]) +
                      float(info_.layers.size());
      if (!info_.last) {
        std::fill(out + e * n_embd_, out + (e + 1) * n_embd_, x);
      } else if (batch.entries[e].wants_logits) {
        for (int v = 0; v < n_vocab_; ++v) out[size_t(logit_row) * n_vocab_ + v] = x * float(v + 1);
        ++logit_row;
      }
      if (info_.last && batch.entries[e].wants_embedding) {
        std::fill_n(embeddings + size_t(embedding_row++) * n_embd_, n_embd_, -x);
      }
    }
    if (probe_) probe_->Leave();
    return Status::Ok();
  }
  Status Health() const override { return Status::Ok(); }
  Status Reconnect() override { return Status::Ok(); }
  StageStats Stats() const override { return {}; }
  // No KV: pages are empty.
  size_t page_bytes() const override { return 0; }
  Status ExportPages(std::span<const PageId>, uint8_t*) override { return Status::Ok(); }
  Status ImportPages(std::span<const PageId>, const uint8_t*) override { return Status::Ok(); }

 private:
  StageInfo info_;
  size_t n_embd_;
  int n_vocab_;
  Probe* probe_;
  std::chrono::microseconds delay_;
};

class FaultyStage : public Stage {
 public:
  explicit FaultyStage(std::unique_ptr<Stage> inner) : inner_(std::move(inner)) {}
  const StageInfo& info() const override { return inner_->info(); }
  Status Run(const StageBatch& batch, const float* hidden_in, float* out) override {
    runs_++;
    if (fail_after_ >= 0 && runs_ > fail_after_) down_ = true;
    if (down_) return Down();
    return inner_->Run(batch, hidden_in, out);
  }
  Status Health() const override { return down_ ? Down() : Status::Ok(); }
  Status Reconnect() override {
    if (!down_) return Status::Ok();
    if (!can_reconnect_) return Down();
    down_ = false;
    fail_after_ = -1;
    return Status::Ok();
  }
  StageStats Stats() const override { return inner_->Stats(); }
  size_t page_bytes() const override { return inner_->page_bytes(); }
  Status ExportPages(std::span<const PageId> pages, uint8_t* dst) override {
    if (down_) return Down();
    return inner_->ExportPages(pages, dst);
  }
  Status ImportPages(std::span<const PageId> pages, const uint8_t* src) override {
    if (down_) return Down();
    return inner_->ImportPages(pages, src);
  }

  void set_down(bool down) { down_ = down; }
  // Goes down on the Run after `n` more successful Runs (-1: never).
  void FailAfter(int n) {
    runs_ = 0;
    fail_after_ = n;
  }
  void set_can_reconnect(bool can) { can_reconnect_ = can; }

 private:
  Status Down() const {
    return Unavailable("stage {} ({}) is down: connection lost", inner_->info().index,
                       inner_->info().device);
  }
  std::unique_ptr<Stage> inner_;
  std::atomic<bool> down_{false};
  std::atomic<bool> can_reconnect_{true};
  std::atomic<int> runs_{0};
  std::atomic<int> fail_after_{-1};
};

}  // namespace shardlm::testing
