// UTF-8 and GPT-2 byte-level helpers (see unicode_util.h).
#include "tokenizer/unicode_util.h"

#include <array>

namespace shardlm::tokenizer_internal {
namespace {

struct ByteTables {
  std::array<uint32_t, 256> byte_to_cpt{};
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> cpt_to_byte{};  // every alphabet code point is < 512
};

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes keep their value, the other 68 bytes
// are numbered from 256 upwards in byte order.
ByteTables BuildByteTables() {
  ByteTables tables;
  tables.cpt_to_byte.fill(-1);
  auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    uint32_t cpt = printable(b) ? static_cast<uint32_t>(b) : next++;
    tables.byte_to_cpt[b] = cpt;
    AppendUtf8(cpt, &tables.byte_to_utf8[b]);
    tables.cpt_to_byte[cpt] = static_cast<int16_t>(b);
  }
  return tables;
}

const ByteTables& Tables() {
  static const ByteTables tables = BuildByteTables();
  return tables;
}

bool IsContinuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

size_t Utf8SequenceLength(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

void AppendUtf8(uint32_t cpt, std::string* out) {
  if (cpt < 0x80) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

bool DecodeUtf8(std::string_view text, size_t* pos, uint32_t* cpt) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[*pos + i]); };
  const uint8_t lead = byte(0);
  size_t n = 0;
  if (lead < 0x80) {
    *cpt = lead;
    *pos += 1;
    return true;
  } else if ((lead & 0xE0) == 0xC0) {
    n = 2;
    *cpt = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    n = 3;
    *cpt = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    n = 4;
    *cpt = lead & 0x07;
  } else {
    *pos += 1;  // a stray continuation byte or 0xF8..0xFF
    return false;
  }
  if (*pos + n > text.size()) {
    *pos += 1;
    return false;
  }
  for (size_t i = 1; i < n; ++i) {
    if (!IsContinuation(byte(i))) {
      *pos += 1;
      return false;
    }
    *cpt = (*cpt << 6) | (byte(i) & 0x3F);
  }
  *pos += n;
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cpt = 0;
    if (!DecodeUtf8(text, &pos, &cpt) || (cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) {
      cpt = kReplacementChar;
    }
    AppendUtf8(cpt, &out);
  }
  return out;
}

uint32_t ByteToCodepoint(uint8_t byte) { return Tables().byte_to_cpt[byte]; }

std::string_view ByteToUtf8(uint8_t byte) { return Tables().byte_to_utf8[byte]; }

int CodepointToByte(uint32_t cpt) {
  return cpt < Tables().cpt_to_byte.size() ? Tables().cpt_to_byte[cpt] : -1;
}

size_t CompleteUtf8Prefix(std::string_view bytes) {
  // Only the last (up to) 3 bytes can belong to an unfinished sequence.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t byte = static_cast<uint8_t>(bytes[n - back]);
    if (IsContinuation(byte)) continue;
    size_t need = 0;
    if ((byte & 0xE0) == 0xC0) {
      need = 2;
    } else if ((byte & 0xF0) == 0xE0) {
      need = 3;
    } else if ((byte & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? n - back : n;  // held back only while the sequence is unfinished
  }
  return n;
}

}  // namespace shardlm::tokenizer_internal
