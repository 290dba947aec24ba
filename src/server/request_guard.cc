// Host, Origin, CORS and API key checks (see request_guard.h).
#include "server/request_guard.h"

#include <fmt/format.h>

#include <cctype>

namespace shardlm::server {
namespace {

ApiError Forbidden(std::string message, std::string code) {
  ApiError e;
  e.http_status = 403;
  e.type = "permission_error";
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

// The Host form of an address: IPv6 literals in brackets.
std::string HostForm(std::string_view host) {
  if (host.find(':') != std::string_view::npos && !host.starts_with('[')) {
    return fmt::format("[{}]", host);
  }
  return std::string(host);
}

}  // namespace

bool IsLoopbackHost(std::string_view host) {
  const std::string h = AsciiLower(host);
  return h == "localhost" || h == "::1" || h == "[::1]" || h.starts_with("127.");
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of `a` is compared against a byte of `b` (or 0 past its end), so the time
  // depends on a's length only; the length difference is folded into the result.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const unsigned char bc = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(a[i]) ^ bc;
  }
  return diff == 0;
}

RequestGuard::RequestGuard(GuardOptions options)
    : options_(std::move(options)), loopback_(IsLoopbackHost(options_.bind_host)) {
  std::vector<std::string> names = {"localhost", "127.0.0.1", "[::1]",
                                    AsciiLower(HostForm(options_.bind_host))};
  for (const std::string& name : names) {
    allowed_hosts_.push_back(fmt::format("{}:{}", name, options_.port));
    if (options_.port == 80) allowed_hosts_.push_back(name);
  }
}

bool RequestGuard::HostAllowed(std::string_view host) const {
  const std::string h = AsciiLower(host);
  for (const std::string& allowed : allowed_hosts_) {
    if (h == allowed) return true;
  }
  return false;
}

bool RequestGuard::OriginAllowed(std::string_view origin, const HttpRequest& request) const {
  const std::string o = AsciiLower(origin);
  if (!options_.cors_origin.empty() && o == AsciiLower(options_.cors_origin)) return true;
  const std::string* host = request.Header("host");
  return host && o == "http://" + AsciiLower(*host);
}

std::optional<ApiError> RequestGuard::CheckSource(const HttpRequest& request) const {
  // HTTP/1.0 clients may send no Host; browsers always do, so nothing is lost.
  const std::string* host = request.Header("host");
  if (loopback_ && host && !HostAllowed(*host)) {
    return Forbidden(fmt::format("Host '{}' is not this server: a server on a loopback address "
                                 "answers only localhost, 127.0.0.1 or [::1] with its port {}",
                                 LogSafe(*host, 200), options_.port),
                     "host_not_allowed");
  }
  const std::string* origin = request.Header("origin");
  if (origin && !OriginAllowed(*origin, request)) {
    return Forbidden(fmt::format("requests from web pages of origin '{}' are refused (start the "
                                 "server with --cors-origin ORIGIN to allow one origin)",
                                 LogSafe(*origin, 200)),
                     "origin_not_allowed");
  }
  return std::nullopt;
}

HttpResponse RequestGuard::Options(const HttpRequest& request) const {
  HttpResponse r;
  r.status = 204;
  r.content_type.clear();
  r.headers = ResponseHeaders(request);
  r.headers.push_back({"Allow", "GET, POST, OPTIONS"});
  if (!options_.cors_origin.empty() && request.Header("origin")) {
    r.headers.push_back({"Access-Control-Allow-Methods", "GET, POST, OPTIONS"});
    // Echo the headers the page asks for (an SDK sends its own x-stainless-* ones), keeping
    // only header-name characters so nothing can be injected into the response.
    std::string asked = request.HeaderOr("access-control-request-headers");
    std::erase_if(asked, [](char c) {
      return !(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' ||
               c == ' ');
    });
    r.headers.push_back(
        {"Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked});
    r.headers.push_back({"Access-Control-Max-Age", "600"});
  }
  return r;
}

std::optional<ApiError> RequestGuard::CheckKey(const HttpRequest& request) const {
  if (options_.api_key.empty() || request.path == "/health") return std::nullopt;
  const std::string bearer = "Bearer " + options_.api_key;
  const std::string* auth = request.Header("authorization");
  const std::string* x_key = request.Header("x-api-key");
  // Both are compared, whatever the first says, so the time does not tell which was sent.
  const bool by_auth = auth && ConstantTimeEquals(bearer, *auth);
  const bool by_x_key = x_key && ConstantTimeEquals(options_.api_key, *x_key);
  if (by_auth || by_x_key) return std::nullopt;
  ApiError e;
  e.http_status = 401;
  e.message = "invalid or missing API key (send Authorization: Bearer <key>)";
  e.code = "invalid_api_key";
  return e;
}

std::vector<HttpHeader> RequestGuard::ResponseHeaders(const HttpRequest& request) const {
  std::vector<HttpHeader> headers;
  if (options_.cors_origin.empty()) return headers;
  headers.push_back({"Vary", "Origin"});
  const std::string* origin = request.Header("origin");
  if (origin && AsciiLower(*origin) == AsciiLower(options_.cors_origin)) {
    headers.push_back({"Access-Control-Allow-Origin", options_.cors_origin});
  }
  return headers;
}

}  // namespace shardlm::server
