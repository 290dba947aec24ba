// Server-sent events of the Responses and Anthropic streams, split for assertions: each
// block must be "event: NAME\ndata: JSON" with the JSON's "type" equal to NAME.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/openai_types.h"

namespace shardlm::server {

struct ParsedSseEvent {
  std::string name;
  Json data;
};

inline std::vector<ParsedSseEvent> ParseSseEvents(const std::string& sse) {
  std::vector<ParsedSseEvent> events;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << sse.substr(pos);
    if (end == std::string::npos) break;
    const std::string block = sse.substr(pos, end - pos);
    pos = end + 2;
    EXPECT_TRUE(block.starts_with("event: ")) << block;
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.substr(nl + 1, 6), "data: ") << block;
    ParsedSseEvent e{block.substr(7, nl - 7), Json::parse(block.substr(nl + 7))};
    EXPECT_EQ(e.data["type"], e.name);
    events.push_back(std::move(e));
  }
  return events;
}

}  // namespace shardlm::server
