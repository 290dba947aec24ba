// The two merge loops: SentencePiece BPE by score (SPM, "llama" vocabularies) and byte-level
// BPE by merge rank ("gpt2" vocabularies), each over one piece of text.
//
// Goals: the same ids as llama.cpp's llm_tokenizer_spm_session / llm_tokenizer_bpe_session,
// including their tie-breaks (equal score or rank: the leftmost pair first) and fallbacks
// (SPM: unmatched pieces re-split along the merges that built them, then <0xXX> byte
// tokens; BPE: unknown symbols as single-byte tokens where the vocab has them).
// Non-goals: special tokens, BOS/EOS, whitespace escaping and pre-tokenization
// (tokenizer.cc and pretokenizer.cc do those first).
//
// Thread safety: stateless functions over an immutable Vocab.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace shardlm::tokenizer_internal {

// `text` has spaces already escaped as U+2581 (and the prefix space added).
void SpmEncode(const Vocab& vocab, std::string_view text, std::vector<TokenId>* out);

// `word` is one pre-tokenizer piece written in the GPT-2 byte alphabet.
void BpeEncodeWord(const Vocab& vocab, std::string_view word, std::vector<TokenId>* out);

}  // namespace shardlm::tokenizer_internal
