// PageResidency: frames, tier and summaries of a stage's bounded pool (see page_residency.h).
#include "kv/page_residency.h"

#include <chrono>
#include <cstring>

#include "base/check.h"
#include "base/elapsed.h"

namespace shardlm {

Result<std::unique_ptr<PageResidency>> PageResidency::Create(
    PagePool* frames, int n_pages, std::unique_ptr<KvTier> tier,
    std::unique_ptr<KeySummaries> summaries) {
  SHARDLM_CHECK(frames != nullptr && tier != nullptr);
  if (n_pages < frames->n_pages()) {
    return InvalidArgument("{} logical pages over {} frames: a pool larger than its pages", n_pages,
                           frames->n_pages());
  }
  if (tier->n_pages() != n_pages || tier->page_bytes() != frames->page_bytes()) {
    return InvalidArgument("KV tier of {} pages of {} bytes for {} pages of {} bytes",
                           tier->n_pages(), tier->page_bytes(), n_pages, frames->page_bytes());
  }
  if (summaries != nullptr && summaries->n_pages() != n_pages) {
    return InvalidArgument("key summaries of {} pages for {} pages", summaries->n_pages(), n_pages);
  }
  std::unique_ptr<PageResidency> residency(new PageResidency(frames, n_pages, std::move(tier)));
  residency->summaries_ = std::move(summaries);
  return residency;
}

PageResidency::PageResidency(PagePool* frames, int n_pages, std::unique_ptr<KvTier> tier)
    : frames_(frames),
      tier_(std::move(tier)),
      frame_of_(size_t(n_pages), kNoPage),
      page_in_(size_t(frames->n_pages()), kNoPage),
      dirty_(size_t(n_pages), 0),
      lost_(size_t(n_pages), 0) {}

Status PageResidency::CheckPage(PageId page) const {
  if (page < 0 || page >= n_pages()) {
    return InvalidArgument("page {} is outside the KV pages [0, {})", page, n_pages());
  }
  return Status::Ok();
}

Status PageResidency::Apply(const PagingOps& ops, PagingLoss* loss) {
  for (PageId page : ops.frees) SHARDLM_TRY(CheckPage(page));
  for (PageId page : ops.evicts) SHARDLM_TRY(CheckPage(page));
  for (const PageFrame& map : ops.maps) {
    SHARDLM_TRY(CheckPage(map.page));
    if (map.frame < 0 || map.frame >= frames_->n_pages()) {
      return InvalidArgument("frame {} is outside the pool's [0, {})", map.frame,
                             frames_->n_pages());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (PageId page : ops.frees) Free(page);
  for (PageId page : ops.evicts) {
    if (frame_of_[page] == kNoPage) {
      return InvalidArgument("evicting page {}, which is not resident", page);
    }
    Evict(page, loss);
  }
  for (const PageFrame& map : ops.maps) SHARDLM_TRY(Map(map.page, map.frame, loss));
  return Status::Ok();
}

void PageResidency::Lose(PageId page, const Status& why, PagingLoss* loss) {
  lost_[page] = 1;
  loss->Add(page, why);
}

void PageResidency::Free(PageId page) {
  const PageId frame = frame_of_[page];
  if (frame != kNoPage) page_in_[frame] = kNoPage;
  frame_of_[page] = kNoPage;
  dirty_[page] = 0;
  lost_[page] = 0;
  tier_->Drop(page);
  if (summaries_) summaries_->Forget(page);
}

Status PageResidency::Move(bool out, PageId page, PageId frame) {
  const auto start = std::chrono::steady_clock::now();
  uint8_t* bytes = frames_->page_data(frame);
  SHARDLM_TRY(out ? tier_->Write(page, bytes) : tier_->Read(page, bytes));
  ++(out ? stats_.page_outs : stats_.page_ins);
  stats_.bytes_paged += frames_->page_bytes();
  stats_.paging_seconds += SecondsSince(start);
  return Status::Ok();
}

void PageResidency::Evict(PageId page, PagingLoss* loss) {
  const PageId frame = frame_of_[page];
  if ((dirty_[page] || !tier_->Holds(page)) && !lost_[page]) {
    Status moved = Move(true, page, frame);
    if (!moved.ok()) {
      tier_->Drop(page);  // what it holds of the page is older than the frame was
      Lose(page, moved, loss);
    }
  }
  dirty_[page] = 0;
  frame_of_[page] = kNoPage;
  page_in_[frame] = kNoPage;
}

Status PageResidency::Map(PageId page, PageId frame, PagingLoss* loss) {
  if (frame_of_[page] == frame) return Status::Ok();
  if (frame_of_[page] != kNoPage) {
    return InvalidArgument("page {} is already in frame {}", page, frame_of_[page]);
  }
  if (page_in_[frame] != kNoPage) {
    return InvalidArgument("frame {} still holds page {}", frame, page_in_[frame]);
  }
  if (lost_[page]) {
    loss->Add(page, IoError("KV page {} was lost by an earlier tier failure", page));
  } else if (tier_->Holds(page)) {
    Status moved = Move(false, page, frame);
    if (!moved.ok()) Lose(page, moved, loss);
    dirty_[page] = 0;
  } else {
    dirty_[page] = 1;  // a new page: nothing to read, written next
  }
  frame_of_[page] = frame;
  page_in_[frame] = page;
  return Status::Ok();
}

Status PageResidency::Copy(PageId src, PageId dst, PagingLoss* loss) {
  SHARDLM_TRY(CheckPage(src));
  SHARDLM_TRY(CheckPage(dst));
  std::lock_guard<std::mutex> lock(mu_);
  const PageId dst_frame = frame_of_[dst];
  if (dst_frame == kNoPage) return InvalidArgument("copy-on-write into page {}, not resident", dst);
  if (lost_[src]) {
    Lose(dst, IoError("copy-on-write from KV page {}, lost by a tier failure", src), loss);
  } else if (frame_of_[src] != kNoPage) {
    frames_->CopyPage(frame_of_[src], dst_frame);
  } else if (Status moved = Move(false, src, dst_frame); !moved.ok()) {
    Lose(dst, moved, loss);
  }
  dirty_[dst] = 1;
  if (summaries_) summaries_->Copy(src, dst);
  return Status::Ok();
}

Status PageResidency::Frames(std::span<const PageId> pages, AttendedPages attended,
                             std::vector<PageId>* frames) const {
  frames->assign(pages.size(), kNoPage);
  auto place = [&](size_t i) -> Status {
    if (i >= pages.size()) {
      return InvalidArgument("attended page {} is past the sequence's {} pages", i, pages.size());
    }
    SHARDLM_TRY(CheckPage(pages[i]));
    const PageId frame = frame_of_[pages[i]];
    if (frame == kNoPage) {
      return InvalidArgument("logical page {} (page {}) is read but not resident", i, pages[i]);
    }
    (*frames)[i] = frame;
    return Status::Ok();
  };
  if (attended.empty()) {
    for (size_t i = 0; i < pages.size(); ++i) SHARDLM_TRY(place(i));
  } else {
    for (int32_t i : attended) SHARDLM_TRY(place(size_t(i)));
  }
  return Status::Ok();
}

Status PageResidency::Export(std::span<const PageId> pages, uint8_t* dst) {
  for (PageId page : pages) SHARDLM_TRY(CheckPage(page));
  std::lock_guard<std::mutex> lock(mu_);
  const size_t bytes = frames_->page_bytes();
  for (size_t i = 0; i < pages.size(); ++i) {
    if (lost_[pages[i]]) {
      return IoError("KV page {} was lost by a tier failure: not exported", pages[i]);
    }
    const PageId frame = frame_of_[pages[i]];
    if (frame != kNoPage) {
      std::memcpy(dst + i * bytes, frames_->page_data(frame), bytes);
    } else {
      SHARDLM_TRY(tier_->Read(pages[i], dst + i * bytes));
    }
  }
  return Status::Ok();
}

Status PageResidency::Import(std::span<const PageId> pages, const uint8_t* src) {
  for (PageId page : pages) SHARDLM_TRY(CheckPage(page));
  std::lock_guard<std::mutex> lock(mu_);
  const size_t bytes = frames_->page_bytes();
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageId page = pages[i];
    Free(page);  // whatever the page held before (the pager sent no free for it)
    SHARDLM_TRY(tier_->Write(page, src + i * bytes));
    if (summaries_) summaries_->Rebuild(page, src + i * bytes, *frames_, frames_->page_tokens());
  }
  return Status::Ok();
}

ResidencyStats PageResidency::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ResidencyStats stats = stats_;
  stats.tier_pages = tier_->pages_stored();
  stats.resident_pages = 0;
  for (PageId page : page_in_) stats.resident_pages += page != kNoPage;
  return stats;
}

}  // namespace shardlm
