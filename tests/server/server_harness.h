// ServerTest: a fixture that runs an HttpServer over a MockEngine on a free port, with a
// client and helpers for OpenAI error objects and SSE bodies. Shared by tests/server/*.
//
// Goals: each test starts its own server (options of its choice) in milliseconds.
// Non-goals: a real model (tests/e2e drives the real binary).
//
// Thread safety: one test thread; the server runs on its own thread until TearDown.
// Lifetime: the server stops and the engine is destroyed in TearDown.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/http_server.h"
#include "server/mock_engine.h"

namespace shardlm::server {

using nlohmann::json;

class ServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options = {}, MockEngineOptions engine_options = {}) {
    engine_ = std::make_unique<MockEngine>(engine_options);
    options.port = 0;
    options.max_body_bytes = 1 << 20;
    auto server = HttpServer::Create(*engine_, options);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server.value());
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] { server_->Run(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
    for (int i = 0; i < 100; ++i) {
      if (client_->Get("/health")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  void SetUp() override {}
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
    engine_.reset();
  }
  httplib::Result Post(const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), body, "application/json");
  }
  // Asserts an OpenAI error object with this status; returns it.
  json ExpectError(const httplib::Result& r, int status) {
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, status) << r->body;
    json j = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.contains("error")) << r->body;
    if (!j.contains("error")) return json();
    for (const char* k : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(j["error"].contains(k)) << k << " in " << r->body;
    }
    return j["error"];
  }

  std::unique_ptr<MockEngine> engine_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

// A raw TCP connection to the server, for what an HTTP client library will not send: chunked
// or truncated bodies, slow or bad heads, pipelined requests, clients that just leave.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawConnection() { Close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(size_t(n));
    }
    return true;
  }
  // Reads until `needle` has arrived (empty: until the server closes) or `timeout` passes.
  std::string ReadUntil(std::string_view needle,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (needle.empty() || received_.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_by_peer_ = true;
        break;
      }
      received_.append(buf, size_t(n));
    }
    return received_;
  }
  std::string ReadAll(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    return ReadUntil("", timeout);
  }
  bool closed_by_peer() const { return closed_by_peer_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_by_peer_ = false;
  std::string received_;
};

// One request on a new connection; everything the server sent until it closed.
inline std::string RawExchange(int port, const std::string& request) {
  RawConnection c(port);
  if (!c.Send(request)) return "";
  return c.ReadAll();
}

// Splits an SSE body into its data payloads.
inline std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

}  // namespace shardlm::server
