// AutomatonCache: the token automata (token_matcher.h) of the grammars requests ask for,
// kept so that requests with the same grammar (a client that sends the same schema or the
// same tools every turn) share its states and masks instead of walking the vocabulary
// again. Grammars are matched by fingerprint and then compared whole.
//
// Goals: bounded memory: at most `capacity` automata (least recently used go first), and
// an automaton that has grown past `max_bytes` is replaced by a fresh one for the next
// request (requests still running keep theirs).
// Non-goals: sharing between engines, or across vocabularies (one cache per vocabulary).
//
// Thread safety: one thread at a time (the engine thread), like the automata it hands out.
// Lifetime: holds the vocabulary; automata are shared with the matchers built on them.
#pragma once

#include <list>
#include <memory>

#include "grammar/grammar.h"
#include "grammar/token_matcher.h"
#include "grammar/token_vocabulary.h"

namespace shardlm::grammar {

class AutomatonCache {
 public:
  // 16 grammars: a server's usual mix of schemas and tool sets; 256 MiB each covers the
  // states and masks of any one schema many times over.
  explicit AutomatonCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t capacity = 16,
                          size_t max_bytes = size_t{256} << 20);

  // The automaton of `grammar`, shared with earlier requests of an equal grammar.
  std::shared_ptr<TokenAutomaton> Get(const std::shared_ptr<const Grammar>& grammar);
  const std::shared_ptr<const TokenVocabulary>& vocabulary() const { return vocabulary_; }
  size_t size() const { return entries_.size(); }

 private:
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  size_t capacity_;
  size_t max_bytes_;
  std::list<std::shared_ptr<TokenAutomaton>> entries_;  // most recently used first
};

}  // namespace shardlm::grammar
