// UTF-8 and GPT-2 byte-level helpers shared by the tokenizers and the stream decoder.
//
// Goals: decode UTF-8 the way llama.cpp does (lenient about the lead byte, every invalid
// byte becomes U+FFFD), the GPT-2 byte <-> printable code point table that byte-level BPE
// vocabularies are written in, and a check for how much of a byte string is complete UTF-8.
// Non-goals: Unicode categories (PCRE2 provides them, pretokenizer.cc), normalization.
//
// Thread safety: pure functions; the byte tables are built once, thread-safely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardlm::tokenizer_internal {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces (1 for continuation bytes), by its
// high nibble, as llama.cpp splits text into symbols.
size_t Utf8SequenceLength(uint8_t lead);

// Appends the UTF-8 encoding of `cpt` (which must be a scalar value <= 0x10FFFF).
void AppendUtf8(uint32_t cpt, std::string* out);

// Re-encodes `text` so that it is valid UTF-8: every byte that does not start a well-formed
// sequence becomes U+FFFD (one per byte, as llama.cpp's unicode_cpts_from_utf8); overlong
// forms are re-encoded in their shortest form; surrogates and values above 0x10FFFF become
// U+FFFD.
std::string SanitizeUtf8(std::string_view text);

// The GPT-2 byte-level alphabet: byte b is written as the code point ByteToCodepoint(b)
// (printable bytes map to themselves, the others to 256 + n).
uint32_t ByteToCodepoint(uint8_t byte);
// The UTF-8 text of ByteToCodepoint(byte).
std::string_view ByteToUtf8(uint8_t byte);
// Inverse of ByteToCodepoint; -1 for a code point outside the alphabet.
int CodepointToByte(uint32_t cpt);

// Decodes one code point at text[*pos] leniently (llama.cpp's rules) and advances *pos;
// returns false (advancing one byte) for an invalid sequence.
bool DecodeUtf8(std::string_view text, size_t* pos, uint32_t* cpt);

// Number of leading bytes of `bytes` that form whole characters or invalid bytes, i.e.
// everything except a trailing, still incomplete but so far valid, multi-byte sequence.
size_t CompleteUtf8Prefix(std::string_view bytes);

}  // namespace shardlm::tokenizer_internal
