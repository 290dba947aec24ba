// SchedulerDiskCache implementation: the layout of the running pipeline, the persister
// thread (export, encode, DiskStore::Put) and the checked load (see scheduler_disk_cache.h).
#include "engine/scheduler_disk_cache.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "base/check.h"
#include "base/thread_name.h"
#include "cache/snapshot_file.h"
#include "model/model.h"

namespace shardlm {
SnapshotLayout PipelineSnapshotLayout(const Pipeline& pipeline, const Fingerprint128& model,
                                      KvType kv_type, WindowKv window_kv) {
  SnapshotLayout layout;
  layout.model = model;
  const ModelConfig& config = pipeline.config();
  const std::vector<StageInfo> placement = pipeline.placement();
  const std::vector<size_t> state_bytes = pipeline.stage_state_bytes();
  for (size_t s = 0; s < placement.size(); ++s) {
    const StageInfo& stage = placement[s];
    // A state is whole 4-byte words (float32 recurrent state; K and V rows of a window ring
    // are an even number of bytes each, and come in pairs).
    const size_t bytes = s < state_bytes.size() ? state_bytes[s] : 0;
    SHARDLM_CHECK(bytes % sizeof(float) == 0);
    layout.stages.push_back(
        {stage.layers.begin, stage.layers.end,
         StageKvPoolConfig(config, stage.layers, 1, 1, kv_type, window_kv).n_layers,
         bytes / sizeof(float)});
  }
  layout.page_tokens = pipeline.allocator().page_tokens();
  layout.kv_type = kv_type;
  const PagePoolConfig pool =
      StageKvPoolConfig(config, {0, config.n_layers}, 1, 1, kv_type, window_kv);
  if (pool.uniform()) {
    layout.n_kv_heads = config.n_head_kv;
    layout.head_dim = config.head_dim;
    return layout;
  }
  layout.layer_shapes = pool.layer_shapes;
  const int elements = pool.layer_shapes[0].n_kv_heads * pool.layer_shapes[0].head_dim;
  for (const KvLayerShape& shape : pool.layer_shapes) {
    if (shape.n_kv_heads * shape.head_dim != elements) return layout;  // not describable
  }
  layout.n_kv_heads = 1;
  layout.head_dim = elements;
  return layout;
}

SchedulerDiskCache::SchedulerDiskCache(Pipeline* pipeline, SnapshotLayout layout,
                                       std::function<void(const std::string&)> log)
    : pipeline_(pipeline),
      layout_(std::move(layout)),
      layout_fingerprint_(LayoutFingerprint(layout_)),
      page_bytes_(pipeline->page_bytes()),
      log_(std::move(log)) {}

Result<std::unique_ptr<SchedulerDiskCache>> SchedulerDiskCache::Open(
    Pipeline* pipeline, SchedulerDiskCacheOptions options) {
  SnapshotLayout layout =
      PipelineSnapshotLayout(*pipeline, options.model, options.kv_type, options.window_kv);
  if (!layout.describable()) {
    return Unsupported(
        "the disk KV cache cannot store this model's pages yet: its KV layers hold different "
        "numbers of elements per position");
  }
  DiskStoreOptions store_options;
  store_options.dir = options.dir;
  store_options.budget_bytes = options.budget_bytes;
  store_options.layout = LayoutFingerprint(layout);
  store_options.log = options.log;
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<DiskStore> store,
                           DiskStore::Open(std::move(store_options)));
  std::unique_ptr<SchedulerDiskCache> cache(
      new SchedulerDiskCache(pipeline, std::move(layout), std::move(options.log)));
  cache->store_ = std::move(store);
  cache->persister_ = std::thread(&SchedulerDiskCache::PersisterLoop, cache.get());
  return cache;
}

SchedulerDiskCache::~SchedulerDiskCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  persister_.join();  // exports what is queued first
  store_.reset();     // writes what is queued
  ReleaseExported();
}

void SchedulerDiskCache::Log(const std::string& line) const {
  if (log_) {
    log_(line);
  } else {
    std::fprintf(stderr, "kv-cache: %s\n", line.c_str());
  }
}

bool SchedulerDiskCache::Persist(const BlockHash& hash, const BlockHash& parent, PageId page) {
  if (!store_->NeedsWrite(hash)) return true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool queued = std::any_of(queue_.begin(), queue_.end(),
                                    [&](const Export& job) { return job.hash == hash; });
    if (queued) return true;
    if (int(queue_.size()) >= kMaxPendingExports) return false;
    pipeline_->allocator().Retain(page);
    queue_.push_back({hash, parent, page});
    ++n_held_;
  }
  work_cv_.notify_one();
  return true;
}

void SchedulerDiskCache::Dropped() {
  std::lock_guard<std::mutex> lock(mu_);
  ++dropped_;
}

void SchedulerDiskCache::ReleaseExported() {
  std::vector<PageId> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(exported_);
    n_held_ -= int(done.size());
  }
  for (PageId page : done) pipeline_->allocator().Release(page);
}

bool SchedulerDiskCache::WaitForExports() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (n_held_ == 0) return false;
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  ReleaseExported();
  return true;
}

void SchedulerDiskCache::Clear() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (const Export& job : queue_) exported_.push_back(job.page);
    queue_.clear();
    idle_cv_.wait(lock, [&] { return !busy_; });
  }
  ReleaseExported();
}

void SchedulerDiskCache::Flush() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  store_->Flush();
}

void SchedulerDiskCache::PersisterLoop() {
  SetThreadName("kv-persist");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued is exported
    const Export job = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    ExportOne(job);
    lock.lock();
    busy_ = false;
    exported_.push_back(job.page);
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void SchedulerDiskCache::ExportOne(const Export& job) {
  const int n_stages = int(page_bytes_.size());
  std::vector<std::vector<uint8_t>> pages(page_bytes_.size());
  std::vector<uint8_t*> dst(page_bytes_.size());
  for (int s = 0; s < n_stages; ++s) {
    pages[s].resize(page_bytes_[s]);
    dst[s] = pages[s].data();
  }
  const PageId ids[] = {job.page};
  Status exported = pipeline_->ExportPages(ids, dst);
  if (!exported.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++export_errors_;
    }
    Log("block " + job.hash.ToHex() + " not persisted: " + exported.message());
    return;
  }
  std::vector<SnapshotSection> sections;
  for (int s = 0; s < n_stages; ++s) {
    if (page_bytes_[s] > 0) sections.push_back(KvPageSection(layout_, s, pages[s]));
  }
  SnapshotHeader header;
  header.layout = layout_fingerprint_;
  header.block_hash = job.hash;
  header.parent_hash = job.parent;
  header.n_tokens = layout_.page_tokens;
  Result<std::vector<uint8_t>> bytes = EncodeSnapshot(header, sections);
  if (!bytes.ok()) {
    Log("block " + job.hash.ToHex() + " not persisted: " + bytes.status().message());
    return;
  }
  (void)store_->Put(job.hash, std::move(bytes).value());  // a drop is counted by the store
  // One file at a time: a slow disk backs up into this queue (bounded, in pages the engine
  // can wait for) rather than into the store's, whose overflow would drop a block and cut
  // the chain on disk there.
  store_->Flush();
}

Status SchedulerDiskCache::Load(const BlockHash& hash, PageId page) {
  Status loaded = LoadChecked(hash, page);
  if (!loaded.ok() && loaded.code() != StatusCode::kNotFound) {
    Log("block " + hash.ToHex() + " not loaded (prefilling from there): " + loaded.message());
  }
  return loaded;
}

Status SchedulerDiskCache::LoadChecked(const BlockHash& hash, PageId page) {
  // DiskStore::Get logs and deletes a file that fails validation.
  SHARDLM_ASSIGN_OR_RETURN(LoadedSnapshot loaded, store_->Get(hash));
  const int n_stages = int(page_bytes_.size());
  std::vector<const uint8_t*> src(page_bytes_.size(), nullptr);
  for (const SnapshotSection& section : loaded.snapshot.sections) {
    if (section.kind != SectionKind::kKvPage) continue;
    const int s = section.stage_idx;
    Status checked =
        s >= 0 && s < n_stages
            ? CheckKvPageSection(layout_, s, section)
            : InvalidData("kv_page section of stage {} (the pipeline has {})", s, n_stages);
    if (checked.ok() && section.bytes.size() != page_bytes_[s]) {
      checked = InvalidData("stage {}'s section has {} bytes, its pages {}", s,
                            section.bytes.size(), page_bytes_[s]);
    }
    if (!checked.ok()) {
      store_->Discard(hash, checked.message(), loaded.generation);
      return checked;
    }
    src[s] = section.bytes.data();
  }
  static const uint8_t kNoBytes = 0;  // a stage whose pages hold nothing (no KV layers)
  for (int s = 0; s < n_stages; ++s) {
    if (page_bytes_[s] == 0) src[s] = &kNoBytes;
    if (src[s] == nullptr) {
      Status missing = InvalidData("the file has no kv_page section for stage {}", s);
      store_->Discard(hash, missing.message(), loaded.generation);
      return missing;
    }
  }
  const PageId ids[] = {page};
  return pipeline_->ImportPages(ids, src);
}

BlockHash SchedulerDiskCache::SelectionKeyOf(const BlockHash& hash) const {
  return ChainBlockHash(hash, {}, layout_fingerprint_);
}

bool SchedulerDiskCache::ContainsSelection(const BlockHash& hash) const {
  return store_->Contains(SelectionKeyOf(hash));
}

void SchedulerDiskCache::PersistSelection(const BlockHash& hash, const PageSelection& selection) {
  std::vector<uint8_t> storage;
  const SnapshotSection sections[] = {PageSelectionSection(selection, &storage)};
  SnapshotHeader header;
  header.layout = layout_fingerprint_;
  header.block_hash = SelectionKeyOf(hash);
  header.parent_hash = hash;
  header.n_tokens = selection.n_pages() * layout_.page_tokens;
  Result<std::vector<uint8_t>> bytes = EncodeSnapshot(header, sections);
  if (!bytes.ok()) {
    Log("page selection of block " + hash.ToHex() + " not persisted: " + bytes.status().message());
    return;
  }
  (void)store_->Put(header.block_hash, std::move(bytes).value());
}

Result<PageSelection> SchedulerDiskCache::LoadSelection(const BlockHash& hash) {
  const BlockHash key = SelectionKeyOf(hash);
  SHARDLM_ASSIGN_OR_RETURN(LoadedSnapshot loaded, store_->Get(key));
  const std::vector<SnapshotSection>& sections = loaded.snapshot.sections;
  Result<PageSelection> selection =
      sections.size() == 1 ? DecodePageSelectionSection(sections[0])
                           : Result<PageSelection>(InvalidData(
                                 "a page selection file with {} sections", sections.size()));
  if (!selection.ok()) store_->Discard(key, selection.status().message(), loaded.generation);
  return selection;
}

// Two steps of no tokens from the block: neither a real block (those have tokens) nor the
// selection's key (one step).
BlockHash SchedulerDiskCache::StateKeyOf(const BlockHash& hash) const {
  return ChainBlockHash(SelectionKeyOf(hash), {}, layout_fingerprint_);
}

bool SchedulerDiskCache::ContainsState(const BlockHash& hash) const {
  return store_->Contains(StateKeyOf(hash));
}

void SchedulerDiskCache::PersistState(const BlockHash& hash, int n_tokens,
                                      std::span<const uint8_t> state) {
  std::vector<SnapshotSection> sections;
  size_t offset = 0;
  for (size_t s = 0; s < layout_.stages.size(); ++s) {
    const size_t bytes = layout_.stages[s].state_bytes();
    if (bytes == 0) continue;
    if (offset + bytes > state.size()) break;  // refused below
    sections.push_back(RecurrentStateSection(layout_, int(s), state.subspan(offset, bytes)));
    offset += bytes;
  }
  SnapshotHeader header;
  header.layout = layout_fingerprint_;
  header.block_hash = StateKeyOf(hash);
  header.parent_hash = hash;
  header.n_tokens = n_tokens;
  Result<std::vector<uint8_t>> bytes =
      offset == state.size() && state.size() == pipeline_->state_bytes()
          ? EncodeSnapshot(header, sections)
          : Result<std::vector<uint8_t>>(InvalidArgument("{} state bytes, the stages hold {}",
                                                         state.size(), pipeline_->state_bytes()));
  if (!bytes.ok()) {
    Log("recurrent state of block " + hash.ToHex() + " not persisted: " + bytes.status().message());
    return;
  }
  (void)store_->Put(header.block_hash, std::move(bytes).value());
}

Result<std::vector<uint8_t>> SchedulerDiskCache::LoadState(const BlockHash& hash) {
  const BlockHash key = StateKeyOf(hash);
  SHARDLM_ASSIGN_OR_RETURN(LoadedSnapshot loaded, store_->Get(key));
  const std::vector<SnapshotSection>& sections = loaded.snapshot.sections;
  std::vector<uint8_t> state;
  Status status = Status::Ok();
  size_t next = 0;  // the next section to read
  for (size_t s = 0; s < layout_.stages.size() && status.ok(); ++s) {
    if (layout_.stages[s].state_bytes() == 0) continue;
    status = next < sections.size() ? CheckRecurrentStateSection(layout_, int(s), sections[next])
                                    : InvalidData("stage {}'s recurrent state is missing", s);
    if (!status.ok()) break;
    state.insert(state.end(), sections[next].bytes.begin(), sections[next].bytes.end());
    ++next;
  }
  if (status.ok() && next != sections.size()) {
    status =
        InvalidData("a recurrent state file with {} sections, {} expected", sections.size(), next);
  }
  if (!status.ok()) {
    store_->Discard(key, status.message(), loaded.generation);
    return status;
  }
  return state;
}

void SchedulerDiskCache::FillStats(EngineStats& stats) const {
  const DiskStoreStats disk = store_->stats();
  stats.kv_disk_bytes_read = disk.bytes_read;
  stats.kv_disk_bytes_written = disk.bytes_written;
  stats.kv_disk_files = disk.files;
  stats.kv_disk_bytes = disk.bytes_on_disk;
  stats.kv_disk_evicted_files = disk.evictions;
  stats.kv_disk_write_errors = disk.write_errors;
  stats.kv_disk_corrupt_files = disk.corrupt_files;
  std::lock_guard<std::mutex> lock(mu_);
  stats.kv_disk_dropped_writes = disk.dropped_writes + dropped_;
  stats.kv_disk_export_errors = export_errors_;
}

}  // namespace shardlm
