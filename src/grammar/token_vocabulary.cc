// TokenVocabulary: token bytes from a tokenizer and the depth-first trie over them (see
// token_vocabulary.h).
#include "grammar/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace shardlm::grammar {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(
    const Tokenizer& tokenizer, std::span<const TokenId> rendered) {
  std::vector<std::string> pieces(size_t(tokenizer.n_vocab()));
  std::vector<TokenId> eog;
  for (TokenId id = 0; id < tokenizer.n_vocab(); ++id) {
    if (tokenizer.IsEog(id)) {
      eog.push_back(id);
    } else if (!tokenizer.IsControl(id)) {
      pieces[size_t(id)] = tokenizer.Piece(id, /*render_special=*/false);
    }
  }
  for (TokenId id : rendered) {
    if (id >= 0 && id < tokenizer.n_vocab() && !tokenizer.IsEog(id)) {
      pieces[size_t(id)] = tokenizer.Piece(id, /*render_special=*/true);
    }
  }
  return FromPieces(std::move(pieces), std::move(eog));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromPieces(std::vector<std::string> pieces,
                                                                   std::vector<TokenId> eog) {
  std::shared_ptr<TokenVocabulary> v(new TokenVocabulary());
  v->n_vocab_ = int32_t(pieces.size());
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  std::erase_if(eog, [&](TokenId id) { return id < 0 || id >= v->n_vocab_; });
  v->eog_ids_ = std::move(eog);
  v->offsets_.reserve(pieces.size() + 1);
  v->offsets_.push_back(0);
  for (size_t id = 0; id < pieces.size(); ++id) {
    // A token longer than a depth counter can hold is never allowed: no real vocabulary
    // has one, and a grammar would rarely accept it whole anyway.
    if (!v->IsEog(TokenId(id)) && pieces[id].size() < 0xffff) v->arena_ += pieces[id];
    v->offsets_.push_back(int64_t(v->arena_.size()));
  }
  v->BuildTrie();
  return v;
}

bool TokenVocabulary::IsEog(TokenId id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

// Tokens sorted by their bytes come in depth-first order of the trie: each token shares
// its longest common prefix with the previous one, so it adds nodes only past that prefix,
// and the nodes of the path below the prefix are closed (their subtree ends here).
void TokenVocabulary::BuildTrie() {
  std::vector<TokenId> order;
  for (TokenId id = 0; id < n_vocab_; ++id) {
    if (!bytes(id).empty()) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](TokenId a, TokenId b) { return bytes(a) < bytes(b); });
  std::vector<int32_t> path;  // node index at each depth - 1
  std::string_view previous;
  for (TokenId id : order) {
    const std::string_view text = bytes(id);
    size_t common = 0;
    while (common < previous.size() && common < text.size() && previous[common] == text[common]) {
      ++common;
    }
    while (path.size() > common) {
      nodes_[size_t(path.back())].subtree_end = int32_t(nodes_.size());
      path.pop_back();
    }
    for (size_t depth = common; depth < text.size(); ++depth) {
      path.push_back(int32_t(nodes_.size()));
      nodes_.push_back(Node{uint8_t(text[depth]), uint16_t(depth + 1), 0});
      node_token_begin_.push_back(int32_t(node_tokens_.size()));
    }
    // Tokens arrive in node order, so each node's tokens are contiguous.
    node_tokens_.push_back(id);
    previous = text;
  }
  while (!path.empty()) {
    nodes_[size_t(path.back())].subtree_end = int32_t(nodes_.size());
    path.pop_back();
  }
  node_token_begin_.push_back(int32_t(node_tokens_.size()));
}

size_t TokenVocabulary::memory_bytes() const {
  return arena_.size() + offsets_.size() * sizeof(int64_t) + nodes_.size() * sizeof(Node) +
         node_token_begin_.size() * sizeof(int32_t) + node_tokens_.size() * sizeof(TokenId);
}

}  // namespace shardlm::grammar
