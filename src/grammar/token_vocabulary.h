// TokenVocabulary: a tokenizer's tokens as the byte strings they add to the output, in a
// prefix tree (trie), so the tokens a grammar state allows can be found in one walk over
// shared prefixes instead of one walk per token.
//
// The trie is stored in depth-first order as a flat array: a node is one byte, its depth,
// the index just past its subtree and the tokens that end there. A walk that finds a
// prefix dead skips the whole subtree with one jump; one that goes on reads the next node.
// 151936 Qwen3 tokens make about 400k nodes (12 bytes each).
//
// What is in it: every token whose piece (Tokenizer::Piece without special rendering) is
// non-empty and that is not a CONTROL token, and the CONTROL tokens the output renders
// (EngineRequest::rendered_specials) as their text. End-of-generation tokens are kept apart
// (eog_ids): a matcher allows them only when the grammar may end. Everything else
// (other control, unused, unknown tokens; pieces that are empty) is never allowed.
//
// Thread safety: immutable after construction. Lifetime: independent of the Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace shardlm::grammar {

class TokenVocabulary {
 public:
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;       // 1 for a first byte
    int32_t subtree_end = 0;  // index of the first node after this one's descendants
  };

  // `rendered`: CONTROL tokens the output shows as their text (any order).
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(
      const Tokenizer& tokenizer, std::span<const TokenId> rendered = {});
  // Tests: token i has the bytes pieces[i] (empty: never allowed); `eog` end generation.
  static std::shared_ptr<const TokenVocabulary> FromPieces(std::vector<std::string> pieces,
                                                           std::vector<TokenId> eog);

  int32_t n_vocab() const { return n_vocab_; }
  // The bytes token `id` adds ("" for tokens that are never allowed, EOG included).
  std::string_view bytes(TokenId id) const {
    return std::string_view(arena_).substr(size_t(offsets_[size_t(id)]),
                                           size_t(offsets_[size_t(id) + 1] - offsets_[size_t(id)]));
  }
  const std::vector<TokenId>& eog_ids() const { return eog_ids_; }
  bool IsEog(TokenId id) const;

  std::span<const Node> nodes() const { return nodes_; }
  // Tokens whose bytes end at node i.
  std::span<const TokenId> NodeTokens(size_t i) const {
    return std::span(node_tokens_)
        .subspan(size_t(node_token_begin_[i]),
                 size_t(node_token_begin_[i + 1] - node_token_begin_[i]));
  }
  size_t memory_bytes() const;

 private:
  TokenVocabulary() = default;
  void BuildTrie();

  int32_t n_vocab_ = 0;
  std::string arena_;                      // every allowed token's bytes, by id
  std::vector<int64_t> offsets_;           // [n_vocab + 1] into arena_
  std::vector<TokenId> eog_ids_;           // sorted
  std::vector<Node> nodes_;                // depth-first
  std::vector<int32_t> node_token_begin_;  // [n_nodes + 1] into node_tokens_
  std::vector<TokenId> node_tokens_;
};

}  // namespace shardlm::grammar
