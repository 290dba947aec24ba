// DiskStore: the persistent tier of the prefix cache — one snapshot file per cached block
// under `--kv-cache-dir`, bounded by `--kv-cache-budget`, surviving restarts.
//
// Folder layout:
//   <dir>/<layout fingerprint hex>/<block hash hex>.snap     (snapshot_file.h format)
// Both folders are private (private_folder.h): `dir` must be the server user's own, the
// layout subfolder is created 0700 (tightened to 0700 when an older build made it wider),
// and every file is created 0600 (atomic_file.h).
// Files of another model, split, page geometry or KV type live in another subfolder and
// are never opened. Inside our subfolder, Open scans every file: a valid header whose
// layout and hash match the name is indexed (size, mtime, parent); a corrupt .snap file
// and a temp file left by a crash are ours, so they are logged and deleted; a file that
// cannot be read and anything else is logged and left alone. A file's payload is validated
// in full on every Get; a file that fails is deleted with one log line and the request
// proceeds cold.
//
// Healing: a scan reads headers only, so a file indexed at Open may be corrupt past its
// header until a Get reads it. A caller that computed a block again (a chain's load stops
// at its first bad file, so the blocks after it were never read) writes it again: Put
// replaces a stored file that this process has not validated (read in full by a Get, or
// written itself), and one whose read failed with an I/O error. NeedsWrite tells the caller
// whether a block is worth exporting for that.
//
// Eviction keeps the subfolder under the byte budget. Like PrefixIndex, only leaves are
// evicted (a file whose child block is also on disk stays: a chain is read from its head,
// so evicting a parent would strand its children), and a block's parent is never evicted
// to make room for the block itself. Among leaves, the least valuable goes
// first: value = last use + kTicksPerHit × min(hits, kMaxHitCredit), where a use (write
// or hit) advances a tick. A hit also refreshes the file's mtime, so recency survives a
// restart (Open orders files by mtime; hit counts start at 0).
//
// Writes are write-behind: Put queues the bytes and returns at once; a thread writes them
// (temp file + fsync + rename, atomic_file.h). The queue is bounded in entries and bytes;
// a Put that does not fit is dropped and counted, never waits. A failed write of any kind
// (a full disk, EIO, EACCES, EROFS, ...) is counted, and writes are skipped for
// options.write_failure_backoff (10 s by default): writes queued meanwhile are dropped
// without an attempt, so one line is logged per backoff; reads are served throughout.
//
// Goals: never block the request path on disk writes; never serve bytes that fail
// validation; counters for /metrics. Non-goals: sharing one budget across layout
// subfolders (the budget covers this layout's files), several processes writing one
// folder at once (each would keep its own index; files stay valid, the budget is not
// shared), fetching remote stages' sections (the caller assembles snapshots).
//
// Thread safety: thread-safe; one mutex guards the index and the queue. File reads and
// writes happen outside it; deletions under it, so the index and the folder change
// together. Lifetime: the destructor writes what is queued, then joins the writer thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "cache/block_hash.h"
#include "cache/snapshot_file.h"
#include "gguf/fingerprint.h"

namespace shardlm {

struct DiskStoreOptions {
  std::filesystem::path dir;  // --kv-cache-dir; must exist and be writable
  uint64_t budget_bytes = 0;  // --kv-cache-budget; files of this layout stay under it
  Fingerprint128 layout;      // LayoutFingerprint of the running pipeline
  // Write-behind queue bounds. 64 writes of a few MiB each cover a long prompt's pages
  // while the disk catches up; beyond that the cache is behind and dropping is cheaper
  // than holding more memory.
  int max_queued_writes = 64;
  uint64_t max_queued_bytes = uint64_t{512} << 20;
  // Larger files are not read (a sane page of a large model is a few tens of MiB).
  uint64_t max_file_bytes = uint64_t{1} << 30;
  // Where log lines go; stderr ("kv-cache: ...") when empty.
  std::function<void(const std::string&)> log;
  // Writes are skipped for this long after one fails: one failed write tells us more would
  // fail (a full disk, a folder gone read-only or a failing device), and retrying each costs
  // a temp file create and delete and a log line.
  std::chrono::milliseconds write_failure_backoff{std::chrono::seconds(10)};
};

struct DiskStoreStats {
  int64_t files = 0;
  int64_t bytes_on_disk = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t files_written = 0;
  int64_t evictions = 0;
  int64_t write_errors = 0;
  int64_t dropped_writes = 0;
  int64_t corrupt_files = 0;  // failed validation at open or on Get, deleted
};

// A validated snapshot read from disk: `snapshot`'s sections point into `bytes`.
// Move-only, so the views stay valid (moving a vector keeps its buffer).
struct LoadedSnapshot {
  std::vector<uint8_t> bytes;
  Snapshot snapshot;
  uint64_t generation = 0;  // of the file read (Discard)
  LoadedSnapshot() = default;
  LoadedSnapshot(LoadedSnapshot&&) = default;
  LoadedSnapshot& operator=(LoadedSnapshot&&) = default;
  LoadedSnapshot(const LoadedSnapshot&) = delete;
  LoadedSnapshot& operator=(const LoadedSnapshot&) = delete;
};

class DiskStore {
 public:
  // A use counts like this many newer uses per earlier hit, up to kMaxHitCredit hits: a
  // block read again and again (a shared system prompt) outlives a burst of one-off
  // conversations, but not forever.
  static constexpr uint64_t kTicksPerHit = 32;
  static constexpr uint64_t kMaxHitCredit = 16;

  // Checks the folder (NotFound when missing, InvalidArgument when not a folder or another
  // user's, IoError when not writable), creates the layout subfolder, scans it and starts
  // the writer.
  static Result<std::unique_ptr<DiskStore>> Open(DiskStoreOptions options);
  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  // Queues `snapshot` (EncodeSnapshot bytes for `hash` under this layout) for writing.
  // Returns false when it was dropped: queue full, larger than the budget, a write failed
  // recently, or not a snapshot of `hash` under this layout (logged). A block queued, or
  // stored and validated, is not written again (true); a stored one not validated is
  // replaced (see "Healing").
  bool Put(const BlockHash& hash, std::vector<uint8_t> snapshot);
  // Whether a Put of `hash` would write: not stored, or stored but not validated.
  bool NeedsWrite(const BlockHash& hash) const;

  // The validated snapshot, NotFound when not stored, InvalidData when the file failed
  // validation (it is deleted), IoError when it could not be read (it is kept, and replaced
  // by the next write of its block).
  Result<LoadedSnapshot> Get(const BlockHash& hash);

  // Deletes a stored block whose file passed Get's validation but that the caller cannot use
  // (a section its pipeline needs is missing or of the wrong shape): logged with `why`,
  // counted as corrupt, never offered again. Nothing happens when it is not stored, or when
  // `generation` (LoadedSnapshot::generation) is given and the file was replaced since.
  static constexpr uint64_t kAnyGeneration = 0;
  void Discard(const BlockHash& hash, const std::string& why, uint64_t generation = kAnyGeneration);

  bool Contains(const BlockHash& hash) const;
  // Blocks until every queued write is done (tests, shutdown).
  void Flush();
  DiskStoreStats stats() const;
  // <dir>/<layout hex>: where the files are.
  const std::filesystem::path& folder() const { return folder_; }

  // Test hook: while paused the writer takes nothing from the queue (Flush would wait).
  void PauseWriterForTest(bool paused);

 private:
  struct FileEntry {
    uint64_t bytes = 0;
    BlockHash parent;
    uint64_t last_use = 0;
    uint64_t hits = 0;
    // Read in full and valid, or written by this process; a scanned file is not until read.
    bool validated = false;
    uint64_t generation = 0;  // a new one per file added: a replaced file is another file
  };
  struct PendingWrite {
    BlockHash hash;
    BlockHash parent;
    std::vector<uint8_t> bytes;
  };

  explicit DiskStore(DiskStoreOptions options, std::filesystem::path folder);
  void Log(const std::string& line) const;
  Status Scan();
  void WriterLoop();
  void Write(PendingWrite& write);
  std::filesystem::path PathOf(const BlockHash& hash) const;

  // Callers hold mu_.
  void AddEntryLocked(const BlockHash& hash, FileEntry entry);
  void RemoveEntryLocked(const BlockHash& hash);  // and unlinks it from its parent
  // Evicts leaves (never those in `keep`) and deletes their files until `incoming` more
  // bytes fit the budget.
  void MakeRoomLocked(uint64_t incoming, std::span<const BlockHash> keep);
  uint64_t ValueLocked(const FileEntry& entry) const;
  bool NeedsWriteLocked(const BlockHash& hash) const;
  // Counts a miss; an invalid file is logged, deleted and forgotten unless the file was
  // replaced since the read (`generation`); an unreadable one is kept for a rewrite.
  // Returns the error.
  Status GetFailedLocked(const BlockHash& hash, const std::filesystem::path& path, Status failed,
                         uint64_t generation);

  const DiskStoreOptions options_;
  const std::filesystem::path folder_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // writer: a write was queued, or stop/unpause
  std::condition_variable idle_cv_;  // Flush: the queue drained
  std::unordered_map<BlockHash, FileEntry> files_;
  std::deque<PendingWrite> queue_;
  std::unordered_set<BlockHash> queued_;  // hashes in queue_ or being written
  // Files on disk per parent hash (the parent itself may be missing): a block with no
  // entry here is a leaf.
  std::unordered_map<BlockHash, int> children_;
  uint64_t queued_bytes_ = 0;
  int in_flight_ = 0;
  bool paused_ = false;
  bool stop_ = false;
  // After a failed write, writes are dropped until then (options.write_failure_backoff).
  std::chrono::steady_clock::time_point write_backoff_until_{};
  uint64_t tick_ = 0;
  uint64_t generations_ = 0;
  DiskStoreStats stats_;
  std::thread writer_;
};

}  // namespace shardlm
