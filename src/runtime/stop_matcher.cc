// StopMatcher implementation: earliest match over all stop strings, then hold back the
// longest tail that is still a prefix of one (see stop_matcher.h).
#include "runtime/stop_matcher.h"

#include <algorithm>

namespace shardlm {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  if (stops_.empty()) return std::string(text);
  // Only the held tail plus the new text can contain a new match: everything released
  // earlier was proven not to start one.
  held_.append(text);
  size_t best = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at < best) {
      best = at;
      matched_ = stop;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  const size_t keep = HeldPrefixLength();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

size_t StopMatcher::HeldPrefixLength() const {
  size_t best = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, held_.size());
    for (size_t len = max_len; len > best; --len) {
      if (std::string_view(held_).substr(held_.size() - len) ==
          std::string_view(stop).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace shardlm
