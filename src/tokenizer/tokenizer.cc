// The Tokenizer over a GGUF vocabulary: special-token splitting, SPM / byte-level BPE
// dispatch, pieces, and the stream decoder (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/merge_encoders.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode_util.h"
#include "tokenizer/vocab.h"

namespace shardlm {
namespace {

using tokenizer_internal::kAttrByte;
using tokenizer_internal::kAttrControl;
using tokenizer_internal::kAttrNormal;
using tokenizer_internal::kAttrUnknown;
using tokenizer_internal::kAttrUserDefined;
using tokenizer_internal::kNoToken;
using tokenizer_internal::PreTokenizer;
using tokenizer_internal::Vocab;
using tokenizer_internal::VocabType;

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// A piece of the input: either a special token already recognized, or raw text.
struct Fragment {
  TokenId token;  // kNoToken for raw text
  size_t offset;  // raw text: byte range of the input
  size_t length;
};

// llama.cpp's tokenizer_st_partition: each special token in turn (longest text first) is
// cut out of every raw fragment, everywhere it occurs. With parse_special false only
// USER_DEFINED tokens are cut out.
std::vector<Fragment> SplitSpecialTokens(const Vocab& vocab, std::string_view text,
                                         bool parse_special) {
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({kNoToken, 0, text.size()});
  for (TokenId id : vocab.special_tokens()) {
    if (!parse_special && (vocab.attr(id) & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view needle = vocab.text(id);
    if (text.find(needle) == std::string_view::npos) continue;
    std::vector<Fragment> next;
    next.reserve(fragments.size() + 2);
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      const size_t end = fragment.offset + fragment.length;
      size_t pos = fragment.offset;
      for (size_t match; (match = text.substr(0, end).find(needle, pos)) != std::string::npos;) {
        if (match > pos) next.push_back({kNoToken, pos, match - pos});
        next.push_back({id, 0, 0});
        pos = match + needle.size();
      }
      if (pos < end) next.push_back({kNoToken, pos, end - pos});
    }
    fragments = std::move(next);
  }
  return fragments;
}

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t match; (match = text.find(from, pos)) != std::string_view::npos;) {
    out.append(text, pos, match - pos);
    out += to;
    pos = match + from.size();
  }
  out.append(text, pos);
  return out;
}

// Byte-level BPE token text back to bytes; code points outside the byte alphabet are
// spelled out the way llama.cpp's llama_decode_text does.
std::string DecodeByteLevel(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    uint32_t cpt = 0;
    const bool valid = tokenizer_internal::DecodeUtf8(text, &pos, &cpt);
    const int byte = valid ? tokenizer_internal::CodepointToByte(cpt) : -1;
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    out += "[UNK_BYTE_0x";
    for (size_t i = start; i < pos; ++i) {
      out += fmt::format("{:02x}", static_cast<uint8_t>(text[i]));
    }
    out += std::string(text) + "]";
  }
  return out;
}

// "<0xAB>" → 0xAB; -1 when the text is not a byte token name.
int ParseByteToken(std::string_view text) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  const int hi = hex(text[3]);
  const int lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class VocabTokenizer final : public Tokenizer {
 public:
  VocabTokenizer(std::unique_ptr<Vocab> vocab, std::unique_ptr<PreTokenizer> pre)
      : vocab_(std::move(vocab)), pre_(std::move(pre)) {}

  std::vector<TokenId> Encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    std::vector<TokenId> out;
    if (add_special && vocab_->add_bos()) out.push_back(vocab_->special().bos);
    const std::vector<Fragment> fragments = SplitSpecialTokens(*vocab_, text, parse_special);
    if (vocab_->type() == VocabType::kSpm) {
      EncodeSpm(text, fragments, &out);
    } else {
      EncodeBpe(text, fragments, &out);
    }
    if (add_special && vocab_->add_eos()) out.push_back(vocab_->special().eos);
    return out;
  }

  std::string Piece(TokenId id, bool render_special) const override {
    if (!vocab_->Valid(id)) return "";
    const uint8_t attr = vocab_->attr(id);
    const std::string_view text = vocab_->text(id);
    if (!render_special && (attr & (kAttrUnknown | kAttrControl))) return "";
    if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return std::string(text);
    if (attr & kAttrNormal) {
      return vocab_->type() == VocabType::kSpm ? ReplaceAll(text, kSpmSpace, " ")
                                               : DecodeByteLevel(text);
    }
    if (attr & kAttrByte) {
      const int byte = ParseByteToken(text);
      return byte < 0 ? std::string(text) : std::string(1, static_cast<char>(byte));
    }
    return "";  // UNUSED / UNDEFINED
  }

  int32_t n_vocab() const override { return vocab_->size(); }
  TokenId bos() const override { return vocab_->special().bos; }
  TokenId eos() const override { return vocab_->special().eos; }
  bool add_bos() const override { return vocab_->add_bos(); }
  bool add_eos() const override { return vocab_->add_eos(); }
  bool IsEog(TokenId id) const override { return vocab_->IsEog(id); }
  std::vector<TokenId> EogIds() const override { return vocab_->eog_ids(); }
  bool IsControl(TokenId id) const override {
    return vocab_->Valid(id) && (vocab_->attr(id) & kAttrControl);
  }
  std::string_view TokenText(TokenId id) const override {
    return vocab_->Valid(id) ? vocab_->text(id) : std::string_view();
  }
  TokenId FindToken(std::string_view text) const override { return vocab_->Find(text); }

 private:
  // SPM: spaces become U+2581, and raw text at the start or right after a special token
  // gets a prefix space when add_space_prefix (llama.cpp's behaviour).
  void EncodeSpm(std::string_view text, const std::vector<Fragment>& fragments,
                 std::vector<TokenId>* out) const {
    bool prev_special = true;
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        out->push_back(fragment.token);
        prev_special = true;
        continue;
      }
      std::string raw = vocab_->add_space_prefix() && prev_special ? " " : "";
      raw += text.substr(fragment.offset, fragment.length);
      tokenizer_internal::SpmEncode(*vocab_, ReplaceAll(raw, " ", kSpmSpace), out);
      prev_special = false;
    }
  }

  // Byte-level BPE: invalid UTF-8 becomes U+FFFD (as llama.cpp), the pre-tokenizer splits
  // words, each word is written in the byte alphabet and merged.
  void EncodeBpe(std::string_view text, const std::vector<Fragment>& fragments,
                 std::vector<TokenId>* out) const {
    std::string word;
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        out->push_back(fragment.token);
        continue;
      }
      const std::string clean =
          tokenizer_internal::SanitizeUtf8(text.substr(fragment.offset, fragment.length));
      for (std::string_view piece : pre_->Split(clean)) {
        word.clear();
        for (char c : piece) word += tokenizer_internal::ByteToUtf8(static_cast<uint8_t>(c));
        tokenizer_internal::BpeEncodeWord(*vocab_, word, out);
      }
    }
  }

  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<PreTokenizer> pre_;  // BPE only
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  Result<std::unique_ptr<Vocab>> vocab = Vocab::Load(file);
  if (!vocab.ok()) return vocab.status().WithContext(file.name());
  std::unique_ptr<PreTokenizer> pre;
  if ((*vocab)->type() == VocabType::kBpe) {
    SHARDLM_ASSIGN_OR_RETURN(pre, PreTokenizer::Create((*vocab)->pre_type()));
  }
  return std::unique_ptr<Tokenizer>(
      std::make_unique<VocabTokenizer>(std::move(vocab).value(), std::move(pre)));
}

std::string Tokenizer::Decode(const std::vector<TokenId>& ids, bool render_special) const {
  std::string text;
  for (TokenId id : ids) text += Piece(id, render_special);
  return text;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool render_special,
                             std::vector<TokenId> rendered)
    : tokenizer_(tokenizer), render_special_(render_special), rendered_(std::move(rendered)) {
  std::sort(rendered_.begin(), rendered_.end());
}

std::string StreamDecoder::Push(TokenId id) {
  const bool render = render_special_ || std::binary_search(rendered_.begin(), rendered_.end(), id);
  pending_ += tokenizer_.Piece(id, render);
  const size_t complete = tokenizer_internal::CompleteUtf8Prefix(pending_);
  std::string out =
      tokenizer_internal::SanitizeUtf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::Flush() { return std::exchange(pending_, std::string()); }

}  // namespace shardlm
