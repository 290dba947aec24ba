// UTF-8 and Python str helpers for the Jinja engine.
//
// Owns: code-point iteration/length/slicing of UTF-8 text, and Python's str.strip/split
// semantics (whitespace = Python's str.isspace set).
// Goals: Python-compatible results for valid UTF-8; invalid bytes are treated as one code
// point each, never read out of bounds. Case mapping covers ASCII, Latin-1, Latin
// Extended-A, Greek and Cyrillic. Non-goals: full Unicode case tables, normalization.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::jinja {

// Decodes the code point at s[i] and advances i (at least one byte).
uint32_t DecodeUtf8(std::string_view s, size_t& i);
void AppendUtf8(uint32_t cp, std::string& out);
size_t Utf8Length(std::string_view s);
std::vector<std::string> Utf8Chars(std::string_view s);
// Byte offset of every code point, plus s.size() at the end.
std::vector<size_t> Utf8Offsets(std::string_view s);
bool IsPySpace(uint32_t cp);

enum class StripSide { kBoth, kLeft, kRight };
// Python str.strip(chars): chars=nullopt strips whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, StripSide side);
// Python str.split(sep, maxsplit) / rsplit; sep=nullopt splits on whitespace runs.
std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right);
std::string PyReplace(std::string_view s, std::string_view old, std::string_view repl,
                      int64_t count);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);
// jinja2's |title: words split at whitespace and -({[<, first letter upper, rest lower.
std::string JinjaTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);

}  // namespace shardlm::jinja
