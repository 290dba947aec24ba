// Scheduler batches: building one (decode entries first, then prefill chunks, oldest
// admission first), preparing its block tables (copy-on-write, eviction when the pool is
// full), submitting it to the pipeline and collecting the oldest batch's output rows (see
// scheduler.h).
#include <algorithm>
#include <limits>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduler_impl.h"
#include "engine/scheduler_prefix_cache.h"
#include "engine/scheduler_request.h"
#include "kv/block_table.h"
#include "kv/page_allocator.h"

namespace shardlm {

void Scheduler::State::AskPageScores(int slot_idx, RequestId request, int n_positions,
                                     bool prompt_end, InFlight& record) {
  if (pager == nullptr) return;
  const int page_tokens = pager->config().page_tokens;
  if (!pager->WantsScores(slot_idx, (n_positions + page_tokens - 1) / page_tokens, prompt_end)) {
    return;
  }
  batch.back().score_pages = true;
  record.scored.push_back({.slot = slot_idx, .request = request});
}

void Scheduler::State::Touch(SchedulerSlot& slot, int begin, int end) {
  if (slot.write_end == 0) slot.write_begin = begin;
  slot.write_end = end;
}

TaskState Scheduler::State::PrefillStep(int slot_idx, int& budget, InFlight& record) {
  SchedulerSlot& slot = slots[slot_idx];
  ActiveRequest& request = *slot.request;
  if (prefix_cache->loading(slot_idx)) {
    const uint64_t collected = batches_submitted - in_flight.size();
    const TaskState loaded = prefix_cache->LoadStep(slot_idx, request, *slot.table,
                                                    disk_page_budget, batches_submitted, collected);
    // Waiting for the disk or for batches in flight does not hold back younger prompts.
    if (loaded != TaskState::kFinished) return TaskState::kNotFinished;
    // Loaded: what is left may be for the prefill worker (the next step decides).
    if (slot.route == PrefillRoute::kUndecided && worker != nullptr) return TaskState::kNotFinished;
  }
  if (budget <= 0) return TaskState::kBlocked;
  const PromptOutputs& wanted = request.prompt_outputs();
  const int start = request.n_prefilled();
  int n = std::min(budget, request.n_prompt() - start);
  // Past a bounded pool, a chunk fits what the pool leaves beside the sink and the tail.
  if (pager != nullptr) n = pager->MaxWrite(slot_idx, start, n);
  // Prompt logits rows are the positions before the last; the batch has room for a few.
  const int n_prompt_rows =
      wanted.WantsPromptLogits(start) ? std::min(request.n_prompt() - 1 - start, n) : 0;
  if (n_prompt_rows > 0) {
    if (prompt_logit_budget <= 0) return TaskState::kBlocked;
    if (n_prompt_rows > prompt_logit_budget) n = prompt_logit_budget;
  }
  const bool last = start + n == request.n_prompt();
  InFlight::Outputs out{.slot = slot_idx, .request = request.id(), .first_position = start};
  for (int k = 0; k < n; ++k) {
    const int pos = start + k;
    const bool prompt_logits = wanted.WantsPromptLogits(pos);
    const bool sample = last && k == n - 1 && request.samples();
    const bool embedding = wanted.WantsEmbedding(pos);
    batch.push_back({.token = request.request().prompt[pos],
                     .position = pos,
                     .slot = slot_idx,
                     .wants_logits = prompt_logits || sample,
                     .wants_embedding = embedding});
    out.n_prompt_logit_rows += prompt_logits ? 1 : 0;
    out.n_embedding_rows += embedding ? 1 : 0;
    out.sample = out.sample || sample;
  }
  if (last && request.samples()) AskPageScores(slot_idx, request.id(), start + n, true, record);
  Touch(slot, start, start + n);
  // Counted as prefilled once submitted: a later chunk may follow it through the stages.
  request.AddPrefilled(n);
  prompt_tokens_computed += n;
  prompt_logit_budget -= out.n_prompt_logit_rows;
  out.prompt_done = last;
  if (last || out.n_logit_rows() > 0 || out.n_embedding_rows > 0) record.outputs.push_back(out);
  if (last) slot.awaiting_logits = true;
  budget -= n;
  return last ? TaskState::kFinished : TaskState::kNotFinished;
}

void Scheduler::BuildBatch(InFlight& record) {
  State& s = *state_;
  s.batch.clear();
  const int depth = s.pipeline->depth();
  int n_decoding = 0;
  for (const SchedulerSlot& slot : s.slots) {
    n_decoding += slot.request && slot.request->prefill_done();
  }
  // With depth > 1 the running streams split into micro-batches that alternate.
  const int decode_cap =
      depth > 1 ? (n_decoding + depth - 1) / depth : std::numeric_limits<int>::max();
  std::vector<int> prefilling;
  int n_decode = 0;
  for (int i = 0; i < int(s.slots.size()); ++i) {
    SchedulerSlot& slot = s.slots[i];
    ActiveRequest* request = slot.request.get();
    if (!request || slot.awaiting_logits) continue;
    if (!request->prefill_done()) {
      // A prompt for the prefill worker is not computed here (a disk load goes on here first).
      if (slot.route == PrefillRoute::kWorker) continue;
      if (slot.route == PrefillRoute::kUndecided && !s.prefix_cache->loading(i)) {
        if (s.WorkerCandidate(i)) continue;
        slot.route = PrefillRoute::kLocal;
      }
      prefilling.push_back(i);
      continue;
    }
    if (n_decode == decode_cap) continue;
    s.batch.push_back({request->last_token(), request->next_position(), i, true});
    s.AskPageScores(i, request->id(), request->next_position() + 1, false, record);
    s.Touch(slot, request->next_position(), request->next_position() + 1);
    record.outputs.push_back({.slot = i, .request = request->id(), .sample = true});
    slot.awaiting_logits = true;
    ++n_decode;
  }
  std::sort(prefilling.begin(), prefilling.end(),
            [&](int a, int b) { return s.slots[a].admit_seq < s.slots[b].admit_seq; });
  int budget = options_.n_batch - int(s.batch.size());
  s.disk_page_budget = SchedulerDiskCache::kLoadPagesPerStep;
  s.prompt_logit_budget = options_.prompt_logit_rows;
  // Depth 1: the cap applies when this batch decodes; pipelined, whenever streams run (a
  // big chunk ahead of them in the stages delays their next token just the same).
  const bool streams_wait = depth > 1 ? n_decoding > 0 : !s.batch.empty();
  if (streams_wait && options_.prefill_chunk > 0) budget = std::min(budget, options_.prefill_chunk);
  for (int i : prefilling) {
    if (s.PrefillStep(i, budget, record) == TaskState::kBlocked) break;
  }
}

Status Scheduler::State::PrepareWriteWithRoom(SchedulerSlot& slot) {
  const int page_tokens = pipeline->allocator().page_tokens();
  // Upper bound of the pages this write may allocate (new or copy-on-write).
  const int n_pages = (slot.write_end - 1) / page_tokens - slot.write_begin / page_tokens + 1;
  for (;;) {
    Status status = slot.table->PrepareWrite(slot.write_begin, slot.write_end, &copies);
    if (status.code() != StatusCode::kOutOfRange) return status;
    if (prefix_cache->Evict(n_pages) == 0) return status;
  }
}

// Allocates the pages the batch writes (copy-on-write copies into s.copies), lists every
// slot's pages and records in `record` what each slot will have written.
Status Scheduler::PrepareTables(InFlight& record) {
  State& s = *state_;
  s.copies.clear();
  Status status;
  for (size_t i = 0; i < s.slots.size(); ++i) {
    SchedulerSlot& slot = s.slots[i];
    const bool writes = slot.write_end > 0;
    if (writes && status.ok()) {
      status = s.PrepareWriteWithRoom(slot);
      if (status.ok() && s.pager != nullptr) {
        status = s.pager->Prepare(int(i), slot.table->pages(), slot.write_begin, slot.write_end);
      }
      if (status.ok()) {
        slot.table->SetTokens(slot.write_end);
        record.written.push_back({int(i), slot.request->id(), slot.write_end});
      }
    }
    slot.write_end = 0;
    s.pages_by_slot[i] = slot.table->pages();
    if (s.pager != nullptr) {
      s.attended_by_slot[i] = writes ? s.pager->attended(int(i)) : AttendedPages();
    }
  }
  for (InFlight::Scored& scored : record.scored) {
    scored.n_pages = s.pages_by_slot[scored.slot].size();
  }
  return status;
}

bool Scheduler::SubmitAction() {
  State& s = *state_;
  if (int(s.in_flight.size()) >= s.pipeline->depth()) return false;
  InFlight record;
  BuildBatch(record);
  if (s.batch.empty()) return false;
  Status status = PrepareTables(record);
  if (status.ok()) {
    PipelineBatch batch{s.batch, s.pages_by_slot, s.copies};
    if (s.pager != nullptr) {
      batch.paging = &s.pager->pending();
      batch.attended_by_slot = s.attended_by_slot;
    }
    status = s.pipeline->Submit(batch);
    if (status.ok() && s.pager != nullptr) s.pager->ClearPending(s.batches_submitted + 1);
  }
  if (!status.ok()) {
    FailEverything(status);
    return true;
  }
  s.in_flight.push_back(std::move(record));
  ++s.batches_submitted;
  return true;
}

bool Scheduler::CollectAction() {
  State& s = *state_;
  if (s.in_flight.empty()) return false;
  Result<PipelineOutputs> outputs = s.pipeline->WaitOldestOutputs();
  InFlight record = std::move(s.in_flight.front());
  s.in_flight.pop_front();
  if (!outputs.ok()) {
    FailEverything(outputs.status());
    return true;
  }
  ApplyCollected(record, *outputs, /*from_worker=*/false);
  return true;
}

void Scheduler::ApplyCollected(const InFlight& record, const PipelineOutputs& outputs,
                               bool from_worker) {
  State& s = *state_;
  if (outputs.loss != nullptr && !outputs.loss->empty()) LosePages(*outputs.loss);
  // Every stage has written the batch's KV: it is committed, and its full pages may be
  // shared now.
  for (const InFlight::Written& written : record.written) {
    SchedulerSlot& slot = s.slots[written.slot];
    if (!slot.request || slot.request->id() != written.request) continue;
    slot.n_committed = std::max(slot.n_committed, written.end);
    if (written.end <= slot.request->n_prompt()) slot.request->OnPrefilled(written.end);
    if (s.prefix_cache->enabled()) {
      s.prefix_cache->PublishFullPages(written.slot, *slot.request, *slot.table, written.end);
    }
  }
  size_t offset = 0;
  for (const InFlight::Scored& scored : record.scored) {
    const std::span<const float> scores = outputs.page_scores.subspan(offset, scored.n_pages);
    offset += scored.n_pages;
    const SchedulerSlot& slot = s.slots[scored.slot];
    if (slot.request && slot.request->id() == scored.request)
      s.pager->SetScores(scored.slot, scores);
  }
  // A prompt is prefilled: what a bounded pool chose for it (with the scores of its last
  // position) and a recurrent model's state at its last whole page are kept with its cached
  // pages for the requests that continue it (an edited or regenerated turn shares the prompt,
  // not the reply).
  for (const InFlight::Written& written : record.written) {
    const SchedulerSlot& slot = s.slots[written.slot];
    if (slot.request && slot.request->id() == written.request &&
        written.end == slot.request->n_prompt()) {
      s.prefix_cache->RememberSequence(written.slot, from_worker ? s.worker.get() : nullptr);
      if (from_worker) HandOff(written.slot);
    }
  }
  ProcessOutputs(record, outputs);
  PublishStats();
}

// Hands each request its rows, in batch order: prompt rows first (the prompt's outputs are
// complete once its last chunk is collected), then the row it samples from.
void Scheduler::ProcessOutputs(const InFlight& record, const PipelineOutputs& outputs) {
  State& s = *state_;
  const size_t n_vocab = size_t(config_.n_vocab);
  const size_t n_embd = size_t(config_.n_embd);
  size_t logit_row = 0;
  size_t embedding_row = 0;
  for (const InFlight::Outputs& out : record.outputs) {
    const std::span<const float> logits =
        outputs.logits.subspan(logit_row * n_vocab, size_t(out.n_logit_rows()) * n_vocab);
    const std::span<const float> embeddings =
        outputs.embeddings.subspan(embedding_row * n_embd, size_t(out.n_embedding_rows) * n_embd);
    logit_row += size_t(out.n_logit_rows());
    embedding_row += size_t(out.n_embedding_rows);
    SchedulerSlot& slot = s.slots[out.slot];
    if (!slot.request || slot.request->id() != out.request) continue;
    ActiveRequest& request = *slot.request;
    request.prompt_outputs().AddPromptLogits(
        out.first_position, out.n_prompt_logit_rows,
        logits.first(size_t(out.n_prompt_logit_rows) * n_vocab));
    request.prompt_outputs().AddEmbeddingRows(out.first_position, out.n_embedding_rows, embeddings);
    std::optional<FinishReason> done;
    if (out.prompt_done) done = request.OnPromptDone();
    if (!done && out.sample) {
      slot.awaiting_logits = false;
      done = request.OnLogits(logits.last(n_vocab), slot.table->n_tokens(), options_.n_ctx);
      ++s.generated_tokens_total;
    }
    if (done) FinishSlot(out.slot, *done, request.error());
  }
}

}  // namespace shardlm
