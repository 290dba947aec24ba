// ForwardPass's checks of a batch before it runs: sizes, token ids, positions that continue
// each slot's sequence and its state, and page lists that match the pool (see forward.h).
#include "model/forward.h"
#include "model/forward_activations.h"

namespace shardlm {

Status ForwardPass::Validate(std::span<const BatchEntry> batch,
                             std::span<const PageList> pages_by_slot, const float* hidden_in,
                             const float* out) {
  if (batch.empty() || batch.size() > size_t(max_batch_tokens_)) {
    return InvalidArgument("batch of {} tokens (must be 1..{})", batch.size(), max_batch_tokens_);
  }
  if (!model_.is_first_stage() && hidden_in == nullptr) {
    return InvalidArgument("stage [{}, {}) needs hidden rows as input", model_.layers().begin,
                           model_.layers().end);
  }
  if (out == nullptr) return InvalidArgument("no output buffer for the stage's rows");
  act_->slot_next.assign(pages_by_slot.size(), -1);
  if (act_->states) act_->states->EnsureSlots(int(pages_by_slot.size()));
  for (const BatchEntry& e : batch) {
    SHARDLM_TRY(ValidateEntry(e, pages_by_slot, hidden_in != nullptr));
  }
  return Status::Ok();
}

// Per slot, positions are consecutive and covered by the slot's pages.
Status ForwardPass::ValidateEntry(const BatchEntry& e, std::span<const PageList> pages_by_slot,
                                  bool has_hidden) {
  if (e.slot < 0 || size_t(e.slot) >= pages_by_slot.size() || pages_by_slot[e.slot].empty()) {
    return InvalidArgument("batch entry has slot {} without pages", e.slot);
  }
  const PageList pages = pages_by_slot[e.slot];
  if (!has_hidden && (e.token < 0 || e.token >= config_.n_vocab)) {
    return InvalidArgument("token id {} is outside the vocabulary [0, {})", e.token,
                           config_.n_vocab);
  }
  int32_t& next = act_->slot_next[e.slot];
  const bool first = next < 0;
  if (first) SHARDLM_TRY(ValidatePages(e.slot, pages));
  if ((first && e.position < 0) || (!first && e.position != next)) {
    return InvalidArgument("slot {}: position {} does not continue the sequence (expected {})",
                           e.slot, e.position, first ? 0 : next);
  }
  // A recurrent state or a window ring cannot be rewound or shared: a sequence starts at 0 or
  // continues where its slot's state is.
  if (first && act_->states && e.position != 0 && act_->states->position(e.slot) != e.position) {
    return InvalidArgument(
        "slot {}: position {} does not continue the recurrent state, which holds {} positions",
        e.slot, e.position, act_->states->position(e.slot));
  }
  if (first && act_->rings) {
    SHARDLM_TRY(act_->rings->EnsureSlot(e.slot));
    act_->rings->EnsurePages(pages.size());
    if (e.position != 0 && act_->rings->position(e.slot) != e.position) {
      return InvalidArgument(
          "slot {}: position {} does not continue the window state, which holds {} positions",
          e.slot, e.position, act_->rings->position(e.slot));
    }
  }
  if (pooled_ == nullptr && size_t(e.position) >= act_->max_ctx) {
    return OutOfRange("slot {}: position {} exceeds the KV pool capacity of {} positions", e.slot,
                      e.position, act_->max_ctx);
  }
  if (size_t(e.position) >= pages.size() * size_t(pool_.page_tokens())) {
    return InvalidArgument("slot {}: position {} is past its {} pages of {} positions", e.slot,
                           e.position, pages.size(), pool_.page_tokens());
  }
  if (pages[e.position / pool_.page_tokens()] == kNoPage) {
    return InvalidArgument("slot {}: position {} is written but its page is not resident", e.slot,
                           e.position);
  }
  next = e.position + 1;
  return Status::Ok();
}

Status ForwardPass::ValidatePages(int slot, PageList pages) const {
  // Under a bounded pool attention walks the slot's list of read pages: it must name exactly
  // the resident ones (the others are kNoPage), or name none when every page is resident.
  const std::span<const int32_t> read =
      pooled_ != nullptr && size_t(slot) < pooled_->attended_by_slot.size()
          ? pooled_->attended_by_slot[slot]
          : std::span<const int32_t>();
  size_t listed = 0;  // entries of `read` matched so far
  int n_read = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pooled_ != nullptr && pages[i] == kNoPage) {
      if (read.empty()) {
        return InvalidArgument(
            "slot {}: logical page {} is not resident, and no list names the "
            "pages attention reads",
            slot, i);
      }
      continue;
    }
    if (pages[i] < 0 || pages[i] >= pool_.n_pages()) {
      return InvalidArgument("slot {}: logical page {} has id {}, outside the pool's [0, {})", slot,
                             i, pages[i], pool_.n_pages());
    }
    if (!read.empty()) {
      if (listed >= read.size() || read[listed] != int32_t(i)) {
        return InvalidArgument(
            "slot {}: logical page {} is resident but not in its list of read "
            "pages",
            slot, i);
      }
      ++listed;
    }
    ++n_read;
  }
  if (listed != read.size()) {
    return InvalidArgument("slot {}: its list of read pages names {} pages, {} are resident", slot,
                           read.size(), listed);
  }
  // Attention's scratch holds the pool's positions: no more pages than the pool may be read
  // (unbounded, the position check below bounds what is read).
  if (pooled_ != nullptr && n_read > pool_.n_pages()) {
    return InvalidArgument("slot {}: {} pages read, the pool holds {}", slot, n_read,
                           pool_.n_pages());
  }
  if (pooled_ != nullptr && !pooled_->ids_by_slot.empty() &&
      (size_t(slot) >= pooled_->ids_by_slot.size() ||
       pooled_->ids_by_slot[slot].size() != pages.size())) {
    return InvalidArgument("slot {}: its logical page ids do not match its {} pages", slot,
                           pages.size());
  }
  return Status::Ok();
}

}  // namespace shardlm
