// Pager: resident sets, frames and moves of a bounded KV pool (see pager.h).
#include "kv/pager.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <tuple>
#include <utility>

#include "base/check.h"
#include "base/elapsed.h"

namespace shardlm {

const char* PageSelectName(PageSelect select) { return select == PageSelect::kQk ? "qk" : "lru"; }

Result<PageSelect> ParsePageSelect(const std::string& name) {
  if (name == "qk") return PageSelect::kQk;
  if (name == "lru") return PageSelect::kLru;
  return InvalidArgument("--kv-select '{}' is not 'qk' or 'lru'", name);
}

Status PagerConfig::Validate() const {
  if (page_tokens <= 0 || n_slots <= 0 || n_pages <= 0) {
    return InvalidArgument("KV pool: bad geometry ({} pages of {} positions, {} slots)", n_pages,
                           page_tokens, n_slots);
  }
  if (pool.pool_tokens <= 0 || pool.sink_tokens < 0 || pool.tail_tokens < 0 ||
      pool.reselect_tokens <= 0) {
    return InvalidArgument(
        "--kv-pool {} / --kv-sink {} / --kv-tail {} / --kv-reselect {}: the pool and the "
        "reselect interval must be positive, the sink and tail not negative",
        pool.pool_tokens, pool.sink_tokens, pool.tail_tokens, pool.reselect_tokens);
  }
  if (pool_pages() < min_pool_pages()) {
    return InvalidArgument(
        "--kv-pool {} ({} pages of {} positions) cannot hold --kv-sink {} + --kv-tail {} + the "
        "pages a batch writes: it needs at least {} pages ({} positions)",
        pool.pool_tokens, pool_pages(), page_tokens, pool.sink_tokens, pool.tail_tokens,
        min_pool_pages(), min_pool_pages() * page_tokens);
  }
  return Status::Ok();
}

Result<std::unique_ptr<Pager>> Pager::Create(const PagerConfig& config) {
  SHARDLM_TRY(config.Validate());
  return std::unique_ptr<Pager>(new Pager(config));
}

Pager::Pager(const PagerConfig& config)
    : config_(config),
      pool_pages_(config.pool_pages()),
      slots_(size_t(config.n_slots)),
      frame_of_(size_t(config.n_pages), kNoPage),
      refs_(size_t(config.n_pages), 0),
      free_sent_(size_t(config.n_pages), 0) {
  // Frame 0 is handed out first.
  for (int f = config.n_frames() - 1; f >= 0; --f) free_frames_.push_back(f);
}

namespace {

// The logical pages `ranges` of positions cover, ascending, once each.
std::vector<int32_t> PagesOf(std::span<const std::pair<int32_t, int32_t>> ranges, int page_tokens) {
  std::vector<int32_t> pages;
  for (const auto& [begin, end] : ranges) {
    for (int i = begin / page_tokens; end > begin && i <= (end - 1) / page_tokens; ++i) {
      pages.push_back(i);
    }
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  return pages;
}

}  // namespace

void Pager::BeginSequence(int slot, const PageSelection* from, int n_pages) {
  SlotPages& s = slots_[slot];
  const int recorded = from == nullptr ? 0 : std::min(from->n_pages(), n_pages);
  constexpr float kUnscored = -std::numeric_limits<float>::infinity();
  s.scores.assign(size_t(n_pages), kUnscored);
  s.last_use.assign(size_t(n_pages), 0);
  // Recency stamps above every stamp given so far, in the record's order, then the pages
  // past the record in position order.
  for (int i = 0; i < n_pages; ++i) {
    const uint64_t rank = i < recorded ? uint64_t(from->recency[i]) : uint64_t(i);
    s.last_use[i] = clock_ + 1 + rank;
    if (i < recorded) s.scores[i] = from->scores[i];
  }
  clock_ += uint64_t(std::max(n_pages, recorded)) + 1;
  s.fresh_scores = false;
  s.adopting = true;
  s.page_ins = 0;
  s.decodes_since_scores = std::numeric_limits<int>::max() / 2;
}

PageSelection Pager::Record(int slot, int n_pages) const {
  const SlotPages& s = slots_[slot];
  PageSelection record;
  record.scores.assign(size_t(n_pages), -std::numeric_limits<float>::infinity());
  std::vector<int32_t> order(static_cast<size_t>(n_pages));
  for (int i = 0; i < n_pages; ++i) {
    order[i] = i;
    if (i < int(s.scores.size())) record.scores[i] = s.scores[i];
  }
  auto stamp = [&](int32_t i) { return i < int(s.last_use.size()) ? s.last_use[i] : 0; };
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return stamp(a) < stamp(b); });
  record.recency.assign(size_t(n_pages), 0);
  for (int r = 0; r < n_pages; ++r) record.recency[order[r]] = r;
  return record;
}

void Pager::SetPins(int slot, std::span<const std::pair<int32_t, int32_t>> ranges) {
  slots_[slot].pinned = PagesOf(ranges, config_.page_tokens);
}

int Pager::PinnedPages(std::span<const std::pair<int32_t, int32_t>> ranges) const {
  return int(PagesOf(ranges, config_.page_tokens).size());
}

std::vector<std::pair<int32_t, int32_t>> Pager::WithPrefixPin(
    std::vector<std::pair<int32_t, int32_t>> ranges, int32_t prefix_end) const {
  const int pt = config_.page_tokens;
  const int room = pool_pages_ - config_.min_pool_pages();
  // The largest prefix of whole pages (the last one partial when prefix_end is) that fits.
  int32_t end = prefix_end;
  while (end > 0) {
    ranges.emplace_back(0, end);
    const bool fits = PinnedPages(ranges) <= room;
    ranges.pop_back();
    if (fits) break;
    end = (end - 1) / pt * pt;  // one page less
  }
  if (end > 0) ranges.emplace_back(0, end);
  return ranges;
}

int Pager::MaxWrite(int slot, int begin, int wanted) const {
  const int pt = config_.page_tokens;
  const int end = begin + wanted;
  if ((end + pt - 1) / pt <= pool_pages_) return wanted;
  // What Prepare requires for a write starting at `begin` (its first page included), counted
  // by the same rule; pins past that page count too, as they will be required once written.
  const int w0 = begin / pt;
  std::vector<uint8_t> need(size_t(w0) + 1, 0);
  Required(begin, begin + 1, w0 + 1, &need);
  int required = 0;
  for (int32_t i : slots_[slot].pinned) {
    if (i <= w0) {
      need[i] |= 1;
    } else {
      ++required;
    }
  }
  for (uint8_t n : need) required += n & 1;
  const int extra_pages = std::max(0, pool_pages_ - required);
  const int max_end = (w0 + 1 + extra_pages) * pt;
  return std::max(1, std::min(wanted, max_end - begin));
}

void Pager::Required(int begin, int end, int n_pages, std::vector<uint8_t>* need) const {
  const int pt = config_.page_tokens;
  auto mark = [&](int first, int last) {
    for (int i = std::max(0, first); i <= std::min(last, n_pages - 1); ++i) (*need)[i] |= 1;
  };
  mark(0, config_.sink_pages() - 1);
  if (begin > 0) mark(std::max(0, begin - config_.pool.tail_tokens) / pt, (begin - 1) / pt);
  if (end > begin) mark(begin / pt, (end - 1) / pt);
}

bool Pager::Ref(PageId page) {
  if (refs_[page]++ > 0) return false;
  SHARDLM_CHECK_MSG(!free_frames_.empty(), "KV pool: no free frame for page %d", page);
  const PageId frame = free_frames_.back();
  free_frames_.pop_back();
  frame_of_[page] = frame;
  pending_.maps.push_back({page, frame});
  ++stats_.pages_mapped;
  return true;
}

void Pager::Unref(PageId page) {
  SHARDLM_CHECK(refs_[page] > 0);
  if (--refs_[page] > 0) return;
  free_frames_.push_back(frame_of_[page]);
  frame_of_[page] = kNoPage;
  pending_.evicts.push_back(page);
  ++stats_.pages_evicted;
}

Status Pager::Prepare(int slot, std::span<const PageId> pages, int begin, int end) {
  const auto started = std::chrono::steady_clock::now();
  SlotPages& s = slots_[slot];
  const int n = int(pages.size());
  const int pt = config_.page_tokens;
  s.last_use.resize(size_t(n), 0);
  s.scores.resize(size_t(n), -std::numeric_limits<float>::infinity());
  for (int i = begin / pt; end > begin && i <= (end - 1) / pt && i < n; ++i) {
    s.last_use[i] = ++clock_;
  }
  // need_[i]: 0 out, 1 required, 2 chosen; bit 4: resident for the slot before this batch.
  need_.assign(size_t(n), 0);
  for (size_t k = 0; k < s.attended.size(); ++k) {
    const int i = s.attended[k];
    if (i < n && pages[i] == s.ids[k]) need_[i] |= 4;
  }
  const bool adopting = std::exchange(s.adopting, false);
  if (n <= pool_pages_) {
    for (int i = 0; i < n; ++i) need_[i] |= 1;
  } else {
    Required(begin, end, n, &need_);
    for (int32_t i : s.pinned) {
      if (i < n) need_[i] |= 1;
    }
    int n_required = 0;
    for (int i = 0; i < n; ++i) n_required += (need_[i] & 1);
    if (n_required > pool_pages_) {
      return OutOfRange(
          "KV pool: positions [{}, {}) with --kv-sink {}, --kv-tail {} and {} pinned pages "
          "need {} pages resident, the pool holds {}",
          begin, end, config_.pool.sink_tokens, config_.pool.tail_tokens, s.pinned.size(),
          n_required, pool_pages_);
    }
    const int room = pool_pages_ - n_required;
    std::vector<int32_t>& candidates = candidates_;
    candidates.clear();
    const bool reselect = config_.pool.select == PageSelect::kQk && s.fresh_scores;
    const bool choose_all = reselect || adopting;
    for (int i = 0; i < n; ++i) {
      if ((need_[i] & 1) == 0 && (choose_all || (need_[i] & 4) != 0)) candidates.push_back(i);
    }
    constexpr float kInf = std::numeric_limits<float>::infinity();
    // Higher keeps: the score (unscored pages, newer than the last scoring, rank above every
    // scored one between reselections), then recency, then position.
    auto keep_key = [&](int32_t i) {
      const float score = s.scores[i];
      const bool scored = score > -kInf;
      return std::make_tuple(scored || reselect ? score : kInf, s.last_use[i], i);
    };
    std::sort(candidates.begin(), candidates.end(),
              [&](int32_t a, int32_t b) { return keep_key(a) > keep_key(b); });
    if (int(candidates.size()) > room) candidates.resize(size_t(room));
    for (int32_t i : candidates) need_[i] |= 2;
    if (reselect) {
      s.fresh_scores = false;
      ++stats_.reselects;
    }
  }
  // Out first (their frames serve the pages coming in), then in.
  for (size_t k = 0; k < s.attended.size(); ++k) {
    const int i = s.attended[k];
    if (i >= n || pages[i] != s.ids[k] || (need_[i] & 3) == 0) Unref(s.ids[k]);
  }
  s.attended.clear();
  s.ids.clear();
  for (int i = 0; i < n; ++i) {
    if ((need_[i] & 3) == 0) continue;
    if ((need_[i] & 4) == 0) {
      if (Ref(pages[i]) && i * pt < begin) ++s.page_ins;
      s.last_use[i] = std::max(s.last_use[i], ++clock_);
    }
    s.attended.push_back(i);
    s.ids.push_back(pages[i]);
  }
  stats_.select_seconds += SecondsSince(started);
  return Status::Ok();
}

bool Pager::WantsScores(int slot, int n_pages, bool prompt_end) {
  if (config_.pool.select != PageSelect::kQk || n_pages <= pool_pages_) return false;
  SlotPages& s = slots_[slot];
  if (!prompt_end && ++s.decodes_since_scores < config_.pool.reselect_tokens) return false;
  s.decodes_since_scores = 0;
  return true;
}

void Pager::SetScores(int slot, std::span<const float> scores) {
  SlotPages& s = slots_[slot];
  s.scores.assign(scores.begin(), scores.end());
  s.fresh_scores = true;
}

void Pager::OnPageFreed(PageId page) {
  for (SlotPages& s : slots_) {
    for (size_t k = 0; k < s.ids.size(); ++k) {
      if (s.ids[k] != page) continue;
      s.ids.erase(s.ids.begin() + ptrdiff_t(k));
      s.attended.erase(s.attended.begin() + ptrdiff_t(k));
      break;
    }
  }
  refs_[page] = 0;
  if (frame_of_[page] != kNoPage) {
    free_frames_.push_back(frame_of_[page]);
    frame_of_[page] = kNoPage;
  }
  std::erase(pending_.evicts, page);
  std::erase_if(pending_.maps, [&](const PageFrame& m) { return m.page == page; });
  pending_.frees.push_back(page);
}

void Pager::Reset() {
  for (SlotPages& s : slots_) s = SlotPages();
  std::fill(frame_of_.begin(), frame_of_.end(), kNoPage);
  std::fill(refs_.begin(), refs_.end(), 0);
  free_frames_.clear();
  for (int f = config_.n_frames() - 1; f >= 0; --f) free_frames_.push_back(f);
  pending_.clear();
  for (PageId page = 0; page < config_.n_pages; ++page) pending_.frees.push_back(page);
}

bool Pager::ReadyToImport(PageId page, uint64_t collected) {
  if (collected < free_sent_[size_t(page)]) return false;
  std::erase(pending_.frees, page);
  return true;
}

void Pager::ClearPending(uint64_t batch) {
  for (PageId page : pending_.frees) free_sent_[size_t(page)] = batch;
  pending_.clear();
}

PagerStats Pager::Stats() const {
  PagerStats stats = stats_;
  stats.frames_used = config_.n_frames() - int(free_frames_.size());
  for (const SlotPages& s : slots_) stats.pinned_pages += int(s.pinned.size());
  return stats;
}

}  // namespace shardlm
