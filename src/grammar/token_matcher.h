// Token-level matching of a grammar: which tokens of a vocabulary may come next, and the
// state after one of them.
//
// TokenAutomaton joins a grammar's byte automaton (byte_automaton.h) to a vocabulary's
// trie (token_vocabulary.h). The tokens allowed in an automaton state are found by one
// depth-first walk of the trie, each node one table read of the automaton (a dead prefix
// skips its subtree), and kept per state: JSON output returns to the same states again
// and again (inside a string, between members), so after the first few steps a mask is a
// copy. TokenMatcher is one request's position in the grammar.
//
// The mask of a state: every token whose bytes the grammar accepts from that state (a
// valid prefix of some sentence), plus the end-of-generation tokens when the text so far
// is a complete sentence. Control, unused and empty tokens are never in it.
//
// Goals: a mask that is exact (never allows a token that leads nowhere: Build drops rules
// that cannot finish, so every accepted prefix can be completed); bounded memory (masks
// past kMaxMaskBytes are dropped and recomputed when asked for again).
// Non-goals: speculative or batched masks, rollback of accepted tokens.
//
// Thread safety: a TokenAutomaton (and so every TokenMatcher over it) is used by one
// thread at a time; the engine shares one between requests of the same grammar on its
// own thread. Lifetime: shared_ptr; matchers keep their automaton alive.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/byte_automaton.h"
#include "grammar/grammar.h"
#include "grammar/token_vocabulary.h"

namespace shardlm::grammar {

// Words of a token mask over n_vocab tokens: bit (id % 64) of word id / 64.
inline size_t MaskWords(int32_t n_vocab) { return (size_t(n_vocab) + 63) / 64; }
inline bool MaskHas(std::span<const uint64_t> mask, TokenId id) {
  return (mask[size_t(id) >> 6] >> (id & 63)) & 1;
}

// Cached masks past this many bytes are dropped (a Qwen3 mask is 19 KiB: about 3400 of
// them, far more than the states one schema visits).
inline constexpr size_t kMaxMaskBytes = size_t{64} << 20;

class TokenAutomaton {
 public:
  using StateId = ByteAutomaton::StateId;
  TokenAutomaton(std::shared_ptr<const Grammar> grammar,
                 std::shared_ptr<const TokenVocabulary> vocabulary);

  ByteAutomaton& bytes() { return bytes_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  const Grammar& grammar() const { return bytes_.grammar(); }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return bytes_.grammar_ptr(); }

  // The tokens allowed in `state` (MaskWords(n_vocab) words), computed on first use. Valid
  // until the next call.
  std::span<const uint64_t> Mask(StateId state);
  // How many tokens the mask of `state` allows.
  int32_t MaskCount(StateId state);

  size_t memory_bytes() const { return bytes_.memory_bytes() + mask_bytes_; }
  int64_t masks_computed() const { return masks_computed_; }

 private:
  struct CachedMask {
    std::vector<uint64_t> words;
    int32_t count = 0;
  };
  const CachedMask& Lookup(StateId state);
  void Compute(StateId state, CachedMask& out);

  ByteAutomaton bytes_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::unordered_map<StateId, CachedMask> masks_;
  size_t mask_bytes_ = 0;
  int64_t masks_computed_ = 0;
  std::vector<StateId> walk_states_;  // [depth] scratch of Compute
};

// One request's position in a grammar.
class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<TokenAutomaton> automaton);

  // Writes the allowed tokens into `mask` (MaskWords(n_vocab) words); returns how many.
  int32_t FillMask(std::span<uint64_t> mask);
  // Moves past `token`; false (and no move) when the grammar does not allow it. An
  // end-of-generation token is accepted when the grammar may end, and changes nothing.
  bool Accept(TokenId token);
  // The text so far is a complete sentence (an end-of-generation token may come now).
  bool CanEnd() const { return automaton_->bytes().CanEnd(state_); }
  // Complete, and nothing may follow: the request is done.
  bool IsComplete() const { return automaton_->bytes().IsComplete(state_); }
  const TokenAutomaton& automaton() const { return *automaton_; }

 private:
  std::shared_ptr<TokenAutomaton> automaton_;
  ByteAutomaton::StateId state_;
};

}  // namespace shardlm::grammar
