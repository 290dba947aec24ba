// Scheduler slots, caller side: the Engine's slot methods (engine.h "Slots"). They check
// the slot id, read and validate a restore's whole file, hand the engine thread a SlotJob
// (scheduler_slots.h) and wait for it, and encode and write a save's file, so file I/O
// never runs on the engine thread.
// Non-goals: streaming a file; a save holds the exported pages and the encoded file at once
// (twice the sequence's KV), a restore the whole file while its pages are imported.
#include <future>
#include <memory>
#include <span>
#include <vector>

#include "cache/atomic_file.h"
#include "cache/slot_file.h"
#include "runtime/scheduler.h"
#include "runtime/scheduler_impl.h"

namespace shardlm {
namespace {

std::string FileName(const std::filesystem::path& file) { return file.filename().string(); }

}  // namespace

Status Scheduler::CheckSlot(int32_t slot) const {
  if (slot < 0 || slot >= options_.n_parallel) {
    return NotFound("slot {} does not exist (slots are 0 to {}: --parallel {})", slot,
                    options_.n_parallel - 1, options_.n_parallel);
  }
  return Status::Ok();
}

Result<SlotJobResult> Scheduler::RunSlotJob(std::shared_ptr<SlotJob> job) {
  std::future<Result<SlotJobResult>> done = job->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kInternal, "the engine is shutting down");
    if (!lost_.ok()) return lost_;
    Instruction instruction;
    instruction.kind = Instruction::Kind::kSlot;
    instruction.slot_job = std::move(job);
    inbox_.push_back(std::move(instruction));
  }
  cv_.notify_one();
  return done.get();  // the engine thread answers every job, even when it stops
}

std::vector<SlotInfo> Scheduler::Slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slot_infos_;
}

Result<int32_t> Scheduler::EraseSlot(int32_t slot) {
  SHARDLM_TRY(CheckSlot(slot));
  auto job = std::make_shared<SlotJob>();
  job->op = SlotJob::Op::kErase;
  job->slot = slot;
  SHARDLM_ASSIGN_OR_RETURN(SlotJobResult erased, RunSlotJob(std::move(job)));
  return int32_t(erased.n_tokens);
}

Result<SlotSaveResult> Scheduler::SaveSlot(int32_t slot, const std::filesystem::path& file) {
  SHARDLM_TRY(CheckSlot(slot));
  if (!slot_layout_) {
    return Unsupported(
        "slot files need the model file's fingerprint: create the scheduler "
        "from the model");
  }
  auto job = std::make_shared<SlotJob>();
  job->op = SlotJob::Op::kSave;
  job->slot = slot;
  SHARDLM_ASSIGN_OR_RETURN(SlotJobResult saved, RunSlotJob(std::move(job)));
  std::vector<std::span<const uint8_t>> pages;
  for (size_t st = 0; st < saved.stage_pages.size(); ++st) {
    pages.emplace_back(saved.stage_pages[st].get(), saved.stage_bytes[st]);
  }
  SHARDLM_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                           EncodeSlotFile(*slot_layout_, saved.tokens, pages));
  Status written = WriteFileAtomic(file, bytes);
  if (!written.ok()) return written.WithContext("slot file '" + FileName(file) + "'");
  return SlotSaveResult{.n_saved = saved.n_tokens, .n_written = bytes.size()};
}

Result<SlotRestoreResult> Scheduler::RestoreSlot(int32_t slot, const std::filesystem::path& file) {
  SHARDLM_TRY(CheckSlot(slot));
  if (!slot_layout_) {
    return Unsupported(
        "slot files need the model file's fingerprint: create the scheduler "
        "from the model");
  }
  if (!options_.prefix_cache) {
    return Unsupported(
        "restoring a slot needs the prefix cache (the restored pages are "
        "offered to it): drop --no-prefix-cache");
  }
  SHARDLM_ASSIGN_OR_RETURN(std::shared_ptr<const SlotRestoreSource> source, ReadSlotFile(file));
  auto job = std::make_shared<SlotJob>();
  job->op = SlotJob::Op::kRestore;
  job->slot = slot;
  job->source = source;
  SHARDLM_ASSIGN_OR_RETURN(SlotJobResult restored, RunSlotJob(std::move(job)));
  return SlotRestoreResult{.n_restored = restored.n_tokens, .n_read = source->bytes.size()};
}

// The whole file, validated against this server: layout, length, token ids, page sizes.
Result<std::shared_ptr<const SlotRestoreSource>> Scheduler::ReadSlotFile(
    const std::filesystem::path& file) const {
  const std::string name = "slot file '" + FileName(file) + "'";
  const uint64_t max_bytes = SlotFileBytes(*slot_layout_, options_.n_ctx);
  Result<std::vector<uint8_t>> bytes = ReadWholeFile(file, max_bytes);
  if (bytes.status().code() == StatusCode::kNotFound) return NotFound("{} does not exist", name);
  if (bytes.status().code() == StatusCode::kOutOfRange) {
    return InvalidData("{} is larger than a sequence of --ctx-size {} tokens ({} bytes)", name,
                       options_.n_ctx, max_bytes);
  }
  if (!bytes.ok()) return bytes.status().WithContext(name);
  auto source = std::make_shared<SlotRestoreSource>();
  source->bytes = std::move(bytes).value();
  Result<SlotImage> image = DecodeSlotFile(source->bytes, *slot_layout_);
  if (!image.ok()) return image.status().WithContext(name);
  source->image = std::move(image).value();
  const std::vector<TokenId>& tokens = source->image.tokens;
  if (int64_t(tokens.size()) > options_.n_ctx) {
    return InvalidData("{} holds {} tokens, a slot at most {} (--ctx-size)", name, tokens.size(),
                       options_.n_ctx);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= config_.n_vocab) {
      return InvalidData("{}: token {} has id {}, outside the vocabulary [0, {})", name, i,
                         tokens[i], config_.n_vocab);
    }
  }
  const std::vector<size_t> page_bytes = state_->pipeline->page_bytes();
  for (size_t st = 0; st < page_bytes.size(); ++st) {
    if (source->image.stage_pages[st].size() != page_bytes[st] * size_t(source->image.n_pages)) {
      return InvalidData("{}: stage {}'s pages are {} bytes, this server's {} each", name, st,
                         source->image.stage_pages[st].size(), page_bytes[st]);
    }
  }
  return std::shared_ptr<const SlotRestoreSource>(std::move(source));
}

}  // namespace shardlm
