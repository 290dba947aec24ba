// UTF-8 and Python str helpers (see jinja_strings.h).
#include "chat/jinja_strings.h"

#include <algorithm>

namespace shardlm::jinja {

uint32_t DecodeUtf8(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  uint32_t cp = extra == 3 ? c & 0x07 : extra == 2 ? c & 0x0F : extra == 1 ? c & 0x1F : c;
  if (i + extra >= s.size()) {
    ++i;  // truncated sequence: one byte, one code point
    return c;
  }
  for (int k = 1; k <= extra; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += extra + 1;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<size_t> Utf8Offsets(std::string_view s) {
  std::vector<size_t> offsets;
  size_t i = 0;
  while (i < s.size()) {
    offsets.push_back(i);
    DecodeUtf8(s, i);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t Utf8Length(std::string_view s) { return Utf8Offsets(s).size() - 1; }

std::vector<std::string> Utf8Chars(std::string_view s) {
  std::vector<size_t> offsets = Utf8Offsets(s);
  std::vector<std::string> chars;
  for (size_t k = 0; k + 1 < offsets.size(); ++k) {
    chars.emplace_back(s.substr(offsets[k], offsets[k + 1] - offsets[k]));
  }
  return chars;
}

bool IsPySpace(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || cp == 0x2028 || cp == 0x2029) return true;
  if (cp >= 0x2000 && cp <= 0x200A) return true;
  return cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

struct CodePoints {
  std::vector<size_t> offsets;
  std::vector<uint32_t> cps;
};

CodePoints Decode(std::string_view s) {
  CodePoints out;
  size_t i = 0;
  while (i < s.size()) {
    out.offsets.push_back(i);
    out.cps.push_back(DecodeUtf8(s, i));
  }
  out.offsets.push_back(s.size());
  return out;
}

}  // namespace

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, StripSide side) {
  CodePoints cp = Decode(s);
  std::vector<uint32_t> set;
  if (chars) set = Decode(*chars).cps;
  auto strip = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : IsPySpace(c);
  };
  size_t begin = 0;
  size_t end = cp.cps.size();
  if (side != StripSide::kRight) {
    while (begin < end && strip(cp.cps[begin])) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strip(cp.cps[end - 1])) --end;
  }
  return std::string(s.substr(cp.offsets[begin], cp.offsets[end] - cp.offsets[begin]));
}

namespace {

std::vector<std::string> SplitWhitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  CodePoints cp = Decode(s);
  std::vector<std::string> parts;
  int n = static_cast<int>(cp.cps.size());
  auto piece = [&](int a, int b) {
    return std::string(s.substr(cp.offsets[a], cp.offsets[b] - cp.offsets[a]));
  };
  if (!from_right) {
    int i = 0;
    while (true) {
      while (i < n && IsPySpace(cp.cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(piece(i, n));  // Python keeps the remainder's trailing whitespace
        break;
      }
      int j = i;
      while (j < n && !IsPySpace(cp.cps[j])) ++j;
      parts.push_back(piece(i, j));
      i = j;
    }
    return parts;
  }
  int i = n;
  while (true) {
    while (i > 0 && IsPySpace(cp.cps[i - 1])) --i;
    if (i <= 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(piece(0, i));  // Python keeps the remainder's leading whitespace
      break;
    }
    int j = i;
    while (j > 0 && !IsPySpace(cp.cps[j - 1])) --j;
    parts.push_back(piece(j, i));
    i = j;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right) {
  if (!sep) return SplitWhitespace(s, maxsplit, from_right);
  std::vector<std::string> parts;
  const std::string& d = *sep;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t pos = s.find(d, start);
      if (pos == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, pos - start));
      start = pos + d.size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < d.size()) break;
    size_t pos = s.rfind(d, end - d.size());
    if (pos == std::string_view::npos) break;
    parts.emplace_back(s.substr(pos + d.size(), end - pos - d.size()));
    end = pos;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string PyReplace(std::string_view s, std::string_view old, std::string_view repl,
                      int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts repl between every character (and at both ends).
    std::vector<std::string> chars = Utf8Chars(s);
    int64_t done = 0;
    for (const auto& c : chars) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out += c;
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t pos = s.find(old, start);
    if (pos == std::string_view::npos) break;
    out.append(s.substr(start, pos - start));
    out.append(repl);
    start = pos + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string AsciiUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

namespace {
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
}  // namespace

std::string PyTitle(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    if (IsAsciiAlpha(c)) {
      c = prev_cased ? AsciiLower(std::string(1, c))[0] : AsciiUpper(std::string(1, c))[0];
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out = AsciiLower(s);
  if (!out.empty()) out[0] = AsciiUpper(out.substr(0, 1))[0];
  return out;
}

}  // namespace shardlm::jinja
