// TokenAutomaton and TokenMatcher: the trie walk that makes a state's mask, the mask
// cache, and a request's moves (see token_matcher.h).
#include "grammar/token_matcher.h"

#include <bit>
#include <cstring>

#include "base/check.h"

namespace shardlm::grammar {

TokenAutomaton::TokenAutomaton(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenVocabulary> vocabulary)
    : bytes_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {
  SHARDLM_CHECK(vocabulary_ != nullptr);
}

std::span<const uint64_t> TokenAutomaton::Mask(StateId state) { return Lookup(state).words; }

int32_t TokenAutomaton::MaskCount(StateId state) { return Lookup(state).count; }

const TokenAutomaton::CachedMask& TokenAutomaton::Lookup(StateId state) {
  auto it = masks_.find(state);
  if (it != masks_.end()) return it->second;
  const size_t bytes = MaskWords(vocabulary_->n_vocab()) * sizeof(uint64_t);
  if (mask_bytes_ + bytes > kMaxMaskBytes) {
    masks_.clear();
    mask_bytes_ = 0;
  }
  CachedMask& mask = masks_[state];
  Compute(state, mask);
  mask_bytes_ += bytes;
  return mask;
}

// Depth-first over the trie: walk_states_[d] is the automaton state after the first d
// bytes of the current node's path, so a node costs one transition from its parent's.
void TokenAutomaton::Compute(StateId state, CachedMask& out) {
  ++masks_computed_;
  const TokenVocabulary& v = *vocabulary_;
  out.words.assign(MaskWords(v.n_vocab()), 0);
  const std::span<const TokenVocabulary::Node> nodes = v.nodes();
  walk_states_.resize(1);
  walk_states_[0] = state;
  for (size_t i = 0; i < nodes.size();) {
    const TokenVocabulary::Node& node = nodes[i];
    const StateId next = bytes_.Next(walk_states_[node.depth - 1], node.byte);
    if (next == ByteAutomaton::kDead) {
      i = size_t(node.subtree_end);
      continue;
    }
    if (walk_states_.size() <= node.depth) walk_states_.resize(size_t(node.depth) + 1);
    walk_states_[node.depth] = next;
    for (TokenId id : v.NodeTokens(i)) out.words[size_t(id) >> 6] |= uint64_t{1} << (id & 63);
    ++i;
  }
  if (bytes_.CanEnd(state)) {
    for (TokenId id : v.eog_ids()) out.words[size_t(id) >> 6] |= uint64_t{1} << (id & 63);
  }
  out.count = 0;
  for (uint64_t word : out.words) out.count += std::popcount(word);
}

TokenMatcher::TokenMatcher(std::shared_ptr<TokenAutomaton> automaton)
    : automaton_(std::move(automaton)), state_(automaton_->bytes().initial()) {}

int32_t TokenMatcher::FillMask(std::span<uint64_t> mask) {
  const std::span<const uint64_t> words = automaton_->Mask(state_);
  SHARDLM_CHECK(mask.size() == words.size());
  std::memcpy(mask.data(), words.data(), words.size() * sizeof(uint64_t));
  return automaton_->MaskCount(state_);
}

bool TokenMatcher::Accept(TokenId token) {
  const TokenVocabulary& v = automaton_->vocabulary();
  if (token < 0 || token >= v.n_vocab()) return false;
  if (v.IsEog(token)) return CanEnd();
  const std::string_view text = v.bytes(token);
  if (text.empty()) return false;
  const ByteAutomaton::StateId next = automaton_->bytes().Walk(state_, text);
  if (next == ByteAutomaton::kDead) return false;
  state_ = next;
  return true;
}

}  // namespace shardlm::grammar
