// Random mutations of a JSON request text for the parser fuzz tests: bytes erased, replaced or
// inserted (brackets, quotes, huge and invalid numbers, invalid UTF-8) and balanced runs of
// deep nesting, so a parser sees both near-valid and hostile bodies.
#pragma once

#include <filesystem>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "server/chat_format.h"
#include "server/mock_engine.h"
#include "server/openai_types.h"
#include "support/fixtures.h"

namespace shardlm::server {

// Random mutations of valid requests: the parser returns ok or an error, never throws or
// crashes, and (through the whole request path) never produces a broken request.
inline std::string Mutate(std::string s, std::mt19937& rng) {
  static const char* kInserts[] = {
      "{",    "}",  "[",     "]",    "\"",          ",",    ":",
      "null", "-1", "1e309", "true", "\"\\u0000\"", "\xff", "9999999999999999999",
      "[]"};
  int n = 1 + rng() % 4;
  for (int i = 0; i < n && !s.empty(); ++i) {
    size_t pos = rng() % s.size();
    switch (rng() % 4) {
      case 3: {  // deep nesting, balanced, anywhere (inside a string it is a JSON text)
        const size_t depth = rng() % 16 != 0 ? 1 + rng() % 100 : 50000 + rng() % 150000;
        const bool arrays = rng() % 2 == 0;
        std::string run;
        for (size_t d = 0; d < depth; ++d) run += arrays ? "[" : "{\\\"a\\\":";
        run += "1";
        run += std::string(depth, arrays ? ']' : '}');
        s.insert(pos, run);
        break;
      }
      case 0:
        s.erase(pos, 1 + rng() % 3);
        break;
      case 1:
        s.insert(pos, kInserts[rng() % std::size(kInserts)]);
        break;
      default:
        s[pos] = static_cast<char>(rng() % 256);
    }
  }
  return s;
}

// Feeds `iterations` random mutations of the seeds (taken in turn) to `parse`, which gives
// a chat request or nothing for a body its API refuses; every request is rendered by the
// default template and, when the fixtures are there, by Qwen3's (tools and thinking).
// Returns how many bodies parsed.
template <typename Parse>
int FuzzThroughTemplates(std::span<const std::string> seeds, uint32_t rng_seed, int iterations,
                         Parse parse) {
  MockTokenizer tokenizer;
  std::vector<ChatFormatter> formatters;
  formatters.push_back(ChatFormatter::Create("", tokenizer).value());
  const std::string qwen3 = shardlm::testing::FixturePath("templates/Qwen-Qwen3-0.6B.jinja");
  if (std::filesystem::exists(qwen3)) {
    formatters.push_back(
        ChatFormatter::Create(shardlm::testing::ReadTextFile(qwen3), tokenizer).value());
  }
  std::mt19937 rng(rng_seed);
  int ok = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    Result<Json> body = ParseBody(Mutate(seeds[iter % seeds.size()], rng));
    if (!body.ok()) continue;
    std::optional<ChatCompletionRequest> request = parse(body.value());
    if (!request) continue;
    ++ok;
    for (const ChatFormatter& f : formatters) (void)f.Render(*request);
  }
  return ok;
}

}  // namespace shardlm::server
