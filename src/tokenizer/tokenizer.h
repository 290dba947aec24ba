// Tokenizer: text <-> token ids for the vocabularies GGUF files carry.
//
// Goals: the same ids as llama.cpp's llama_tokenize for SPM ("llama") and byte-level BPE
// ("gpt2") vocabularies, with the pre-tokenizer named in tokenizer.ggml.pre (qwen2,
// llama3/llama-bpe, gpt2, default), special tokens (parsed from text on request), BOS/EOS
// as the metadata says; pieces exactly as llama_token_to_piece gives them; detokenization
// that never emits broken UTF-8 (StreamDecoder).
// Non-goals: training, normalizers beyond what these vocabularies use, other vocab types
// (WPM, UGM, RWKV: FromGguf returns kUnsupported), llama.cpp's per-model lstrip/rstrip
// attributes (not stored in GGUF), llama_detokenize's clean-up of spaces.
//
// Thread safety: immutable after construction; Encode/Decode may run concurrently.
// Lifetime: independent of the GgufFile it was read from.
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
  // Reads and validates the tokenizer.* keys; errors name the key.
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  virtual ~Tokenizer() = default;

  // add_special: BOS (and EOS where the vocab says so) added as the metadata asks.
  // parse_special: text of CONTROL / UNKNOWN tokens ("<|im_start|>") becomes that token;
  // USER_DEFINED tokens ("<think>") are always split out, as in llama.cpp.
  virtual std::vector<TokenId> Encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // The bytes a token stands for (byte tokens decoded, SPM "▁" → " ", byte-level BPE
  // unmapped), as llama_token_to_piece. CONTROL and UNKNOWN tokens give "" unless
  // render_special; UNUSED tokens and ids out of range always give "".
  virtual std::string Piece(TokenId id, bool render_special = false) const = 0;
  // Concatenated pieces (what llama-completion prints; SPM's prefix space is kept).
  std::string Decode(const std::vector<TokenId>& ids, bool render_special = false) const;

  virtual int32_t n_vocab() const = 0;
  virtual TokenId bos() const = 0;  // -1 if none
  virtual TokenId eos() const = 0;  // -1 if none
  virtual bool add_bos() const = 0;
  virtual bool add_eos() const { return false; }
  // End-of-generation tokens (eos, eot, <|im_end|>, <end_of_turn>, ... as llama.cpp marks).
  virtual bool IsEog(TokenId id) const = 0;
  virtual std::vector<TokenId> EogIds() const { return {}; }
  // CONTROL tokens (after llama.cpp's overrides): never rendered unless asked for.
  virtual bool IsControl(TokenId /*id*/) const { return false; }
  virtual std::string_view TokenText(TokenId id) const = 0;  // raw vocab entry
  // The id whose raw vocab entry is exactly `text`, or -1.
  virtual TokenId FindToken(std::string_view /*text*/) const { return -1; }
};

// Turns a stream of tokens into text without ever splitting a UTF-8 sequence: bytes of an
// incomplete character are held until it completes (or are flushed at the end). Bytes that
// can never form a character (invalid UTF-8) are emitted as U+FFFD, so Push() output is
// always valid UTF-8.
//
// Thread safety: one decoder per stream; not shared between threads.
class StreamDecoder {
 public:
  // `rendered`: CONTROL tokens whose text is given even without render_special (the markup
  // a chat's output parser reads, where a vocabulary made it special tokens).
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false,
                         std::vector<TokenId> rendered = {});
  std::string Push(TokenId id);  // text that is complete so far (may be "")
  std::string Flush();           // whatever is held back, as is

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::vector<TokenId> rendered_;  // sorted
  std::string pending_;
};

}  // namespace shardlm
