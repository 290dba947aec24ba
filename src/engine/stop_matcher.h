// StopMatcher: cuts a stream of generated text at the first occurrence of any stop string.
//
// Goals: text that could still turn out to be the start of a stop string is held back
// until it is decided (the next piece either completes the stop string or rules it out),
// so a client never sees a prefix of a stop string that later matches; a stop string that
// spans several tokens is found; on a match, exactly the text before the stop string is
// released and the rest is dropped; time linear in the text pushed, whatever the stop
// strings (an Aho-Corasick automaton over them whose state carries across pushes: each
// byte is looked at once, never rescanned with the held text).
// Non-goals: stop token ids (the scheduler handles EOG), regular expressions, UTF-8
// repair (the input comes from a StreamDecoder, so it is whole characters; a held suffix
// is a prefix of a valid stop string, so it also starts on a character boundary).
//
// Which match wins: of the occurrences that a push completes, the one that starts first;
// of those starting at the same byte, the stop string listed first. (An occurrence that
// starts earlier but ends in a later push loses to one completed now: text is released or
// dropped as soon as it is decided.)
//
// Thread safety: one matcher per request, used by one thread. Lifetime: plain value; the
// automaton holds O(total stop bytes) memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm {

class StopMatcher {
 public:
  // The longest stop string accepted, in bytes. Text that could still become a stop string
  // is held back, up to one stop string's length, so this bounds how much text a client
  // may be kept waiting for, and the automaton's memory (32 bytes per stop byte: 128 KiB
  // for the API's 4 stop strings). Chat-template markers and multi-line sentinels are tens
  // of bytes; 1024 leaves them ample room.
  static constexpr size_t kMaxStopStringBytes = 1024;

  StopMatcher() = default;
  // Empty strings in `stops` are ignored (they would match everywhere). Every stop string
  // must be at most kMaxStopStringBytes: a longer one is the caller's error (the HTTP API
  // refuses it with a 400), checked in debug builds; release builds still match it
  // correctly, in linear time, holding back up to its length.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text`; returns what is now safe to release. After a match it returns the
  // text before the stop string (once) and stopped() becomes true; later pushes give "".
  std::string Push(std::string_view text);
  // Releases whatever is held back (end of generation without a match); "" after a match.
  std::string Flush();

  bool stopped() const { return stopped_; }
  bool empty() const { return stops_.empty(); }
  // The stop string that matched ("" if none).
  const std::string& matched() const { return matched_; }

 private:
  // A node stands for a prefix of some stop string: the `depth` first bytes of
  // stops_[prefix_of]. The matcher's state is the node of the longest suffix of the text so
  // far that is such a prefix, i.e. exactly the text held back.
  struct Node {
    uint32_t depth = 0;
    uint32_t prefix_of = 0;
    uint32_t fail = 0;          // node of the longest proper suffix that is also a node
    uint32_t first_child = 0;   // 0: none (the root is never a child)
    uint32_t next_sibling = 0;  // 0: none
    uint8_t byte = 0;           // the last byte of this node's text
    // The longest stop string that is a suffix of this node's text (0: none), and the
    // first of the stop strings equal to it.
    uint32_t match_bytes = 0;
    uint32_t match_stop = 0;
  };
  static_assert(sizeof(Node) == 32, "the memory bound next to kMaxStopStringBytes");

  void Insert(uint32_t stop_index);
  void LinkFailures();  // breadth first: a node's failure is shallower than itself
  uint32_t Child(uint32_t node, uint8_t byte) const;  // 0: none
  uint32_t Next(uint32_t node, uint8_t byte) const;   // the automaton's step
  std::string_view HeldText() const;

  std::vector<std::string> stops_;
  std::vector<Node> nodes_;  // [0] is the root (the empty prefix)
  size_t max_stop_bytes_ = 0;
  uint32_t state_ = 0;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace shardlm
