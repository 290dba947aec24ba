// SchedulerDiskCache: the disk tier of the Scheduler's prefix cache — full
// KV pages persisted under `--kv-cache-dir` as they are published, and loaded back into
// fresh pages when a prompt's chain continues past what memory holds, so a restarted
// server answers a long conversation's next turn without recomputing it.
//
// Persist path (write-behind, off the engine thread):
//   Persist(hash, parent, page) runs on the engine thread when a page is published into the
//   memory index, for a block the store does not hold, or holds in a file this process has
//   not validated (DiskStore::NeedsWrite). That second case heals a chain: its load stops
//   at the first file that fails validation, so the files after it are never read, and a
//   corrupt one among them would stay until a later restart's load reached it (one bad
//   file healed per restart). The request recomputes every block from the failed one on,
//   so each is written again, replacing whatever its file held. It retains the page
//   (PageAllocator::Retain: the page can be neither evicted nor reused while the reference is held)
//   and queues it. A persister thread exports the page from every stage (Pipeline::ExportPages: a
//   memcpy for local stages, a transfer through the daemon for remote ones), encodes one snapshot
//   with one kv_page section per stage and hands it to DiskStore::Put, then waits until the store's
//   writer has written it (one file at a time: a slow disk backs up into this queue, not the
//   store's, whose overflow would drop blocks from the middle of chains).
//   The exported page goes on a done list; the engine thread releases the reference
//   (ReleaseExported: PageAllocator is engine-thread only). At most kMaxPendingExports
//   pages wait; a Persist beyond that is refused, and the caller offers the block again once
//   the queue has room (SchedulerPrefixCache keeps those blocks in chain order). When the pool is
//   full and only pages held for export could make room, WaitForExports lets the engine thread wait
//   for the persister (rare: bounded by kMaxPendingExports pages).
// Load path (engine thread, bounded per step):
//   Load(hash, page) reads and validates the block's file (DiskStore::Get checks every
//   checksum), checks every stage's kv_page section (CheckKvPageSection and its size) and
//   imports them into `page` of every stage (Pipeline::ImportPages). All stages or nothing:
//   a missing section or a failed import is an error and the caller frees the page. A file
//   that fails (DiskStore::Get's checks, or a stage's section missing or misshapen: the
//   snapshot holds every stage's section, remote stages' included, so a file is whole or
//   unusable) is deleted, and the block's recompute writes it whole again. The
//   caller (SchedulerPrefixCache) runs a prompt's disk chain as a resumable task, at most
//   kLoadPagesPerStep pages per engine step, so running streams keep decoding while a
//   long prefix is read.
// Page selections (a bounded KV pool's choice of resident pages for a cached chain) and
//   recurrent states (what a cached chain resumes a model with recurrent layers from) are
//   files of their own beside the blocks (PersistSelection / LoadSelection, PersistState /
//   LoadState).
// Layout: the folder is keyed by LayoutFingerprint over the model fingerprint, each stage's
//   layer range, page geometry and KV type, so files of another model, split or page size
//   are never opened.
//
// Goals: never block the engine thread on disk writes; never import bytes that failed
// validation (the request proceeds cold, with one log line); counters for /metrics.
// Non-goals: the memory index (scheduler_prefix_cache.h), file format and budget
// (snapshot_file.h, disk_store.h), which blocks to load (the caller walks the chain).
//
// Thread safety: Persist, ReleaseExported, WaitForExports, Clear, Load and Contains belong
// to the engine thread; FillStats may be called from any thread. Lifetime: the pipeline
// must outlive it; the destructor exports and writes what is queued, then releases every
// page it holds (the allocator must still be alive).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "cache/block_hash.h"
#include "cache/disk_store.h"
#include "cache/snapshot_layout.h"
#include "engine/engine.h"
#include "gguf/fingerprint.h"
#include "kv/page_allocator.h"
#include "pipeline/pipeline.h"

namespace shardlm {

struct SchedulerDiskCacheOptions {
  std::filesystem::path dir;  // must exist (the CLI creates it)
  uint64_t budget_bytes = 0;
  Fingerprint128 model;  // ModelFingerprint of the served file
  KvType kv_type = KvType::kF32;
  WindowKv window_kv = WindowKv::kRing;
  // Where log lines go; stderr ("kv-cache: ...") when empty.
  std::function<void(const std::string&)> log;
};

// The snapshot layout of `pipeline`'s pages (cache blocks and slot files): the model's
// fingerprint, each stage's layers (those with KV in the pages, and the bytes of its state),
// the page geometry and the KV type.
SnapshotLayout PipelineSnapshotLayout(const Pipeline& pipeline, const Fingerprint128& model,
                                      KvType kv_type, WindowKv window_kv);

class SchedulerDiskCache {
 public:
  // Pages waiting for export at most. Each holds a pool page (not evictable while it
  // waits); 32 pages = 2K tokens at 64-token pages, a few seconds of prefill on a CPU,
  // while an export of a 0.6B-shaped page (~15 MB) takes a few milliseconds.
  static constexpr int kMaxPendingExports = 32;
  // Pages loaded per engine step. A 0.6B-shaped F32 page is ~15 MB: read, checksum and
  // copy cost about 10 ms each from the page cache, so two pages keep a step near one
  // decode step of such a model and running streams keep their pace.
  static constexpr int kLoadPagesPerStep = 2;

  // Opens the DiskStore for this pipeline's layout (logs what it found). Errors: the
  // folder (DiskStore::Open).
  static Result<std::unique_ptr<SchedulerDiskCache>> Open(Pipeline* pipeline,
                                                          SchedulerDiskCacheOptions options);
  ~SchedulerDiskCache();
  SchedulerDiskCache(const SchedulerDiskCache&) = delete;
  SchedulerDiskCache& operator=(const SchedulerDiskCache&) = delete;

  // Engine thread. Queues `page` (published under `hash`, child of `parent`) for export,
  // unless the block is on disk in a validated file or queued already. False when the
  // queue is full: the caller offers it again later (or calls Dropped).
  bool Persist(const BlockHash& hash, const BlockHash& parent, PageId page);
  // A block the caller gave up persisting (counted with the dropped writes).
  void Dropped();
  // Releases the references of pages the persister has exported.
  void ReleaseExported();
  // Waits until nothing waits for export, then releases; true when a page was released.
  bool WaitForExports();
  // Drops queued exports and waits for the one in progress (a lost stage: pages exported
  // after a reconnect would be empty), then releases every held page.
  void Clear();

  bool Contains(const BlockHash& hash) const { return store_->Contains(hash); }
  // Imports block `hash` from disk into `page` of every stage. Errors (logged, counted):
  // not on disk, invalid file, a missing or mismatched stage section, a failed import; the
  // page's contents are then undefined and the caller frees it.
  Status Load(const BlockHash& hash, PageId page);

  // Page selections (bounded KV pool): the pager's memory of a sequence whose last full
  // block is `hash` (Pager::Record) lives in its own small file, stored under a key derived
  // from the block's hash (a block of no tokens after it, which no real block is) with the
  // block as its parent, so the store evicts it before the block. The first selection
  // stored for a block stays (the memory cache keeps the same rule), so a restarted server
  // reads what the running one used. Engine thread.
  bool ContainsSelection(const BlockHash& hash) const;
  // Queues the file (dropped like a block when the queue is full). Needs n_pages >= 1.
  void PersistSelection(const BlockHash& hash, const PageSelection& selection);
  // Reads and validates it (a file that fails is deleted). NotFound when absent.
  Result<PageSelection> LoadSelection(const BlockHash& hash);

  // Recurrent state (a model with recurrent layers): a sequence's state after block `hash`
  // (Pipeline::ExportState's bytes: every stage's part in order, one recurrent_state section
  // per stage that has any) in its own file, keyed and parented like a selection (under a key
  // of its own). Engine thread.
  bool ContainsState(const BlockHash& hash) const;
  void PersistState(const BlockHash& hash, int n_tokens, std::span<const uint8_t> state);
  // Reads and validates it (every stage's section, of its size; a file that fails is
  // deleted). NotFound when absent.
  Result<std::vector<uint8_t>> LoadState(const BlockHash& hash);

  // Blocks until every queued page is exported and written (tests, shutdown).
  void Flush();
  // Any thread: the kv_disk_* counters.
  void FillStats(EngineStats& stats) const;
  const DiskStore& store() const { return *store_; }
  const SnapshotLayout& layout() const { return layout_; }

 private:
  struct Export {
    BlockHash hash;
    BlockHash parent;
    PageId page = kNoPage;
  };

  SchedulerDiskCache(Pipeline* pipeline, SnapshotLayout layout,
                     std::function<void(const std::string&)> log);
  void Log(const std::string& line) const;
  void PersisterLoop();
  // Persister thread: exports and encodes one page, queues it for writing.
  void ExportOne(const Export& job);
  Status LoadChecked(const BlockHash& hash, PageId page);
  BlockHash SelectionKeyOf(const BlockHash& hash) const;
  BlockHash StateKeyOf(const BlockHash& hash) const;

  Pipeline* pipeline_;
  const SnapshotLayout layout_;
  const Fingerprint128 layout_fingerprint_;
  const std::vector<size_t> page_bytes_;  // [stage]
  std::function<void(const std::string&)> log_;
  std::unique_ptr<DiskStore> store_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // persister: a job was queued, or stop
  std::condition_variable idle_cv_;  // engine thread: the queue drained
  std::deque<Export> queue_;
  std::vector<PageId> exported_;  // done, reference not yet released
  int n_held_ = 0;                // pages retained: queued, exporting or exported
  bool busy_ = false;             // the persister is exporting one
  bool stop_ = false;
  int64_t dropped_ = 0;        // Persist calls dropped (queue full)
  int64_t export_errors_ = 0;  // exports that failed (a stage down)
  std::thread persister_;
};

}  // namespace shardlm
