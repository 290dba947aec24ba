// StopMatcher: cuts a stream of generated text at the first occurrence of any stop string.
//
// Goals: text that could still turn out to be the start of a stop string is held back
// until it is decided (the next piece either completes the stop string or rules it out),
// so a client never sees a prefix of a stop string that later matches; a stop string that
// spans several tokens is found; on a match, exactly the text before the stop string is
// released and the rest is dropped.
// Non-goals: stop token ids (the scheduler handles EOG), regular expressions, UTF-8
// repair (the input comes from a StreamDecoder, so it is whole characters; a held suffix
// is a prefix of a valid stop string, so it also starts on a character boundary).
//
// Thread safety: one matcher per request, used by one thread. Lifetime: plain value.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardlm {

class StopMatcher {
 public:
  StopMatcher() = default;
  // Empty strings in `stops` are ignored (they would match everywhere).
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
  // Length of the longest suffix of held_ that is a proper prefix of some stop string.
  size_t HeldPrefixLength() const;

  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace shardlm
