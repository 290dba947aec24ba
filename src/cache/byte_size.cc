#include "cache/byte_size.h"

#include <array>
#include <cctype>
#include <string>

namespace shardlm {
namespace {

struct Unit {
  std::string_view name;  // lowercase
  uint64_t bytes;
};

constexpr uint64_t kKi = 1024;
constexpr std::array<Unit, 13> kUnits{{
    {"", 1},
    {"b", 1},
    {"k", kKi},
    {"kib", kKi},
    {"kb", 1000},
    {"m", kKi* kKi},
    {"mib", kKi* kKi},
    {"mb", 1000 * 1000},
    {"g", kKi* kKi* kKi},
    {"gib", kKi* kKi* kKi},
    {"gb", 1000 * 1000 * 1000},
    {"t", kKi* kKi* kKi* kKi},
    {"tib", kKi* kKi* kKi* kKi},
}};
constexpr uint64_t kTb = 1000ULL * 1000 * 1000 * 1000;

Status BadSize(std::string_view text, std::string_view why) {
  return InvalidArgument("bad size '{}': {} (examples: 8GiB, 512MiB, 100000)", text, why);
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  size_t pos = 0;
  uint64_t number = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    const uint64_t digit = static_cast<uint64_t>(text[pos] - '0');
    if (number > (UINT64_MAX - digit) / 10) return BadSize(text, "too large");
    number = number * 10 + digit;
    ++pos;
  }
  if (pos == 0) return BadSize(text, "expected a number of bytes");
  while (pos < text.size() && text[pos] == ' ') ++pos;
  std::string unit;
  for (; pos < text.size(); ++pos) {
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[pos])));
  }
  uint64_t multiplier = 0;
  for (const Unit& u : kUnits) {
    if (u.name == unit) multiplier = u.bytes;
  }
  if (unit == "tb") multiplier = kTb;
  if (multiplier == 0) return BadSize(text, "unknown unit '" + unit + "'");
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(number, multiplier, &bytes)) return BadSize(text, "too large");
  return bytes;
}

}  // namespace shardlm
