// HttpTransport under concurrency, with a stub service (no engine): many clients at once on
// kept-alive connections, streamed responses, clients that leave mid-stream, and Stop while
// exchanges are in flight. Built a second time under ThreadSanitizer in CI (it needs only
// the transport's own files), where the hand-offs between the poller and the workers
// (ready, returned and active connections) are checked for races.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "server/http_transport.h"

namespace shardlm::server {
namespace transport_stress_test {

using namespace std::chrono_literals;

// Answers GET /n with "n", streams /stream as 20 chunks, and counts what it saw.
class StubService : public HttpService {
 public:
  std::optional<HttpResponse> CheckHeaders(const HttpRequest& r) override {
    if (r.path == "/refuse") {
      HttpResponse no;
      no.status = 403;
      no.body = "{}";
      return no;
    }
    return std::nullopt;
  }
  void Handle(const HttpRequest& r, ResponseWriter& w) override {
    handled.fetch_add(1);
    if (r.path == "/stream") {
      if (!w.StartStream(200, "text/event-stream", {})) return;
      for (int i = 0; i < 20; ++i) {
        std::this_thread::sleep_for(2ms);
        if (!w.WriteStream("data: " + std::to_string(i) + "\n\n")) {
          gone.fetch_add(1);
          return;
        }
      }
      w.EndStream();
      return;
    }
    HttpResponse ok;
    ok.content_type = "text/plain";
    ok.body = r.path.substr(1) + r.body;
    w.Send(ok);
  }
  HttpResponse ErrorBody(const HttpRequest&, int status,
                         const std::string& message) const override {
    HttpResponse e;
    e.status = status;
    e.body = message;
    return e;
  }
  void OnResponse(const HttpRequest&, int) override { responses.fetch_add(1); }

  std::atomic<int> handled{0};
  std::atomic<int> gone{0};
  std::atomic<int> responses{0};
};

struct Running {
  explicit Running(StubService& service, int workers = 4) {
    TransportOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.n_workers = workers;
    auto t = HttpTransport::Listen(o, service);
    EXPECT_TRUE(t.ok()) << t.status().message();
    transport = std::move(t).value();
    thread = std::thread([this] { transport->Run(); });
  }
  ~Running() {
    transport->Stop();
    thread.join();
  }
  std::unique_ptr<HttpTransport> transport;
  std::thread thread;
};

TEST(TransportStress, ManyClientsOnKeptAliveConnections) {
  StubService service;
  Running running(service);
  std::atomic<int> right{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", running.transport->port());
      client.set_keep_alive(true);
      for (int i = 0; i < 50; ++i) {
        const std::string n = std::to_string(c * 1000 + i);
        auto r = i % 5 == 0 ? client.Post("/" + n, "+body", "text/plain") : client.Get("/" + n);
        if (r && r->status == 200 && r->body == (i % 5 == 0 ? n + "+body" : n)) right.fetch_add(1);
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(right.load(), 400);
  EXPECT_EQ(service.handled.load(), 400);
}

TEST(TransportStress, StreamsRefusalsAndClientsThatLeave) {
  StubService service;
  Running running(service);
  std::vector<std::thread> clients;
  std::atomic<int> complete{0};
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", running.transport->port());
      for (int i = 0; i < 5; ++i) {
        if (c % 2 == 0) {
          int chunks = 0;
          httplib::Request req;
          req.method = "GET";
          req.path = "/stream";
          // Odd rounds leave after three chunks.
          req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
            return ++chunks < 3 || i % 2 == 0;
          };
          auto r = client.send(req);
          if (r && i % 2 == 0) complete.fetch_add(1);
        } else {
          auto r = client.Post("/refuse", std::string(1000, 'x'), "text/plain");
          if (r && r->status == 403) complete.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(complete.load(), 4 * 3 + 4 * 5);
}

TEST(TransportStress, StopWhileExchangesAreInFlight) {
  StubService service;
  auto running = std::make_unique<Running>(service, 2);
  const int port = running->transport->port();
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([port] {
      httplib::Client client("127.0.0.1", port);
      client.set_read_timeout(5, 0);
      client.Get("/stream");
    });
  }
  std::this_thread::sleep_for(10ms);
  const auto start = std::chrono::steady_clock::now();
  running.reset();  // Stop and join while streams run and connections wait for workers
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  for (auto& t : clients) t.join();
}

}  // namespace transport_stress_test
}  // namespace shardlm::server
