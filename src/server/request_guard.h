// RequestGuard: the checks a request passes before its body is read — who may talk to the
// server at all.
//
//   - Host (DNS rebinding): on a loopback bind, the Host header must name this server by a
//     loopback name (localhost, 127.0.0.1, [::1], or the bound address) with its port. A web
//     page whose own host name was made to resolve to 127.0.0.1 sends its own name and is
//     refused. On another bind the user chose to be reachable, and Host is not checked.
//   - Origin (browsers): browsers send Origin on every cross-origin request, including the
//     "simple" text/plain and form POSTs that need no preflight, so any web page the user
//     visits could otherwise drive a local server. A request with an Origin that is neither
//     the server's own origin (http:// + its Host) nor the `--cors-origin` one is refused.
//     curl and the SDKs send no Origin and pass.
//   - CORS: off unless one origin is named; then its preflight (OPTIONS) is answered and its
//     responses carry Access-Control-Allow-Origin for it.
//   - API key: `Authorization: Bearer KEY` or `x-api-key: KEY`, compared in constant time;
//     /health needs none.
//
// Goals: refusals that say what was refused and how to allow it; no dependency on the HTTP
// library (plain HttpRequest values, testable alone).
// Non-goals: TLS, rate limiting, several keys or origins.
//
// Thread safety: immutable after construction; the checks may run concurrently.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_message.h"
#include "server/openai_types.h"

namespace shardlm::server {

struct GuardOptions {
  std::string bind_host = "127.0.0.1";  // --host
  int port = 0;                         // the bound port
  std::string api_key;                  // empty: no authentication
  std::string cors_origin;              // e.g. "http://localhost:3000"; empty: CORS off
};

class RequestGuard {
 public:
  explicit RequestGuard(GuardOptions options);

  // The Host and Origin checks: the 403 to send, or nullopt.
  std::optional<ApiError> CheckSource(const HttpRequest& request) const;
  // An OPTIONS request (CORS preflight, or a plain one): its answer.
  HttpResponse Options(const HttpRequest& request) const;
  // The API key check (every path but /health): the 401 to send, or nullopt.
  std::optional<ApiError> CheckKey(const HttpRequest& request) const;
  // Headers every response to this request carries (Access-Control-Allow-Origin for the
  // allowed origin, and Vary: Origin whenever CORS is on).
  std::vector<HttpHeader> ResponseHeaders(const HttpRequest& request) const;

  bool loopback() const { return loopback_; }

 private:
  bool HostAllowed(std::string_view host) const;
  bool OriginAllowed(std::string_view origin, const HttpRequest& request) const;

  GuardOptions options_;
  bool loopback_;
  std::vector<std::string> allowed_hosts_;  // lower case, with the port
};

// Whether `host` (a --host value) is a loopback address or name.
bool IsLoopbackHost(std::string_view host);
// a == b in time that depends only on their lengths, not on where they differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace shardlm::server
