// AutomatonCache: lookup by fingerprint, LRU order, size limits (see automaton_cache.h).
#include "grammar/automaton_cache.h"

#include "base/check.h"

namespace shardlm::grammar {

AutomatonCache::AutomatonCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t capacity,
                               size_t max_bytes)
    : vocabulary_(std::move(vocabulary)), capacity_(capacity), max_bytes_(max_bytes) {
  SHARDLM_CHECK(vocabulary_ != nullptr && capacity_ > 0);
}

std::shared_ptr<TokenAutomaton> AutomatonCache::Get(const std::shared_ptr<const Grammar>& grammar) {
  SHARDLM_CHECK(grammar != nullptr);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const Grammar& known = (*it)->grammar();
    if (known.fingerprint() != grammar->fingerprint() || !known.SameAs(*grammar)) continue;
    std::shared_ptr<TokenAutomaton> automaton = *it;
    entries_.erase(it);
    if (automaton->memory_bytes() > max_bytes_) {
      automaton = std::make_shared<TokenAutomaton>(automaton->grammar_ptr(), vocabulary_);
    }
    entries_.push_front(automaton);
    return automaton;
  }
  entries_.push_front(std::make_shared<TokenAutomaton>(grammar, vocabulary_));
  if (entries_.size() > capacity_) entries_.pop_back();
  return entries_.front();
}

}  // namespace shardlm::grammar
