// ForwardPass under a bounded pool with key summaries: the keys a batch writes enter their
// pages' summaries, and the entries that ask score their sequence's pages (see forward.h).
#include <algorithm>
#include <limits>

#include "model/forward.h"
#include "model/forward_activations.h"

namespace shardlm {

// Sizes the scoring entries' partial scores: [entry][kv head][page], -infinity to start.
Status ForwardPass::PrepareScores(std::span<const BatchEntry> batch,
                                  std::span<const PageList> pages_by_slot) {
  act_->score_entries.clear();
  act_->score_block.clear();
  act_->score_bounds_stride = 0;
  size_t partial = 0;
  size_t scores = 0;
  const bool scoring = pooled_->summaries != nullptr;
  for (size_t t = 0; t < batch.size(); ++t) {
    if (!batch[t].score_pages) continue;
    if (!scoring || batch[t].slot < 0 || size_t(batch[t].slot) >= pages_by_slot.size()) {
      return InvalidArgument("batch entry {} asks for page scores the stage cannot give", t);
    }
    act_->score_entries.push_back(int32_t(t));
    act_->score_block.push_back(partial);
    const size_t n_pages = pages_by_slot[batch[t].slot].size();
    partial += n_pages * size_t(config_.n_head_kv);
    scores += n_pages;
    act_->score_bounds_stride = std::max(act_->score_bounds_stride, n_pages);
  }
  if (scores > pooled_->page_scores.size()) {
    return InvalidArgument("page scores of {} pages do not fit the {} given", scores,
                           pooled_->page_scores.size());
  }
  act_->score_partial.assign(partial, -std::numeric_limits<float>::infinity());
  act_->score_bounds.resize(size_t(threads_.size()) * act_->score_bounds_stride);
  return Status::Ok();
}

// One task per kv head: the keys the batch wrote in this layer enter their pages' summaries
// (in batch order: a sequence's positions ascend), then each scoring entry's query heads
// bound every page of its sequence: for query head h, page j scores
// bound_h(j) − max_j' bound_h(j'), and the entry keeps per page the maximum over its heads
// and layers. Maximum and subtraction are exact, so the scores do not depend on which stage
// holds which layers.
void ForwardPass::SummarizeAndScore(int layer_idx, std::span<const BatchEntry> batch,
                                    std::span<const PageList> pages_by_slot) {
  const LayerConfig& layer = LayerConfigOf(layer_idx);
  const int head_dim = layer.head_dim_k;
  const int kv_layer = act_->kv_place[size_t(layer_idx)].index;
  const int page_tokens = pool_.page_tokens();
  const float scale = layer.kq_scale;
  KeySummaries& summaries = *pooled_->summaries;
  threads_.ParallelFor(size_t(layer.n_head_kv), [&](size_t g, size_t worker) {
    for (const BatchEntry& e : batch) {
      const int page_idx = e.position / page_tokens;
      const PageId frame = pages_by_slot[e.slot][page_idx];
      summaries.Update(pooled_->ids_by_slot[e.slot][page_idx], pool_.page_data(frame), pool_,
                       kv_layer, int(g), e.position % page_tokens);
    }
    for (size_t k = 0; k < act_->score_entries.size(); ++k) {
      const int32_t t = act_->score_entries[k];
      const PageList ids = pooled_->ids_by_slot[batch[t].slot];
      float* partial = &act_->score_partial[act_->score_block[k] + g * ids.size()];
      // Each page's bound is computed once per query head, then normalized by the best.
      float* bounds = &act_->score_bounds[worker * act_->score_bounds_stride];
      for (int h = 0; h < layer.gqa_group(); ++h) {
        const float* q =
            &act_->q[size_t(t) * layer.q_dim() + (g * layer.gqa_group() + h) * head_dim];
        float best = -std::numeric_limits<float>::infinity();
        for (size_t j = 0; j < ids.size(); ++j) {
          bounds[j] = summaries.UpperBound(ids[j], kv_layer, int(g), q) * scale;
          best = std::max(best, bounds[j]);
        }
        for (size_t j = 0; j < ids.size(); ++j) {
          if (bounds[j] > -std::numeric_limits<float>::infinity()) {
            partial[j] = std::max(partial[j], bounds[j] - best);
          }
        }
      }
    }
  });
}

// Each scoring entry's scores: the maximum over kv heads, raised into the caller's buffer.
void ForwardPass::FinishScores(std::span<const BatchEntry> batch) {
  if (pooled_->summaries == nullptr) return;
  float* out = pooled_->page_scores.data();
  for (size_t k = 0; k < act_->score_entries.size(); ++k) {
    const size_t n_pages = pooled_->ids_by_slot[batch[act_->score_entries[k]].slot].size();
    for (int g = 0; g < config_.n_head_kv; ++g) {
      const float* partial = &act_->score_partial[act_->score_block[k] + size_t(g) * n_pages];
      for (size_t j = 0; j < n_pages; ++j) out[j] = std::max(out[j], partial[j]);
    }
    out += n_pages;
  }
}

}  // namespace shardlm
