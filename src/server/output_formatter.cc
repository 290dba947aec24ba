// SSE and JSON text shared by the output formatters. See output_formatter.h.
#include "server/output_formatter.h"

#include <fmt/format.h>

namespace shardlm::server {

std::string DumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string SseMessage(const Json& j) { return "data: " + DumpJson(j) + "\n\n"; }

std::string SseEvent(std::string_view name, const Json& j) {
  return fmt::format("event: {}\ndata: {}\n\n", name, DumpJson(j));
}

}  // namespace shardlm::server
