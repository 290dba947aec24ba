// The HTTP transport under what real clients and hostile ones send, over raw sockets: chunked
// bodies (read under the size limit), refusals before the body (Origin, Host, size), slow and
// truncated requests, pipelining and keep-alive, 100-continue, HTTP/1.0 streams, and a client
// that leaves while it waits for a whole response (its request is cancelled).
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/server_harness.h"

namespace shardlm::server {
namespace http_transport_test {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kChat = R"({"messages":[{"role":"user","content":"hi"}]})";

class TransportTest : public ServerTest {
 protected:
  std::string Host() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  // A request head for `method target` with our Host and `extra` header lines.
  std::string Head(const std::string& method, const std::string& target,
                   const std::string& extra = "") const {
    return method + " " + target + " HTTP/1.1\r\nHost: " + Host() + "\r\n" + extra + "\r\n";
  }
  std::string Post(const std::string& target, const std::string& body,
                   const std::string& extra = "") const {
    return Head("POST", target,
                "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\n" + extra) +
           body;
  }
  void ExpectServing() {
    auto r = client_->Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
};

std::string Chunked(const std::string& body, size_t piece) {
  std::string out;
  for (size_t i = 0; i < body.size(); i += piece) {
    const std::string part = body.substr(i, piece);
    out += fmt::format("{:x}\r\n{}\r\n", part.size(), part);
  }
  return out + "0\r\n\r\n";
}

TEST_F(TransportTest, ChunkedBodiesAreReadUnderTheLimit) {
  StartServer();
  engine_->SetReply("chunked ok");
  RawConnection c(server_->port());
  ASSERT_TRUE(c.Send(
      Head("POST", "/v1/chat/completions", "Transfer-Encoding: chunked\r\nConnection: close\r\n") +
      Chunked(kChat, 7)));
  std::string out = c.ReadAll();
  EXPECT_NE(out.find("200 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("chunked ok"), std::string::npos) << out;

  // Past the limit (1 MiB in the harness): 413 as soon as it is passed, not after the rest.
  RawConnection big(server_->port());
  ASSERT_TRUE(big.Send(Head("POST", "/v1/chat/completions", "Transfer-Encoding: chunked\r\n")));
  const std::string chunk = fmt::format("{:x}\r\n{}\r\n", 65536, std::string(65536, ' '));
  bool refused = false;
  for (int i = 0; i < 64 && !refused; ++i) {
    if (!big.Send(chunk)) break;
    refused = big.ReadUntil("\r\n\r\n", 1ms).find("413") != std::string::npos;
  }
  std::string answer = big.ReadUntil("}}", 5s);
  EXPECT_NE(answer.find("413 Payload Too Large"), std::string::npos) << answer.substr(0, 300);
  EXPECT_NE(answer.find("larger than 1048576 bytes"), std::string::npos);
  EXPECT_EQ(engine_->Stats().requests_total, 1);
  ExpectServing();
}

// A client that writes its whole body before it reads a byte (most do), here 32 times the
// limit: the server refuses at the limit, then reads and drops the rest until the client is
// done. Closing early would reset the connection, and the client would see a broken write
// instead of the 413 already sent to it.
TEST_F(TransportTest, AClientThatWritesItsWholeOversizedBodyReadsTheRefusal) {
  StartServer();
  RawConnection big(server_->port());
  const std::string chunk = fmt::format("{:x}\r\n{}\r\n", 1 << 20, std::string(1 << 20, 'x'));
  std::string body;
  for (int i = 0; i < 32; ++i) body += chunk;
  EXPECT_TRUE(big.Send(Head("POST", "/v1/completions", "Transfer-Encoding: chunked\r\n") + body +
                       "0\r\n\r\n"));
  const std::string answer = big.ReadUntil("}}", 5s);
  EXPECT_NE(answer.find("413 Payload Too Large"), std::string::npos) << answer.substr(0, 300);
  EXPECT_EQ(engine_->Stats().requests_total, 0);
  ExpectServing();
}

TEST_F(TransportTest, RefusalsComeBeforeTheBody) {
  StartServer();
  // A web page's "simple" cross-origin POST (text/plain, no preflight): refused, never run.
  RawConnection page(server_->port());
  ASSERT_TRUE(page.Send(Head("POST", "/v1/completions",
                             "Origin: http://evil.example\r\nContent-Type: text/plain\r\n"
                             "Content-Length: 16\r\n") +
                        R"({"prompt":"pwn"})"));
  std::string out = page.ReadAll();
  EXPECT_NE(out.find("403 Forbidden"), std::string::npos) << out;
  EXPECT_NE(out.find("origin_not_allowed"), std::string::npos) << out;
  // Before the size: a foreign page announcing a huge body is told it is foreign.
  RawConnection huge(server_->port());
  ASSERT_TRUE(huge.Send(Head("POST", "/v1/completions",
                             "Origin: http://evil.example\r\nContent-Length: 999999999\r\n")));
  EXPECT_NE(huge.ReadAll().find("403"), std::string::npos);
  // DNS rebinding: the page's own name in Host.
  out = RawExchange(server_->port(), "GET /v1/models HTTP/1.1\r\nHost: rebind.example:" +
                                         std::to_string(server_->port()) +
                                         "\r\nConnection: close\r\n\r\n");
  EXPECT_NE(out.find("403"), std::string::npos) << out;
  EXPECT_NE(out.find("host_not_allowed"), std::string::npos) << out;
  // An announced body over the limit: 413 without reading it.
  RawConnection big(server_->port());
  ASSERT_TRUE(big.Send(Head("POST", "/v1/completions", "Content-Length: 999999999\r\n")));
  out = big.ReadAll(5s);
  EXPECT_NE(out.find("413"), std::string::npos) << out;
  EXPECT_EQ(engine_->Stats().requests_total, 0);
  ExpectServing();
}

TEST_F(TransportTest, CorsOriginGetsPreflightAndHeaders) {
  ServerOptions o;
  o.cors_origin = "http://localhost:3000";
  StartServer(o);
  std::string out =
      RawExchange(server_->port(),
                  Head("OPTIONS", "/v1/chat/completions",
                       "Origin: http://localhost:3000\r\nAccess-Control-Request-Method: POST\r\n"
                       "Access-Control-Request-Headers: authorization,content-type\r\n"
                       "Connection: close\r\n"));
  EXPECT_NE(out.find("204 No Content"), std::string::npos) << out;
  EXPECT_NE(out.find("Access-Control-Allow-Origin: http://localhost:3000"), std::string::npos);
  EXPECT_NE(out.find("Access-Control-Allow-Headers: authorization,content-type"),
            std::string::npos);
  out =
      RawExchange(server_->port(), Post("/v1/chat/completions", kChat,
                                        "Origin: http://localhost:3000\r\nConnection: close\r\n"));
  EXPECT_NE(out.find("200 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("Access-Control-Allow-Origin: http://localhost:3000"), std::string::npos);
  out =
      RawExchange(server_->port(), Post("/v1/chat/completions", kChat,
                                        "Origin: http://localhost:4000\r\nConnection: close\r\n"));
  EXPECT_NE(out.find("403"), std::string::npos) << out;
}

TEST_F(TransportTest, SlowAndIdleClientsHoldNoThread) {
  ServerOptions o;
  o.header_timeout = 300ms;
  o.n_threads = 2;
  StartServer(o);
  // More slow clients than handler threads: each sends part of a head and stalls.
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<RawConnection>(server_->port()));
    ASSERT_TRUE(slow.back()->Send("GET /health HTTP/1.1\r\nHost: "));
  }
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(std::make_unique<RawConnection>(server_->port()));
  const auto start = std::chrono::steady_clock::now();
  ExpectServing();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 200ms);
  // The slow ones get 408 once their time is up, and are closed.
  std::string out = slow[0]->ReadAll(3s);
  EXPECT_NE(out.find("408 Request Timeout"), std::string::npos) << out;
  EXPECT_TRUE(slow[0]->closed_by_peer());
}

TEST_F(TransportTest, MalformedAndTruncatedRequests) {
  StartServer();
  for (const std::string& bad :
       {std::string("GARBAGE\r\n\r\n"), std::string("GET / HTTP/9.9\r\n\r\n"),
        Head("GET", "/health", "Bad Header\r\n"), Head("GET", "/health", "X: a\rb\r\n"),
        Head("POST", "/v1/completions", "Content-Length: 5\r\nContent-Length: 6\r\n") + "12345",
        Head("POST", "/v1/completions", "Content-Length: -1\r\n"),
        Head("POST", "/v1/completions", "Transfer-Encoding: chunked\r\n") + "zz\r\nxx\r\n"}) {
    std::string out = RawExchange(server_->port(), bad);
    EXPECT_NE(out.find("400 Bad Request"), std::string::npos) << bad << "\n→ " << out;
  }
  {
    RawConnection cut(server_->port());  // a body that never completes, then the client leaves
    ASSERT_TRUE(cut.Send(Head("POST", "/v1/completions", "Content-Length: 100\r\n") + "{\"pro"));
  }
  {
    RawConnection cut(server_->port());  // half a head
    ASSERT_TRUE(cut.Send("POST /v1/compl"));
  }
  std::string too_long = "GET /health HTTP/1.1\r\nX: " + std::string(70000, 'a') + "\r\n\r\n";
  EXPECT_NE(RawExchange(server_->port(), too_long).find("431"), std::string::npos);
  EXPECT_EQ(engine_->Stats().requests_total, 0);
  ExpectServing();
}

TEST_F(TransportTest, KeepAlivePipeliningAndContinue) {
  StartServer();
  engine_->SetReply("r");
  RawConnection c(server_->port());
  // Two requests in one write, answered in order on the same connection.
  ASSERT_TRUE(c.Send(Head("GET", "/health") + Post("/v1/completions", R"({"prompt":"x"})")));
  std::string out = c.ReadUntil("\"text\"");
  EXPECT_NE(out.find("{\"status\":\"ok\"}"), std::string::npos) << out;
  EXPECT_NE(out.find("text_completion"), std::string::npos) << out;
  // The connection is still open for a third.
  ASSERT_TRUE(c.Send(Head("GET", "/health", "Connection: close\r\n")));
  out = c.ReadAll();
  EXPECT_EQ(std::count(out.begin(), out.end(), 'H') >= 3, true);
  size_t oks = 0;
  for (size_t p = 0; (p = out.find("HTTP/1.1 200", p)) != std::string::npos; ++p) ++oks;
  EXPECT_EQ(oks, 3u) << out;

  RawConnection expect(server_->port());
  const std::string body = R"({"prompt":"x"})";
  ASSERT_TRUE(expect.Send(
      Head("POST", "/v1/completions",
           "Expect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) + "\r\n")));
  EXPECT_NE(expect.ReadUntil("\r\n\r\n", 3s).find("HTTP/1.1 100 Continue"), std::string::npos);
  ASSERT_TRUE(expect.Send(body));
  EXPECT_NE(expect.ReadUntil("text_completion").find("200 OK"), std::string::npos);
}

TEST_F(TransportTest, Http10StreamEndsWithTheConnection) {
  StartServer();
  engine_->SetReply("abc");
  const std::string body = R"({"prompt":"x","stream":true})";
  std::string out =
      RawExchange(server_->port(), "POST /v1/completions HTTP/1.0\r\nContent-Length: " +
                                       std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_NE(out.find("HTTP/1.0 200 OK"), std::string::npos) << out;
  EXPECT_EQ(out.find("Transfer-Encoding"), std::string::npos) << out;
  EXPECT_NE(out.find("data: [DONE]"), std::string::npos) << out;
}

// A client that gives up on a whole (non-streamed) response frees its slot at once: its
// request is cancelled, not run until max_tokens or the context is full.
TEST_F(TransportTest, ClientGoneWhileWaitingForAWholeResponseCancels) {
  StartServer();
  engine_->SetReply(std::string(250, 'z'));
  engine_->SetTokenDelayMs(20);
  {
    RawConnection c(server_->port());
    ASSERT_TRUE(c.Send(Post("/v1/completions", R"({"prompt":"x","ignore_eos":true})")));
    std::this_thread::sleep_for(100ms);
  }  // closed
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200 && engine_->cancelled_count() == 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(engine_->cancelled_count(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  engine_->SetTokenDelayMs(0);
  ExpectServing();
}

}  // namespace http_transport_test
}  // namespace shardlm::server
