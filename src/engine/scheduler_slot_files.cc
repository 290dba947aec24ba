// Scheduler slots, caller side: the Engine's slot methods (engine.h "Slots"). They check
// the slot id, take the one slot I/O turn, and drive a transfer with slot jobs
// (scheduler_slots.h): a save streams the pages the engine thread exports, a chunk at a
// time, and the recurrent state it exports with the first chunk, through cache/slot_file.h's
// writer into a temp file that is fsynced and renamed; a restore streams a file through the
// reader, a chunk at a time, into fresh pages the engine thread imports, and commits them
// (with the file's recurrent state) only once the reader's Finish has checked every
// checksum. File I/O never runs on the engine thread.
//
// Goals: a busy slot answers before the file is opened; memory bounded by the chunk
// buffers (kSlotChunkPages pages of every stage) and one recurrent state (a size the model
// fixes) whatever the sequence's length; nothing a
// file says sizes an allocation before it is checked against a slot's capacity; a save
// never takes the folder's slot files past the budget, and never evicts one.
// Non-goals: folders (the caller confines names and creates the folder privately:
// server/slot_api.cc); several processes sharing a slot folder (each counts the budget
// alone).
#include <algorithm>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "cache/atomic_file.h"
#include "cache/slot_file.h"
#include "engine/scheduler.h"
#include "engine/scheduler_impl.h"

namespace shardlm {
namespace {

namespace fs = std::filesystem;

std::string FileName(const fs::path& file) { return file.filename().string(); }

std::string MiB(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// A transfer's chunk: kSlotChunkPages pages of every stage.
struct ChunkBuffers {
  std::vector<std::unique_ptr<uint8_t[]>> owned;
  std::vector<uint8_t*> stages;
  explicit ChunkBuffers(const std::vector<size_t>& page_bytes) {
    for (size_t bytes : page_bytes) {
      owned.push_back(std::make_unique_for_overwrite<uint8_t[]>(bytes * kSlotChunkPages));
      stages.push_back(owned.back().get());
    }
  }
};

// Whether `path` is a slot file (a regular file whose header is a slot file's); its size.
std::optional<uint64_t> SlotFileSize(const fs::directory_entry& entry) {
  std::error_code ec;
  if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) return std::nullopt;
  Result<std::vector<uint8_t>> head = ReadFileHead(entry.path(), kSnapshotHeaderBytes);
  if (!head.ok()) return std::nullopt;
  Result<SnapshotHeader> header = DecodeSnapshotHeader(*head);
  if (!header.ok() || header->kind != SnapshotFileKind::kSlot) return std::nullopt;
  const uint64_t size = entry.file_size(ec);
  return ec ? std::nullopt : std::optional<uint64_t>(size);
}

// Whether a file of `bytes` may replace `file` with the folder's slot files under `budget`
// (the file it replaces credits its size).
Status CheckSlotBudget(const fs::path& file, uint64_t bytes, uint64_t budget) {
  uint64_t used = 0, replaced = 0;
  std::error_code ec;
  for (fs::directory_iterator it(file.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<uint64_t> size = SlotFileSize(*it);
    if (!size) continue;
    used += *size;
    if (it->path().filename() == file.filename()) replaced = *size;
  }
  if (ec) return IoError("cannot list the slot folder: {}", ec.message());
  if (used - replaced + bytes <= budget) return Status::Ok();
  return QuotaExceeded(
      "saving needs {} and the slot files in the slot folder take {} of the {} --slot-save-budget"
      "{}: erase slot files you no longer need, or raise --slot-save-budget",
      MiB(bytes), MiB(used), MiB(budget),
      replaced > 0 ? fmt::format(" (replacing '{}' frees {})", FileName(file), MiB(replaced)) : "");
}

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
    Instruction instruction;
    instruction.kind = Instruction::Kind::kSlot;
    instruction.slot_job = std::move(job);
    inbox_.push_back(std::move(instruction));
  }
  cv_.notify_one();
  return done.get();  // the engine thread answers every job, even when it stops
}

Result<SlotJobResult> Scheduler::RunSlotJob(SlotJob::Op op, int32_t slot) {
  auto job = std::make_shared<SlotJob>();
  job->op = op;
  job->slot = slot;
  return RunSlotJob(std::move(job));
}

Result<std::unique_lock<std::timed_mutex>> Scheduler::TakeSlotIoTurn() {
  std::unique_lock<std::timed_mutex> turn(slot_io_mu_, std::defer_lock);
  if (!turn.try_lock_for(options_.slot_io_wait)) {
    return ResourceExhausted(
        "another slot save or restore is running (one at a time) and did not finish within "
        "{} ms: retry later",
        options_.slot_io_wait.count());
  }
  return turn;
}

Status Scheduler::CopySlotPages(int32_t slot, int first, int n,
                                const std::vector<uint8_t*>& buffers, std::span<uint8_t> state) {
  auto job = std::make_shared<SlotJob>();
  job->op = SlotJob::Op::kCopy;
  job->slot = slot;
  job->first_page = first;
  job->n_pages = n;
  job->stage_buffers = buffers;
  job->state_buffer = state;
  return RunSlotJob(std::move(job)).status();
}

std::vector<SlotInfo> Scheduler::Slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slot_infos_;
}

Result<int32_t> Scheduler::EraseSlot(int32_t slot) {
  SHARDLM_TRY(CheckSlot(slot));
  SHARDLM_ASSIGN_OR_RETURN(SlotJobResult erased, RunSlotJob(SlotJob::Op::kErase, slot));
  return int32_t(erased.n_tokens);
}

Status Scheduler::CheckSlotFilesDescribeTheModel() const {
  if (!slot_layout_) {
    return Unsupported(
        "slot files need the model file's fingerprint: create the scheduler "
        "from the model");
  }
  if (!slot_layout_->describable()) {
    return Unsupported(
        "slot files cannot hold this model's pages yet: its KV layers hold different numbers "
        "of elements per position");
  }
  return Status::Ok();
}

Result<SlotSaveResult> Scheduler::SaveSlot(int32_t slot, const fs::path& file) {
  SHARDLM_TRY(CheckSlot(slot));
  SHARDLM_TRY(CheckSlotFilesDescribeTheModel());
  SHARDLM_ASSIGN_OR_RETURN(std::unique_lock<std::timed_mutex> turn, TakeSlotIoTurn());
  SHARDLM_ASSIGN_OR_RETURN(SlotJobResult begun, RunSlotJob(SlotJob::Op::kSaveBegin, slot));
  Result<SlotSaveResult> saved = StreamSave(slot, file, begun);
  // Releases the pages; the file is whole (or gone) whatever the engine did meanwhile.
  (void)RunSlotJob(SlotJob::Op::kEnd, slot);
  return saved;
}

Result<SlotSaveResult> Scheduler::StreamSave(int32_t slot, const fs::path& file,
                                             const SlotJobResult& begun) {
  const std::string name = "slot file '" + FileName(file) + "'";
  const PageSelection* selection = begun.selection ? &*begun.selection : nullptr;
  SHARDLM_ASSIGN_OR_RETURN(SlotFileGeometry geometry,
                           SlotFileGeometryOf(*slot_layout_, begun.n_tokens, selection != nullptr));
  SHARDLM_TRY(CheckSlotBudget(file, geometry.file_bytes, options_.slot_save_budget)
                  .WithContext("slot " + std::to_string(slot) + " to " + name));
  Result<AtomicFileWriter> out = AtomicFileWriter::Create(file);
  if (!out.ok()) return out.status().WithContext(name);
  auto write_at = [&out](uint64_t offset, std::span<const uint8_t> bytes) {
    return out->WriteAt(offset, bytes);
  };
  Result<SlotFileWriter> writer =
      SlotFileWriter::Start(*slot_layout_, begun.tokens, write_at, selection);
  if (!writer.ok()) return writer.status().WithContext(name);
  ChunkBuffers chunk(state_->pipeline->page_bytes());
  // The state at the last whole page (none before one, or without recurrent layers).
  std::vector<uint8_t> state(size_t(geometry.total_state_bytes()));
  for (int first = 0; first < geometry.n_pages; first += kSlotChunkPages) {
    const int n = std::min(kSlotChunkPages, geometry.n_pages - first);
    SHARDLM_TRY(CopySlotPages(slot, first, n, chunk.stages,
                              first == 0 ? std::span<uint8_t>(state) : std::span<uint8_t>()));
    Status written = writer->WritePages(n, chunk.stages);
    if (!written.ok()) return written.WithContext(name);
  }
  Status finished = state.empty() ? Status::Ok() : writer->WriteState(state);
  if (finished.ok()) finished = writer->Finish();
  if (finished.ok()) finished = out->Commit();
  if (!finished.ok()) return finished.WithContext(name);
  return SlotSaveResult{.n_saved = begun.n_tokens, .n_written = geometry.file_bytes};
}

Result<SlotRestoreResult> Scheduler::RestoreSlot(int32_t slot, const fs::path& file) {
  SHARDLM_TRY(CheckSlot(slot));
  SHARDLM_TRY(CheckSlotFilesDescribeTheModel());
  if (!options_.prefix_cache) {
    return Unsupported(
        "restoring a slot needs the prefix cache (the restored pages are "
        "offered to it): drop --no-prefix-cache");
  }
  SHARDLM_ASSIGN_OR_RETURN(std::unique_lock<std::timed_mutex> turn, TakeSlotIoTurn());
  SHARDLM_TRY(RunSlotJob(SlotJob::Op::kRestoreBegin, slot).status());
  Result<RestoredSlotFile> streamed = StreamRestore(slot, file);
  auto end = std::make_shared<SlotJob>();
  end->op = SlotJob::Op::kEnd;
  end->slot = slot;
  end->commit = streamed.ok();
  if (streamed.ok()) {
    end->tokens = streamed->tokens;
    end->selection = streamed->selection;
    end->state = std::move(streamed->state);
  }
  Result<SlotJobResult> ended = RunSlotJob(std::move(end));
  if (!streamed.ok()) return streamed.status();
  if (!ended.ok()) return ended.status();
  return SlotRestoreResult{.n_restored = ended->n_tokens, .n_read = streamed->n_bytes};
}

// Streams the file into the transfer's fresh pages: header, descriptors and tokens are
// checked against this server before a page is allocated, every page's checksum before
// the caller commits.
Result<RestoredSlotFile> Scheduler::StreamRestore(int32_t slot, const fs::path& file) {
  const std::string name = "slot file '" + FileName(file) + "'";
  Result<ReadOnlyFile> in = ReadOnlyFile::Open(file);
  if (in.status().code() == StatusCode::kNotFound) return NotFound("{} does not exist", name);
  if (!in.ok()) return in.status().WithContext(name);
  auto read_at = [&in](uint64_t offset, std::span<uint8_t> dst) { return in->ReadAt(offset, dst); };
  Result<SlotFileReader> reader =
      SlotFileReader::Open(*slot_layout_, in->size(), read_at, options_.n_ctx);
  if (!reader.ok()) return reader.status().WithContext(name);
  const std::vector<int32_t>& tokens = reader->tokens();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= config_.n_vocab) {
      return InvalidData("{}: token {} has id {}, outside the vocabulary [0, {})", name, i,
                         tokens[i], config_.n_vocab);
    }
  }
  const std::vector<size_t> page_bytes = state_->pipeline->page_bytes();
  const std::vector<size_t> state_bytes = state_->pipeline->stage_state_bytes();
  const SlotFileGeometry& geometry = reader->geometry();
  for (size_t st = 0; st < page_bytes.size(); ++st) {
    if (geometry.page_bytes[st] != page_bytes[st]) {
      return InvalidData("{}: stage {}'s pages are {} bytes, this server's {}", name, st,
                         geometry.page_bytes[st], page_bytes[st]);
    }
    // A sequence without a whole page carries no state (the empty one is position 0's).
    if (geometry.state_position > 0 && geometry.state_bytes[st] != state_bytes[st]) {
      return InvalidData("{}: stage {}'s recurrent state is {} bytes, this server's {}", name, st,
                         geometry.state_bytes[st], state_bytes[st]);
    }
  }
  auto allocate = std::make_shared<SlotJob>();
  allocate->op = SlotJob::Op::kRestoreAllocate;
  allocate->slot = slot;
  allocate->n_pages = geometry.n_pages;
  Status allocated = RunSlotJob(std::move(allocate)).status();
  if (!allocated.ok()) {
    return allocated.WithContext(fmt::format("restoring {} tokens", tokens.size()));
  }
  ChunkBuffers chunk(page_bytes);
  for (int first = 0; first < geometry.n_pages; first += kSlotChunkPages) {
    const int n = std::min(kSlotChunkPages, geometry.n_pages - first);
    Status read = reader->ReadPages(n, chunk.stages);
    if (!read.ok()) return read.WithContext(name);
    SHARDLM_TRY(CopySlotPages(slot, first, n, chunk.stages));
  }
  Status checked = reader->Finish();
  if (!checked.ok()) return checked.WithContext(name);
  return RestoredSlotFile{std::vector<TokenId>(tokens.begin(), tokens.end()), reader->selection(),
                          in->size(), reader->state()};
}

}  // namespace shardlm
