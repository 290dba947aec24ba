// Tokenizer: text ↔ token ids for the vocabularies GGUF files carry.
//
// Goals: the same ids as llama.cpp's llama_tokenize for SPM ("llama") and byte-level BPE
// ("gpt2") vocabularies, with the pre-tokenizer named in tokenizer.ggml.pre (qwen2,
// llama3/llama-bpe, gpt2, default), special tokens (parsed from text on request), BOS/EOS
// as the metadata says; detokenization that never emits broken UTF-8 (StreamDecoder).
// Non-goals: training, normalizers beyond what these vocabularies use.
//
// Thread safety: immutable after construction; Encode/Decode may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"

namespace shardlm {

using TokenId = int32_t;

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  virtual ~Tokenizer() = default;

  // add_special: BOS (and EOS where the vocab says so) added as the metadata asks.
  // parse_special: text of special tokens ("<|im_start|>") becomes that token.
  virtual std::vector<TokenId> Encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // The bytes a token stands for (byte tokens decoded, SPM "▁" → " "). Control tokens give
  // "" unless render_special.
  virtual std::string Piece(TokenId id, bool render_special = false) const = 0;
  // Concatenated pieces.
  std::string Decode(const std::vector<TokenId>& ids, bool render_special = false) const;

  virtual int32_t n_vocab() const = 0;
  virtual TokenId bos() const = 0;  // -1 if none
  virtual TokenId eos() const = 0;  // -1 if none
  virtual bool add_bos() const = 0;
  // End-of-generation tokens (eos, eot, <|im_end|>, <end_of_turn>, ... as llama.cpp marks).
  virtual bool IsEog(TokenId id) const = 0;
  virtual std::string_view TokenText(TokenId id) const = 0;  // raw vocab entry
};

// Turns a stream of tokens into text without ever splitting a UTF-8 sequence: bytes of an
// incomplete character are held until it completes (or are flushed at the end).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string Push(TokenId id);  // text that is complete so far (may be "")
  std::string Flush();           // whatever is held back, as is

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace shardlm
