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

namespace {

// Simple case mappings for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic: the
// scripts chat text is likely to carry through |upper/|lower/|title.
uint32_t LowerCp(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x137 && c != 0x130) return c | 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c & 1 ? c + 1 : c;
  if (c >= 0x14A && c <= 0x177) return c | 1;
  if (c == 0x178) return 0xFF;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

uint32_t UpperCp(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0x131) return 'I';
  if (c >= 0x101 && c <= 0x137 && (c & 1)) return c - 1;
  if (((c >= 0x13A && c <= 0x148) || (c >= 0x17A && c <= 0x17E)) && !(c & 1)) return c - 1;
  if (c >= 0x14B && c <= 0x177 && (c & 1)) return c - 1;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3CB) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

bool IsCased(uint32_t c) { return LowerCp(c) != c || UpperCp(c) != c || c == 0xDF; }

void AppendUpper(uint32_t c, std::string& out) {
  if (c == 0xDF) {
    out += "SS";  // ß has no single-letter uppercase
  } else {
    AppendUtf8(UpperCp(c), out);
  }
}

}  // namespace

std::string PyUpper(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) AppendUpper(DecodeUtf8(s, i), out);
  return out;
}

std::string PyLower(std::string_view s) {
  CodePoints cp = Decode(s);
  std::string out;
  for (size_t k = 0; k < cp.cps.size(); ++k) {
    uint32_t c = cp.cps[k];
    // Capital sigma ending a word becomes final sigma, as in Python.
    bool final_sigma = c == 0x3A3 && k > 0 && IsCased(cp.cps[k - 1]) &&
                       (k + 1 == cp.cps.size() || !IsCased(cp.cps[k + 1]));
    AppendUtf8(final_sigma ? 0x3C2 : LowerCp(c), out);
  }
  return out;
}

std::string JinjaTitle(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    size_t begin = i;
    uint32_t c = DecodeUtf8(s, i);
    bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
    if (separator) {
      out.append(s.substr(begin, i - begin));
    } else if (word_start) {
      AppendUpper(c, out);
    } else {
      AppendUtf8(LowerCp(c), out);
    }
    word_start = separator;
  }
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t c = DecodeUtf8(s, i);
    if (prev_cased) {
      AppendUtf8(LowerCp(c), out);
    } else if (c == 0xDF) {
      out += "Ss";
    } else {
      AppendUtf8(UpperCp(c), out);
    }
    prev_cased = IsCased(c);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size(); first = false) {
    uint32_t c = DecodeUtf8(s, i);
    if (first) {
      if (c == 0xDF) {
        out += "Ss";
      } else {
        AppendUtf8(UpperCp(c), out);
      }
    } else {
      AppendUtf8(LowerCp(c), out);
    }
  }
  return out;
}

}  // namespace shardlm::jinja
