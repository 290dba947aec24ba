// SPM and byte-level BPE merge loops (see merge_encoders.h).
//
// Both work on a doubly linked list of symbols, each a contiguous byte range of the input
// (initially one UTF-8 character), and a priority queue of candidate adjacent pairs. A pair
// is stale once either side has changed: its recorded byte length no longer equals the two
// symbols' lengths (the symbols stay contiguous, so equal length means equal text).
#include "tokenizer/merge_encoders.h"

#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include "tokenizer/unicode_util.h"

namespace shardlm::tokenizer_internal {
namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the text
  size_t n;       // bytes; 0 once merged into its left neighbour
};

// One symbol per UTF-8 character (by lead byte, clipped at the end like llama.cpp).
std::vector<Symbol> SplitChars(std::string_view text) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    const size_t n =
        std::min(Utf8SequenceLength(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + n == text.size() ? -1 : index + 1, offset, n});
    offset += n;
  }
  return symbols;
}

// Merges the right symbol of a pair into the left one and unlinks it.
void MergeRightIntoLeft(std::vector<Symbol>& symbols, int left) {
  Symbol& l = symbols[left];
  Symbol& r = symbols[l.next];
  l.n += r.n;
  r.n = 0;
  l.next = r.next;
  if (r.next >= 0) symbols[r.next].prev = left;
}

// The loop both algorithms share: offer every adjacent pair, then repeatedly take the best
// pair from `queue`, skip it if stale, merge it, and offer the merged symbol's new pairs.
template <typename Pair, typename Order, typename TryAddPair>
void MergeBestPairs(std::vector<Symbol>& symbols,
                    std::priority_queue<Pair, std::vector<Pair>, Order>& queue,
                    TryAddPair try_add_pair) {
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_pair(i - 1, i);
  while (!queue.empty()) {
    const Pair pair = queue.top();
    queue.pop();
    const Symbol& left = symbols[pair.left];
    const Symbol& right = symbols[pair.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != pair.size) continue;
    MergeRightIntoLeft(symbols, pair.left);
    try_add_pair(symbols[pair.left].prev, pair.left);
    try_add_pair(pair.left, symbols[pair.left].next);
  }
}

// --- SPM ---------------------------------------------------------------------------------

struct SpmPair {
  int left;
  int right;
  float score;
  size_t size;
};

// Highest score first; equal scores: leftmost first.
struct SpmPairOrder {
  bool operator()(const SpmPair& a, const SpmPair& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text)
      : vocab_(vocab), text_(text), symbols_(SplitChars(text)) {}

  void Run(std::vector<TokenId>* out) {
    MergeBestPairs(symbols_, queue_, [this](int left, int right) { TryAddPair(left, right); });
    for (int i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[i].next) Resegment(i, out);
  }

 private:
  std::string_view Text(const Symbol& s) const { return text_.substr(s.offset, s.n); }

  void TryAddPair(int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view text =
        text_.substr(symbols_[left].offset, symbols_[left].n + symbols_[right].n);
    const TokenId id = vocab_.Find(text);
    if (id == kNoToken) return;
    queue_.push({left, right, vocab_.score(id), text.size()});
    rev_merge_[text] = {left, right};  // the latest pair that produced this text
  }

  // A symbol that is not a token is re-split along the pair that built it; a piece that no
  // pair built becomes byte tokens.
  void Resegment(int index, std::vector<TokenId>* out) const {
    const std::string_view text = Text(symbols_[index]);
    const TokenId id = vocab_.Find(text);
    if (id != kNoToken) {
      out->push_back(id);
      return;
    }
    auto it = rev_merge_.find(text);
    if (it == rev_merge_.end()) {
      for (char c : text) {
        const TokenId byte = vocab_.ByteToken(static_cast<uint8_t>(c));
        const TokenId fallback = byte != kNoToken ? byte : vocab_.special().unk;
        if (fallback != kNoToken) out->push_back(fallback);
      }
      return;
    }
    Resegment(it->second.first, out);
    Resegment(it->second.second, out);
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<SpmPair, std::vector<SpmPair>, SpmPairOrder> queue_;
  std::unordered_map<std::string_view, std::pair<int, int>> rev_merge_;
};

// --- byte-level BPE ----------------------------------------------------------------------

struct BpePair {
  int left;
  int right;
  int32_t rank;
  size_t size;
};

// Lowest rank first; equal ranks: leftmost first.
struct BpePairOrder {
  bool operator()(const BpePair& a, const BpePair& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

class BpeSession {
 public:
  BpeSession(const Vocab& vocab, std::string_view word)
      : vocab_(vocab), word_(word), symbols_(SplitChars(word)) {}

  void Run(std::vector<TokenId>* out) {
    MergeBestPairs(symbols_, queue_, [this](int left, int right) { TryAddPair(left, right); });
    for (int i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[i].next) Emit(i, out);
  }

 private:
  std::string_view Text(int index) const {
    return word_.substr(symbols_[index].offset, symbols_[index].n);
  }

  void TryAddPair(int left, int right) {
    if (left == -1 || right == -1) return;
    const int32_t rank = vocab_.MergeRank(Text(left), Text(right));
    if (rank < 0) return;
    queue_.push({left, right, rank, symbols_[left].n + symbols_[right].n});
  }

  // A symbol that is not a token falls back to single-byte tokens, where they exist.
  void Emit(int index, std::vector<TokenId>* out) const {
    const std::string_view text = Text(index);
    const TokenId id = vocab_.Find(text);
    if (id != kNoToken) {
      out->push_back(id);
      return;
    }
    for (size_t i = 0; i < text.size(); ++i) {
      const TokenId byte = vocab_.Find(text.substr(i, 1));
      if (byte != kNoToken) out->push_back(byte);
    }
  }

  const Vocab& vocab_;
  std::string_view word_;
  std::vector<Symbol> symbols_;
  std::priority_queue<BpePair, std::vector<BpePair>, BpePairOrder> queue_;
};

}  // namespace

void SpmEncode(const Vocab& vocab, std::string_view text, std::vector<TokenId>* out) {
  SpmSession(vocab, text).Run(out);
}

void BpeEncodeWord(const Vocab& vocab, std::string_view word, std::vector<TokenId>* out) {
  if (word.empty()) return;
  if (vocab.ignore_merges()) {
    const TokenId id = vocab.Find(word);
    if (id != kNoToken) {
      out->push_back(id);
      return;
    }
  }
  BpeSession(vocab, word).Run(out);
}

}  // namespace shardlm::tokenizer_internal
