// Vocab: everything the tokenizers read from a GGUF file's tokenizer.* keys, validated.
//
// Goals: load tokenizer.ggml.{model,pre,tokens,scores,token_type,merges} and the special
// token ids / add_* flags with llama.cpp's defaults; derive what llama.cpp derives from the
// token texts (EOT/EOM/FIM ids, the end-of-generation set, CONTROL overrides for tokens that
// look like control tokens, the special-token list used to split text); check every array
// length and id, with errors that name the key. Loading the 151936-token Qwen vocabulary
// takes a few tens of milliseconds: token texts and merges are copied into two arenas and
// indexed by open-addressing hash maps (string_id_map.h).
// Non-goals: tokenizing (spm.cc, bpe.cc, tokenizer.cc), vocab types other than SPM and
// byte-level BPE, per-model lstrip/rstrip attributes (not stored in GGUF).
//
// Thread safety: immutable after Load. Lifetime: independent of the GgufFile (copies);
// not movable, since its maps point into its own arenas (held by unique_ptr).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "tokenizer/string_id_map.h"

namespace shardlm::tokenizer_internal {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

enum class VocabType { kSpm, kBpe, kSentinel };
// Byte-level BPE pre-tokenizers (regex sets), by tokenizer.ggml.pre.
enum class PreType { kDefault, kLlama3, kQwen2, kGpt2, kSentinel };

// Token attributes as llama.cpp derives them from tokenizer.ggml.token_type (bit flags,
// since a token can gain CONTROL or UNUSED on top of its stored type).
enum TokenAttr : uint8_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
};

struct SpecialIds {
  TokenId bos = kNoToken;
  TokenId eos = kNoToken;
  TokenId eot = kNoToken;
  TokenId eom = kNoToken;
  TokenId unk = kNoToken;
  TokenId sep = kNoToken;
  TokenId pad = kNoToken;
  TokenId mask = kNoToken;
  TokenId fim_pre = kNoToken;
  TokenId fim_suf = kNoToken;
  TokenId fim_mid = kNoToken;
  TokenId fim_pad = kNoToken;
  TokenId fim_rep = kNoToken;
  TokenId fim_sep = kNoToken;
};

class Vocab {
 public:
  static Result<std::unique_ptr<Vocab>> Load(const GgufFile& file);
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  VocabType type() const { return type_; }
  PreType pre_type() const { return pre_type_; }
  const std::string& model_name() const { return model_name_; }
  const std::string& pre_name() const { return pre_name_; }
  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool Valid(TokenId id) const { return id >= 0 && id < size(); }

  std::string_view text(TokenId id) const { return texts_[id]; }
  float score(TokenId id) const { return scores_[id]; }
  uint8_t attr(TokenId id) const { return attrs_[id]; }
  // Exact vocab entry lookup (any token type); kNoToken when absent.
  TokenId Find(std::string_view text) const;
  // Rank of the BPE merge (left, right); -1 when there is none.
  int32_t MergeRank(std::string_view left, std::string_view right) const;
  // SPM byte fallback: the <0xXX> token of a byte (or the byte as a one-char token).
  TokenId ByteToken(uint8_t byte) const;

  const SpecialIds& special() const { return special_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool ignore_merges() const { return ignore_merges_; }
  // End-of-generation ids, sorted.
  const std::vector<TokenId>& eog_ids() const { return eog_ids_; }
  bool IsEog(TokenId id) const;
  // CONTROL, USER_DEFINED and UNKNOWN tokens, longest text first (ties: lower id first):
  // the order in which their text is split out of raw text.
  const std::vector<TokenId>& special_tokens() const { return special_tokens_; }

 private:
  Vocab() = default;
  Status LoadModelType(const GgufFile& file);
  Status LoadTokens(const GgufFile& file);
  Status LoadScoresAndTypes(const GgufFile& file);
  Status LoadMerges(const GgufFile& file);
  Status LoadSpecialIds(const GgufFile& file);
  Status LoadFlags(const GgufFile& file);
  void DetectSpecialTokensByText();
  void BuildEogSet();
  void BuildSpecialTokenList();

  VocabType type_ = VocabType::kSentinel;
  PreType pre_type_ = PreType::kDefault;
  std::string model_name_;
  std::string pre_name_;
  std::string text_arena_;               // every token text, back to back
  std::vector<std::string_view> texts_;  // [n_vocab] views into text_arena_
  std::vector<float> scores_;            // [n_vocab]
  std::vector<uint8_t> attrs_;           // [n_vocab] TokenAttr bits
  StringIdMap ids_;                      // text -> id
  std::string merge_arena_;              // "left right" strings
  StringIdMap merges_;                   // "left right" -> rank
  SpecialIds special_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  bool ignore_merges_ = false;
  std::vector<TokenId> eog_ids_;
  std::vector<TokenId> special_tokens_;
};

}  // namespace shardlm::tokenizer_internal
