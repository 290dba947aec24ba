// HTTP/1.1 messages as the server's handlers see them: a parsed request (method, path,
// query, headers, body) and a response to send, plus the small text rules both need
// (case-insensitive header names, percent-decoded query values, text made safe for a log
// line).
//
// Goals: plain values with no socket and no HTTP library in them, so routes, security
// checks and tests work on them directly.
// Non-goals: parsing bytes off a socket or writing them (http_transport.h), multipart
// bodies, cookies.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardlm::server {

struct HttpHeader {
  std::string name;  // lower case (HTTP header names are case-insensitive)
  std::string value;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // the request target as sent: "/slots/0?action=save"
  std::string path;    // target before '?'
  std::string query;   // target after '?', raw
  int version = 11;    // 10: HTTP/1.0, 11: HTTP/1.1
  std::vector<HttpHeader> headers;
  std::string body;
  std::string remote;  // "address:port" of the client, for logs

  // The first header of that name (give it lower case), or nullptr.
  const std::string* Header(std::string_view lower_name) const;
  std::string HeaderOr(std::string_view lower_name, std::string_view fallback = "") const;
  // A query parameter's percent-decoded value; "" when absent.
  std::string QueryParam(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<HttpHeader> headers;  // beyond Content-Type, Content-Length and Connection
  std::string body;
};

// ASCII lower case (header names, hosts).
std::string AsciiLower(std::string_view s);
// "%2F" → "/", "+" → " "; a malformed escape is kept as is.
std::string PercentDecode(std::string_view s);
// Text a client chose (a path, a header) made safe for one log line: bytes outside printable
// ASCII, quotes and backslashes become \xNN, and it is cut at `max_bytes` ("..." marks the cut),
// so a request cannot forge log lines or fill the log.
std::string LogSafe(std::string_view s, size_t max_bytes = 256);

}  // namespace shardlm::server
