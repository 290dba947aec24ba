// Vocab loading and the llama.cpp-compatible derivations (see vocab.h).
#include "tokenizer/vocab.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>

namespace shardlm::tokenizer_internal {
namespace {

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTokenType = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";

bool OneOf(std::string_view text, std::initializer_list<std::string_view> options) {
  return std::find(options.begin(), options.end(), text) != options.end();
}

// Pre-tokenizer names that select one of our regex sets (llama.cpp's aliases whose regexes
// and flags are the same as the named set).
Result<PreType> ParsePreType(std::string_view pre) {
  if (pre.empty() || pre == "default") return PreType::kDefault;
  if (OneOf(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                  "lfm2"})) {
    return PreType::kLlama3;
  }
  if (OneOf(pre, {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"})) return PreType::kQwen2;
  if (OneOf(pre, {"gpt2", "gpt-2", "phi-2", "mpt", "olmo", "exaone4"})) return PreType::kGpt2;
  return Unsupported("{} '{}' is not supported (supported: default, llama3/llama-bpe, qwen2, gpt2)",
                     kKeyPre, pre);
}

// Every text that llama.cpp matches below starts with one of these bytes ("▁" with 0xE2);
// checking it first keeps the scans over a 150K-token vocabulary cheap.
bool MaybeSpecialText(std::string_view text) {
  return !text.empty() && (text[0] == '<' || text[0] == '[' || text[0] == '_' ||
                           static_cast<uint8_t>(text[0]) == 0xE2);
}

uint8_t AttrFromTokenType(int64_t type) {
  switch (type) {
    case 1:
      return kAttrNormal;
    case 2:
      return kAttrUnknown;
    case 3:
      return kAttrControl;
    case 4:
      return kAttrUserDefined;
    case 5:
      return kAttrUnused;
    case 6:
      return kAttrByte;
    default:
      return kAttrUndefined;  // 0 (undefined) and unknown values, as llama.cpp
  }
}

// An optional integer key: nullopt when absent.
Result<std::optional<int64_t>> OptionalInt(const GgufFile& file, std::string_view key) {
  Result<int64_t> value = file.GetInt(key);
  if (value.ok()) return std::optional<int64_t>(*value);
  if (value.status().code() == StatusCode::kNotFound) return std::optional<int64_t>();
  return value.status();
}

Result<std::string_view> OptionalString(const GgufFile& file, std::string_view key) {
  Result<std::string_view> value = file.GetString(key);
  if (value.ok() || value.status().code() != StatusCode::kNotFound) return value;
  return std::string_view();
}

}  // namespace

Result<std::unique_ptr<Vocab>> Vocab::Load(const GgufFile& file) {
  std::unique_ptr<Vocab> vocab(new Vocab());
  SHARDLM_TRY(vocab->LoadModelType(file));
  SHARDLM_TRY(vocab->LoadTokens(file));
  SHARDLM_TRY(vocab->LoadScoresAndTypes(file));
  if (vocab->type_ == VocabType::kBpe) SHARDLM_TRY(vocab->LoadMerges(file));
  SHARDLM_TRY(vocab->LoadSpecialIds(file));
  SHARDLM_TRY(vocab->LoadFlags(file));
  vocab->DetectSpecialTokensByText();
  vocab->BuildEogSet();
  vocab->BuildSpecialTokenList();
  return vocab;
}

Status Vocab::LoadModelType(const GgufFile& file) {
  Result<std::string_view> model = file.GetString(kKeyModel);
  if (!model.ok()) return model.status().WithContext("tokenizer (the file carries no vocabulary?)");
  model_name_ = std::string(*model);
  SHARDLM_ASSIGN_OR_RETURN(std::string_view pre, OptionalString(file, kKeyPre));
  pre_name_ = std::string(pre);
  if (model_name_ == "llama") {
    type_ = VocabType::kSpm;
    special_.bos = 1;
    special_.eos = 2;
    special_.unk = 0;
    add_space_prefix_ = true;
    add_bos_ = true;
  } else if (model_name_ == "gpt2") {
    type_ = VocabType::kBpe;
    special_.bos = 11;  // llama.cpp's defaults for BPE vocabularies without the keys
    special_.eos = 11;
    SHARDLM_ASSIGN_OR_RETURN(pre_type_, ParsePreType(pre));
    ignore_merges_ = add_bos_ = pre_type_ == PreType::kLlama3;
  } else {
    return Unsupported("{} '{}' is not supported (supported: 'llama' = SPM, 'gpt2' = BPE)",
                       kKeyModel, model_name_);
  }
  SHARDLM_ASSIGN_OR_RETURN(add_space_prefix_,
                           file.GetBoolOr("tokenizer.ggml.add_space_prefix", add_space_prefix_));
  return Status::Ok();
}

Status Vocab::LoadTokens(const GgufFile& file) {
  SHARDLM_ASSIGN_OR_RETURN(const GgufValue* tokens,
                           file.GetArray(kKeyTokens, GgufValueType::kString));
  const size_t n = tokens->strings.size();
  if (n == 0) return InvalidData("{} is empty", kKeyTokens);
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return InvalidData("{} has {} entries, more than int32 ids can address", kKeyTokens, n);
  }
  // llama.cpp names empty entries "[EMPTY_<id>]" so that they stay unique.
  std::vector<std::string> renamed(n);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (tokens->strings[i].empty()) renamed[i] = "[EMPTY_" + std::to_string(i) + "]";
    total += renamed[i].empty() ? tokens->strings[i].size() : renamed[i].size();
  }
  text_arena_.reserve(total);
  std::vector<size_t> offsets(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    text_arena_ += renamed[i].empty() ? tokens->strings[i] : std::string_view(renamed[i]);
    offsets[i + 1] = text_arena_.size();
  }
  texts_.resize(n);
  ids_.Reserve(n);
  for (size_t i = 0; i < n; ++i) {
    texts_[i] = std::string_view(text_arena_).substr(offsets[i], offsets[i + 1] - offsets[i]);
    const TokenId id = ids_.TryEmplace(texts_[i], static_cast<TokenId>(i));
    if (id != static_cast<TokenId>(i)) {
      return InvalidData("{}: duplicate token '{}' at ids {} and {}", kKeyTokens, texts_[i], id, i);
    }
  }
  return Status::Ok();
}

Status Vocab::LoadScoresAndTypes(const GgufFile& file) {
  const size_t n = texts_.size();
  scores_.assign(n, 0.0f);
  attrs_.assign(n, kAttrNormal);
  if (file.Find(kKeyScores) != nullptr) {
    SHARDLM_ASSIGN_OR_RETURN(const GgufValue* scores,
                             file.GetArray(kKeyScores, GgufValueType::kSentinel));
    const bool is_float = scores->array_type == GgufValueType::kFloat32;
    if (!is_float && scores->array_type != GgufValueType::kInt32) {
      return InvalidData("{} must be an array of float32 or int32, not {}", kKeyScores,
                         GgufValueTypeName(scores->array_type));
    }
    const size_t count = is_float ? scores->floats.size() : scores->ints.size();
    if (count != n) return InvalidData("{} has {} entries for {} tokens", kKeyScores, count, n);
    for (size_t i = 0; i < n; ++i) {
      scores_[i] =
          is_float ? static_cast<float>(scores->floats[i]) : static_cast<float>(scores->ints[i]);
    }
  }
  if (file.Find(kKeyTokenType) != nullptr) {
    SHARDLM_ASSIGN_OR_RETURN(const GgufValue* types,
                             file.GetArray(kKeyTokenType, GgufValueType::kInt32));
    if (types->ints.size() != n) {
      return InvalidData("{} has {} entries for {} tokens", kKeyTokenType, types->ints.size(), n);
    }
    for (size_t i = 0; i < n; ++i) attrs_[i] = AttrFromTokenType(types->ints[i]);
  }
  return Status::Ok();
}

Status Vocab::LoadMerges(const GgufFile& file) {
  Result<const GgufValue*> merges = file.GetArray(kKeyMerges, GgufValueType::kString);
  if (!merges.ok()) return merges.status().WithContext("BPE vocabulary");
  const std::vector<std::string_view>& strings = (*merges)->strings;
  size_t total = 0;
  for (std::string_view merge : strings) total += merge.size();
  merge_arena_.reserve(total);
  std::vector<size_t> offsets(strings.size() + 1, 0);
  for (size_t i = 0; i < strings.size(); ++i) {
    merge_arena_ += strings[i];
    offsets[i + 1] = merge_arena_.size();
  }
  merges_.Reserve(strings.size());
  for (size_t i = 0; i < strings.size(); ++i) {
    std::string_view merge =
        std::string_view(merge_arena_).substr(offsets[i], offsets[i + 1] - offsets[i]);
    // "left right", split at the first space after the first byte; a merge without one
    // can never match (llama.cpp stores it as ("", "")). The first rank of a pair wins.
    if (merge.size() < 2 || merge.find(' ', 1) == std::string_view::npos) continue;
    merges_.TryEmplace(merge, static_cast<int32_t>(i));
  }
  return Status::Ok();
}

Status Vocab::LoadSpecialIds(const GgufFile& file) {
  const std::pair<std::string_view, TokenId*> keys[] = {
      {"tokenizer.ggml.bos_token_id", &special_.bos},
      {"tokenizer.ggml.eos_token_id", &special_.eos},
      {"tokenizer.ggml.eot_token_id", &special_.eot},
      {"tokenizer.ggml.eom_token_id", &special_.eom},
      {"tokenizer.ggml.unknown_token_id", &special_.unk},
      {"tokenizer.ggml.seperator_token_id", &special_.sep},  // sic, as GGUF spells it
      {"tokenizer.ggml.padding_token_id", &special_.pad},
      {"tokenizer.ggml.mask_token_id", &special_.mask},
      {"tokenizer.ggml.fim_pre_token_id", &special_.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &special_.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &special_.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &special_.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &special_.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &special_.fim_sep},
      {"tokenizer.ggml.prefix_token_id", &special_.fim_pre},  // deprecated names
      {"tokenizer.ggml.suffix_token_id", &special_.fim_suf},
      {"tokenizer.ggml.middle_token_id", &special_.fim_mid},
  };
  for (const auto& [key, id] : keys) {
    if (!Valid(*id)) *id = kNoToken;  // a default beyond a small vocabulary
    SHARDLM_ASSIGN_OR_RETURN(std::optional<int64_t> value, OptionalInt(file, key));
    if (!value) continue;
    // Converters write 0xFFFFFFFF (or -1) for "none"; llama.cpp then keeps the default.
    if (*value == -1 || *value == 0xFFFFFFFFll) continue;
    if (*value < 0 || *value >= size()) {
      return InvalidData("{} = {} is out of range for a vocabulary of {} tokens", key, *value,
                         size());
    }
    *id = static_cast<TokenId>(*value);
  }
  return Status::Ok();
}

Status Vocab::LoadFlags(const GgufFile& file) {
  SHARDLM_ASSIGN_OR_RETURN(add_bos_, file.GetBoolOr("tokenizer.ggml.add_bos_token", add_bos_));
  SHARDLM_ASSIGN_OR_RETURN(add_eos_, file.GetBoolOr("tokenizer.ggml.add_eos_token", add_eos_));
  if (add_bos_ && special_.bos == kNoToken) {
    return InvalidData("tokenizer.ggml.add_bos_token is true but there is no BOS token id");
  }
  if (add_eos_ && special_.eos == kNoToken) {
    return InvalidData("tokenizer.ggml.add_eos_token is true but there is no EOS token id");
  }
  return Status::Ok();
}

// llama.cpp finds EOT/EOM/FIM tokens by their text when the metadata does not name them,
// and forces such tokens to CONTROL. The first (lowest) matching id wins.
void Vocab::DetectSpecialTokensByText() {
  struct Rule {
    TokenId* id;
    std::initializer_list<std::string_view> texts;
  };
  const Rule rules[] = {
      {&special_.eot,
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}},
      {&special_.eom, {"<|eom_id|>"}},
      {&special_.fim_pre,
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
        "<|code_prefix|>", "<|prefix|>"}},
      {&special_.fim_suf,
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
        "<|code_suffix|>", "<|suffix|>"}},
      {&special_.fim_mid,
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
        "<|code_middle|>", "<|middle|>"}},
      {&special_.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
      {&special_.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {&special_.fim_sep, {"<|file_sep|>"}},
  };
  for (TokenId id = 0; id < size(); ++id) {
    if (!MaybeSpecialText(texts_[id])) continue;
    for (const Rule& rule : rules) {
      if (*rule.id != kNoToken || !OneOf(texts_[id], rule.texts)) continue;
      *rule.id = id;
      attrs_[id] |= kAttrControl;
    }
  }
  for (TokenId id = 0; id < size(); ++id) {
    if ((attrs_[id] & kAttrControl) && texts_[id].find("unused") != std::string_view::npos) {
      attrs_[id] |= kAttrUnused;
    }
  }
}

void Vocab::BuildEogSet() {
  std::set<TokenId> eog;
  for (TokenId id : {special_.fim_pad, special_.fim_rep, special_.fim_sep}) {
    if (id != kNoToken) eog.insert(id);
  }
  for (TokenId id = 0; id < size(); ++id) {
    std::string_view text = texts_[id];
    if (!MaybeSpecialText(text)) continue;
    if (OneOf(text, {"<|eot_id|>",
                     "<|im_end|>",
                     "<|end|>",
                     "<|return|>",
                     "<|call|>",
                     "<|flush|>",
                     "<|calls|>",
                     "<end_of_turn>",
                     "<|endoftext|>",
                     "</s>",
                     "<|eom_id|>",
                     "<EOT>",
                     "_<EOT>",
                     "[EOT]",
                     "[EOS]",
                     "<|end_of_text|>",
                     "<end_of_utterance>",
                     "<eos>",
                     "<turn|>",
                     "<|tool_response>",
                     "<｜end▁of▁sentence｜>",
                     "[e~["})) {
      eog.insert(id);
      attrs_[id] |= kAttrControl;
    } else if (OneOf(text, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      attrs_[id] = kAttrUserDefined;  // gpt-oss: always rendered
    }
  }
  for (TokenId id : {special_.eos, special_.eot, special_.eom}) {
    if (id != kNoToken) eog.insert(id);
  }
  // gpt-oss / solar-open: "<|end|>" ends a message, not the generation.
  auto find = [&](std::string_view text) {
    for (TokenId id : eog) {
      if (texts_[id] == text) return id;
    }
    return kNoToken;
  };
  const bool has_call = find("<|call|>") != kNoToken || find("<|calls|>") != kNoToken;
  const TokenId end = find("<|end|>");
  if (end != kNoToken && has_call &&
      (find("<|return|>") != kNoToken || find("<|flush|>") != kNoToken)) {
    eog.erase(end);
    attrs_[end] = kAttrUserDefined;
  }
  // gemma4: "</s>" is not an end of generation when "<|tool_response>" exists.
  const TokenId close_s = find("</s>");
  if (close_s != kNoToken && find("<|tool_response>") != kNoToken) {
    eog.erase(close_s);
    attrs_[close_s] = kAttrNormal;
  }
  eog_ids_.assign(eog.begin(), eog.end());
}

void Vocab::BuildSpecialTokenList() {
  for (TokenId id = 0; id < size(); ++id) {
    if (attrs_[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_tokens_.push_back(id);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](TokenId a, TokenId b) { return texts_[a].size() > texts_[b].size(); });
}

TokenId Vocab::Find(std::string_view text) const { return ids_.Find(text); }

int32_t Vocab::MergeRank(std::string_view left, std::string_view right) const {
  // llama.cpp keys merges by (text before, text after) the first space past byte 0, so a
  // left part with a space after its first byte can never match.
  if (left.empty() || right.empty() || left.find(' ', 1) != std::string_view::npos) return -1;
  thread_local std::string key;
  key.assign(left);
  key += ' ';
  key += right;
  return merges_.Find(key);
}

TokenId Vocab::ByteToken(uint8_t byte) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char name[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  TokenId id = Find(std::string_view(name, 6));
  if (id != kNoToken) return id;
  const char raw = static_cast<char>(byte);
  return Find(std::string_view(&raw, 1));
}

bool Vocab::IsEog(TokenId id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

}  // namespace shardlm::tokenizer_internal
