// RequestGuard on plain requests: Host on a loopback bind (DNS rebinding), browser Origin,
// CORS preflight and headers, the API key; and the log-safe text of request fields.
#include "server/request_guard.h"

#include <gtest/gtest.h>

namespace shardlm::server {
namespace request_guard_test {

RequestGuard Guard(std::string bind_host, int port, std::string api_key = "",
                   std::string cors_origin = "") {
  GuardOptions o;
  o.bind_host = std::move(bind_host);
  o.port = port;
  o.api_key = std::move(api_key);
  o.cors_origin = std::move(cors_origin);
  return RequestGuard(o);
}

HttpRequest Request(std::vector<HttpHeader> headers, std::string path = "/v1/models") {
  HttpRequest r;
  r.method = "GET";
  r.path = path;
  r.target = path;
  r.headers = std::move(headers);
  return r;
}

TEST(RequestGuard, LoopbackBindAnswersOnlyLoopbackHosts) {
  RequestGuard guard = Guard("127.0.0.1", 8080);
  EXPECT_TRUE(guard.loopback());
  for (const char* host : {"localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST:8080"}) {
    EXPECT_FALSE(guard.CheckSource(Request({{"host", host}}))) << host;
  }
  EXPECT_FALSE(guard.CheckSource(Request({})));  // HTTP/1.0 without Host
  for (const char* host : {"evil.example:8080", "localhost:9090", "localhost", "127.0.0.1",
                           "attacker.localhost:8080", "127.0.0.1:8080.evil"}) {
    std::optional<ApiError> e = guard.CheckSource(Request({{"host", host}}));
    ASSERT_TRUE(e) << host;
    EXPECT_EQ(e->http_status, 403);
    EXPECT_EQ(e->code, "host_not_allowed");
  }
  // Another bind address is the user's choice to be reachable by that name: not checked.
  RequestGuard lan = Guard("0.0.0.0", 8080);
  EXPECT_FALSE(lan.loopback());
  EXPECT_FALSE(lan.CheckSource(Request({{"host", "box.lan:8080"}})));
  RequestGuard other_loopback = Guard("127.0.0.2", 80);
  EXPECT_FALSE(other_loopback.CheckSource(Request({{"host", "127.0.0.2"}})));
}

TEST(RequestGuard, ForeignBrowserOriginsAreRefused) {
  RequestGuard guard = Guard("127.0.0.1", 8080);
  const HttpHeader host{"host", "localhost:8080"};
  // Same origin (a page this server served) and no Origin at all (curl, SDKs) pass.
  EXPECT_FALSE(guard.CheckSource(Request({host, {"origin", "http://localhost:8080"}})));
  EXPECT_FALSE(guard.CheckSource(Request({host})));
  for (const char* origin : {"http://evil.example", "null", "https://localhost:8080",
                             "http://localhost:3000", "file://"}) {
    std::optional<ApiError> e = guard.CheckSource(Request({host, {"origin", origin}}));
    ASSERT_TRUE(e) << origin;
    EXPECT_EQ(e->http_status, 403);
    EXPECT_EQ(e->code, "origin_not_allowed");
    EXPECT_NE(e->message.find("--cors-origin"), std::string::npos);
  }
  EXPECT_TRUE(guard.ResponseHeaders(Request({host, {"origin", "http://evil.example"}})).empty());
}

TEST(RequestGuard, CorsForTheOneNamedOrigin) {
  RequestGuard guard = Guard("127.0.0.1", 8080, "", "http://localhost:3000");
  const HttpHeader host{"host", "localhost:8080"};
  HttpRequest allowed = Request({host, {"origin", "http://localhost:3000"}});
  EXPECT_FALSE(guard.CheckSource(allowed));
  EXPECT_TRUE(guard.CheckSource(Request({host, {"origin", "http://localhost:3001"}})));
  std::vector<HttpHeader> h = guard.ResponseHeaders(allowed);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].name, "Access-Control-Allow-Origin");
  EXPECT_EQ(h[1].value, "http://localhost:3000");

  allowed.method = "OPTIONS";
  allowed.headers.push_back(
      {"access-control-request-headers", "authorization, x-stainless-os\r\nX: y"});
  HttpResponse pre = guard.Options(allowed);
  EXPECT_EQ(pre.status, 204);
  bool methods = false;
  for (const HttpHeader& x : pre.headers) {
    if (x.name == "Access-Control-Allow-Methods") methods = true;
    if (x.name == "Access-Control-Allow-Headers") {
      EXPECT_EQ(x.value.find('\r'), std::string::npos);  // nothing injected
      EXPECT_NE(x.value.find("x-stainless-os"), std::string::npos);
    }
  }
  EXPECT_TRUE(methods);
}

TEST(RequestGuard, ApiKeyByBearerOrHeaderButNotOnHealth) {
  RequestGuard guard = Guard("127.0.0.1", 1, "sekrit");
  EXPECT_FALSE(guard.CheckKey(Request({{"authorization", "Bearer sekrit"}})));
  EXPECT_FALSE(guard.CheckKey(Request({{"x-api-key", "sekrit"}})));
  EXPECT_FALSE(guard.CheckKey(Request({}, "/health")));
  for (const char* wrong : {"Bearer sekri", "Bearer sekrit2", "bearer sekrit", "sekrit", ""}) {
    std::optional<ApiError> e = guard.CheckKey(Request({{"authorization", wrong}}));
    ASSERT_TRUE(e) << wrong;
    EXPECT_EQ(e->http_status, 401);
  }
  EXPECT_TRUE(guard.CheckKey(Request({})));
  RequestGuard open(GuardOptions{});
  EXPECT_FALSE(open.CheckKey(Request({})));
}

TEST(RequestGuard, ConstantTimeEqualsIsEquality) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", std::string("abc\0", 4)));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
}

TEST(HttpMessage, LogSafeTextCannotForgeLines) {
  EXPECT_EQ(LogSafe("/v1/models"), "/v1/models");
  EXPECT_EQ(LogSafe("/x\r\nserve: fake line\x1b[31m\"\\"),
            "/x\\x0d\\x0aserve: fake line\\x1b[31m\\x22\\x5c");
  EXPECT_EQ(LogSafe(std::string(300, 'a'), 10), "aaaaaaaaaa...");
  EXPECT_EQ(LogSafe("\xc3\xa9"), "\\xc3\\xa9");
}

TEST(HttpMessage, QueryParamsAndHeaders) {
  HttpRequest r;
  r.query = "action=save&x=a%20b+c&flag&bad=%zz%4";
  EXPECT_EQ(r.QueryParam("action"), "save");
  EXPECT_EQ(r.QueryParam("x"), "a b c");
  EXPECT_EQ(r.QueryParam("flag"), "");
  EXPECT_EQ(r.QueryParam("bad"), "%zz%4");
  EXPECT_EQ(r.QueryParam("missing"), "");
  r.headers = {{"content-type", "a"}, {"content-type", "b"}};
  EXPECT_EQ(r.HeaderOr("content-type"), "a");
  EXPECT_EQ(r.HeaderOr("nope", "fallback"), "fallback");
}

}  // namespace request_guard_test
}  // namespace shardlm::server
