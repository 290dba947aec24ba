// KvTier: where a stage keeps the KV pages that are not resident in its pool (`--kv-tier`).
//
// A page is stored under its logical page id, page_bytes() bytes, exactly as the pool held
// it, so moving it out and back in is bit-exact. Two kinds:
//  - `ram`: a heap block per stored page (freed when the page is dropped).
//  - `file:DIR`: one file per stage in DIR, a page at offset page × page_bytes, written
//    with pwrite and read with pread. The file is sparse: only stored pages take disk, and a
//    dropped page's range is given back (a hole is punched). The stage's resident memory
//    stays the pool's frames however long the context: a context larger than RAM works.
//    The file is created 0600 in a 0700 folder, removed when the tier closes, and named
//    after the process and stage so several stages and servers can share DIR. Each page's
//    xxh3-64 is kept in memory and checked on every read: a file truncated (its holes read
//    as zeros) or written by someone else is an error, never a wrong page. A file removed
//    while open keeps working (the tier holds its descriptor).
//
// Goals: bit-exact page-out and page-in; a full disk, a truncated or removed file is a
// Status naming the file and the page, never a crash or a silently wrong page.
// Non-goals: deciding what moves (kv/pager.h), compression, persistence across restarts
// (the prefix cache's disk store does that).
//
// Thread safety: not thread-safe; the stage's PageResidency serializes calls.
// Lifetime: the file lives as long as the tier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "kv/page_pool.h"

namespace shardlm {

// What `--kv-tier` asked for (KvTierSpec, page_pool.h): "ram" or "file:DIR".
Result<KvTierSpec> ParseKvTierSpec(const std::string& text);
std::string KvTierSpecName(const KvTierSpec& spec);  // "ram" | "file:DIR"

class KvTier {
 public:
  virtual ~KvTier() = default;
  // Stores page_bytes() bytes as `page` (replacing what it held).
  virtual Status Write(PageId page, const uint8_t* bytes) = 0;
  // Reads `page` back; NotFound when the tier does not hold it.
  virtual Status Read(PageId page, uint8_t* bytes) = 0;
  // Forgets `page` (no-op when absent).
  virtual void Drop(PageId page) = 0;
  virtual bool Holds(PageId page) const = 0;
  size_t page_bytes() const { return page_bytes_; }
  int n_pages() const { return n_pages_; }
  int64_t pages_stored() const { return pages_stored_; }
  // Where the pages live, for messages: "ram" or the file's path.
  virtual std::string where() const = 0;

 protected:
  KvTier(int n_pages, size_t page_bytes) : n_pages_(n_pages), page_bytes_(page_bytes) {}
  int n_pages_;
  size_t page_bytes_;
  int64_t pages_stored_ = 0;
};

// A tier for pages [0, n_pages) of page_bytes each. `name` tells stages apart in a file
// tier's file name (e.g. "stage1"). Errors: the folder cannot be made or the file created.
Result<std::unique_ptr<KvTier>> CreateKvTier(const KvTierSpec& spec, int n_pages, size_t page_bytes,
                                             const std::string& name);

}  // namespace shardlm
