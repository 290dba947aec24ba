// SlotFile: one slot's saved sequence (`POST /slots/{id}?action=save`) — its token ids, every
// stage's KV pages and, for a model with recurrent layers, every stage's recurrent state — as a
// snapshot file of kind kSlot (snapshot_file.h: magic "SHLMSLOT", the header, checksummed
// sections), so a slot file is validated exactly like a cache block and neither is ever read as
// the other.
//
// Contents (header n_tokens = the sequence's length n; block and parent hash zero; format
// version 2), sections in this order:
//   tokens:          dtype i32, dims {n}, stage 0, layers [0, 0): the token ids of positions
//                    [0, n)
//   page_selection:  (only when saved under a bounded KV pool) dims {ceil(n / page_tokens), 2}:
//                    the pool's memory of the sequence's pages (kv/paging.h), so a restored
//                    sequence resumes with the same resident pages
//   kv_page:         one per stage with KV layers, in pipeline order (a stage of recurrent
//                    layers only has pages of no bytes and no section, as in cache blocks),
//                    dims {page_tokens, n_kv_heads, head_dim, ceil(n / page_tokens)}: the
//                    stage's pages of the sequence back to back; positions at or past n in the
//                    last page are whatever the pool held (never read as KV)
//   recurrent_state: one per stage with recurrent layers, in pipeline order, when the sequence
//                    has a whole page (snapshot_layout.h RecurrentStateSection: the section the
//                    disk tier keeps beside a block): the stage's state after positions
//                    [0, floor(n / page_tokens) × page_tokens), its last whole page. A state
//                    resumes a sequence only where it was taken and whole pages are what the
//                    prefix cache shares, so the tokens after that page are recomputed by the
//                    next turn, as after a prefix-cache hit.
// and nothing else. The header's layout fingerprint covers the model, the split into
// stages, the page geometry and the KV type (snapshot_layout.h): a file saved under any
// other is refused, naming the mismatch.
// Versions: 1 had no recurrent_state sections (models with recurrent layers could not save),
// and is otherwise version 2: a version 1 file of a model without recurrent layers reads as
// ever, one of a model with them is refused (it lacks the state its pages need).
//
// A slot file is written and read a few pages at a time: a 128K-token sequence is
// gigabytes, so neither a save nor a restore may hold it whole. SlotFileWriter writes the
// header and tokens first, each stage's pages as they come (positional writes: the stages'
// sections are far apart), the state once it is exported, and each stage's descriptor last,
// once its payload checksum is known. SlotFileReader checks the header, every descriptor, the
// exact file size, the tokens and the state before a page is read, then hands out pages in
// order while it checksums them; Finish compares the checksums and padding, so no page may be
// used before Finish is ok. EncodeSlotFile and DecodeSlotFile are the same writer and reader
// over a buffer.
//
// Goals: one format with the cache blocks (no second container, and the disk tier's section
// for a recurrent state); every truncation, flipped byte or foreign file an InvalidData
// Status, never a crash or different data; memory bounded by the pages asked for at once and
// one sequence's recurrent state (a size the model fixes), whatever the file says.
// Non-goals: file I/O and folders (the callers pass positional read and write functions;
// atomic_file.h, private_folder.h), what a server does with the sequence
// (engine/scheduler_slots.cc).
//
// Thread safety: pure functions; a SlotFileWriter or SlotFileReader belongs to one thread
// at a time. Lifetime: a SlotImage's page views point into the bytes it was decoded from;
// the reader and writer keep their read and write functions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "cache/snapshot_layout.h"

struct XXH3_state_s;

namespace shardlm {

// A decoded slot file: token ids, per stage n_pages pages back to back, and the recurrent
// state at state_position.
struct SlotImage {
  std::vector<int32_t> tokens;
  std::optional<PageSelection> selection;
  int n_pages = 0;
  std::vector<std::span<const uint8_t>> stage_pages;  // [stage], views into the file (empty:
                                                      // a stage without KV layers)
  int32_t state_position = 0;                         // the sequence's last whole page ends here
  std::vector<uint8_t> state;  // every stage's state there, in stage order; empty: none
};

// The pages n tokens need: ceil(n / page_tokens).
int SlotPages(const SnapshotLayout& layout, int n_tokens);

// Where the parts of a slot file of n_tokens (>= 1) lie under a layout.
struct SlotFileGeometry {
  int n_tokens = 0;
  int n_pages = 0;
  bool has_selection = false;  // section 1 is a page_selection
  // The position the recurrent state is taken at: the end of the last whole page.
  int32_t state_position = 0;
  std::vector<uint64_t> page_bytes;         // [stage]: one page of that stage (0: no KV layers)
  std::vector<uint64_t> state_bytes;        // [stage]: its state in the file (0: none)
  std::vector<int> page_section;            // [stage]: its kv_page section, or -1
  std::vector<int> state_section;           // [stage]: its recurrent_state section, or -1
  std::vector<uint64_t> descriptor_offset;  // [section]
  std::vector<uint64_t> payload_offset;     // [section]
  uint64_t file_bytes = 0;
  size_t n_sections() const { return descriptor_offset.size(); }
  uint64_t selection_bytes() const { return uint64_t(n_pages) * 2 * sizeof(float); }
  // Every stage's state, in stage order (Pipeline::state_bytes()); 0: the file holds none.
  uint64_t total_state_bytes() const;
};
// InvalidData when n_tokens is out of range or the sizes overflow.
Result<SlotFileGeometry> SlotFileGeometryOf(const SnapshotLayout& layout, int n_tokens,
                                            bool has_selection = false);

// The exact size of the file of a sequence of n_tokens (>= 1) under `layout`.
uint64_t SlotFileBytes(const SnapshotLayout& layout, int n_tokens, bool has_selection = false);

struct Xxh3StateFree {
  void operator()(XXH3_state_s* state) const;
};
using Xxh3State = std::unique_ptr<XXH3_state_s, Xxh3StateFree>;

// Writes one slot file through positional writes; see the file comment.
class SlotFileWriter {
 public:
  using WriteAt = std::function<Status(uint64_t offset, std::span<const uint8_t> bytes)>;
  // Writes the header, the tokens section, the page selection (when given: one entry per
  // page of the sequence) and the stages' padding. InvalidArgument when tokens is empty or
  // the selection does not cover the sequence's pages; the write's error.
  static Result<SlotFileWriter> Start(const SnapshotLayout& layout, std::span<const int32_t> tokens,
                                      WriteAt write_at, const PageSelection* selection = nullptr);
  // The next n pages of every stage: src_by_stage[s] holds n pages of stage s back to back
  // (none for a stage without KV layers). InvalidArgument past the last page or for a wrong
  // number of stages.
  Status WritePages(int n, std::span<const uint8_t* const> src_by_stage);
  // The recurrent state at geometry().state_position: every stage's, in stage order
  // (Pipeline::ExportState's bytes), total_state_bytes() long. InvalidArgument when the
  // geometry has no state, for another size, or a second time.
  Status WriteState(std::span<const uint8_t> state);
  // Once every page (and the state, when the geometry has one) is written: the stage
  // descriptors. InvalidArgument before that.
  Status Finish();
  int pages_written() const { return pages_done_; }
  const SlotFileGeometry& geometry() const { return geometry_; }

 private:
  SlotFileWriter(const SnapshotLayout& layout, SlotFileGeometry geometry, WriteAt write_at);
  // The zero bytes after `length` payload bytes of `section`.
  Status WritePadding(size_t section, uint64_t length);
  SnapshotLayout layout_;
  SlotFileGeometry geometry_;
  WriteAt write_at_;
  std::vector<Xxh3State> checksums_;  // [stage]: over the pages written so far
  int pages_done_ = 0;
  bool state_done_ = false;
};

// Reads one slot file through positional reads; see the file comment.
class SlotFileReader {
 public:
  using ReadAt = std::function<Status(uint64_t offset, std::span<uint8_t> dst)>;
  // Checks everything but the pages' bytes: header, kind, version, layout, section count, a
  // sequence of at most max_tokens, file_bytes against the exact size, every descriptor, the
  // tokens (checksum, padding, ids >= 0) and the state (checksum, padding). InvalidData naming
  // what failed; read_at's error.
  static Result<SlotFileReader> Open(const SnapshotLayout& layout, uint64_t file_bytes,
                                     ReadAt read_at, int max_tokens);
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The page selection saved with the sequence, if any (validated by Open).
  const std::optional<PageSelection>& selection() const { return selection_; }
  // The recurrent state at geometry().state_position (validated by Open): every stage's, in
  // stage order; empty when the layout has no recurrent layers or the sequence no whole page.
  const std::vector<uint8_t>& state() const { return state_; }
  int n_pages() const { return geometry_.n_pages; }
  const SlotFileGeometry& geometry() const { return geometry_; }
  // The next n pages of every stage into dst_by_stage[s] (n pages of stage s back to back),
  // checksummed on the way; not to be trusted before Finish. InvalidArgument past the last
  // page or for a wrong number of stages.
  Status ReadPages(int n, std::span<uint8_t* const> dst_by_stage);
  // Once every page is read: each stage's payload checksum and zero padding.
  Status Finish();

 private:
  SlotFileReader(SlotFileGeometry geometry, ReadAt read_at);
  Status ReadSection(const SnapshotLayout& layout, size_t idx);
  SlotFileGeometry geometry_;
  ReadAt read_at_;
  std::vector<int32_t> tokens_;
  std::optional<PageSelection> selection_;
  std::vector<uint8_t> state_;
  std::vector<uint64_t> want_checksums_;  // [stage], from the descriptors
  std::vector<Xxh3State> checksums_;      // [stage]: over the pages read so far
  int pages_done_ = 0;
};

// The file bytes. `stage_pages[s]` holds stage s's SlotPages(n) pages; `state` the recurrent
// state at the last whole page (SlotFileWriter::WriteState), when the geometry has one.
// InvalidArgument when tokens is empty or a stage's bytes or the state do not match the
// layout.
Result<std::vector<uint8_t>> EncodeSlotFile(const SnapshotLayout& layout,
                                            std::span<const int32_t> tokens,
                                            std::span<const std::span<const uint8_t>> stage_pages,
                                            const PageSelection* selection = nullptr,
                                            std::span<const uint8_t> state = {});

// Validates every byte and checks that the file was saved under `layout`.
Result<SlotImage> DecodeSlotFile(std::span<const uint8_t> file, const SnapshotLayout& layout);

}  // namespace shardlm
