// `shardlm shard`: the remote stage daemon (shard/shard_service.h). A server started with
// `--devices ...,unix:NAME` connects to it and tells it which model file and layers to load.
//
// Goals: ready when it says so ("shard: listening on unix:PATH (N threads)" on stderr, with the
// socket's full path: the line scripts and tests wait for); SIGINT/SIGTERM stop it cleanly (the
// session ends, the socket file is removed); a bad flag is a clear error before anything listens;
// servers of another uid are refused unless --allow-uid names it.
// Non-goals: daemonizing, TCP listeners (later: UCX), several stages per daemon.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "pipeline/placement.h"
#include "shard/shard_service.h"

namespace shardlm::cli {
namespace {

struct ShardFlags {
  std::string role;  // `worker` only: what the daemon is for ("prefill")
  std::string listen;
  std::string cores;
  int threads = 0;
  std::vector<uid_t> allow_uids;
  int batch_delay_ms = 0;  // hidden, for tests: a slow stage
};

// worker: `--cores` names cores (a worker runs on cores of its own), never a thread count.
void DeclareFlags(CLI::App& cmd, ShardFlags& f, bool worker) {
  cmd.add_option("--listen", f.listen,
                 "Where to listen: unix:NAME, a socket in $XDG_RUNTIME_DIR/shardlm/ (else "
                 "/tmp/shardlm-$UID/), a folder made 0700; or unix:PATH with a '/', as given. "
                 "The socket is created 0600")
      ->required();
  cmd.add_option("--allow-uid", f.allow_uids,
                 "Also serve servers that run as this uid (repeatable; default: only servers of "
                 "the daemon's own uid)");
  cmd.add_option("--cores", f.cores,
                 worker ? "Compute on: A = core A alone; A-B = cores A..B, one pinned thread "
                          "each (default: every core, unpinned)"
                        : "Compute on: N = N threads, unpinned; A-B = cores A..B, one pinned "
                          "thread each; A-A = core A alone (default: every core, unpinned)");
  cmd.add_option("-t,--threads", f.threads,
                 worker ? "Compute threads, unpinned, without --cores (0: every core)"
                        : "Compute threads when --cores is not a core range (0: every core)")
      ->capture_default_str();
  // Tests use it to have a batch in flight long enough to kill the daemon under it.
  cmd.add_option("--debug-batch-delay-ms", f.batch_delay_ms,
                 "Wait this long before computing each batch (testing only)")
      ->group("");
}

Result<std::string> SocketName(const std::string& listen) {
  constexpr std::string_view kPrefix = "unix:";
  if (listen.rfind(kPrefix, 0) != 0 || listen.size() == kPrefix.size()) {
    return InvalidArgument("--listen '{}': expected unix:NAME or unix:PATH", listen);
  }
  return listen.substr(kPrefix.size());
}

// A whole decimal number, or -1.
int ParseCount(const std::string& text) {
  if (text.empty() || text.size() > 6) return -1;
  int n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

// Fills the device (pinned cores) or the thread count from --cores and --threads.
Status ParseCores(const ShardFlags& f, ShardServiceOptions& options) {
  options.threads = f.threads;
  if (f.cores.empty()) return Status::Ok();
  const size_t dash = f.cores.find('-');
  // A worker's single number is a core: A is A-A.
  if (dash == std::string::npos && !f.role.empty()) {
    ShardFlags range = f;
    range.cores = f.cores + "-" + f.cores;
    return ParseCores(range, options);
  }
  if (dash == std::string::npos) {
    const int n = ParseCount(f.cores);
    if (n <= 0) {
      return InvalidArgument("--cores '{}': expected a thread count N or a core range A-B",
                             f.cores);
    }
    if (f.threads != 0 && f.threads != n) {
      return InvalidArgument("--cores {} and --threads {} disagree; give one", n, f.threads);
    }
    options.threads = n;
    return Status::Ok();
  }
  if (f.threads != 0) return InvalidArgument("--threads does not combine with a core range");
  const int first = ParseCount(f.cores.substr(0, dash));
  const int last = ParseCount(f.cores.substr(dash + 1));
  const int hardware = std::max(1, int(std::thread::hardware_concurrency()));
  if (first < 0 || last < first) {
    return InvalidArgument("--cores '{}': expected a core range A-B with A <= B", f.cores);
  }
  if (last >= hardware) {
    return InvalidArgument(
        "--cores '{}': core {} does not exist; this machine has {} cores "
        "(0-{})",
        f.cores, last, hardware, hardware - 1);
  }
  for (int core = first; core <= last; ++core) options.device.cores.push_back(core);
  return Status::Ok();
}

// SIGINT/SIGTERM are blocked in every thread and taken by one waiting thread, which stops the
// service outside of signal context (Stop takes a lock). SIGUSR1 ends that thread when the service
// stopped for another reason.
Status ServeUntilSignal(ShardService& service, const std::string& name) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  std::thread waiter([&service, set, name] {
    int sig = 0;
    if (sigwait(&set, &sig) == 0 && sig != SIGUSR1) {
      std::fprintf(stderr, "%s: %s: stopping\n", name.c_str(),
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      service.Stop();
    }
  });
  Status status = service.Run();
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  return status;
}

// ", pinned to cpu:A-B" when the daemon computes on a core range.
std::string PinnedSuffix(const ShardService& service) {
  const std::string device = service.DeviceDescription();
  if (device.rfind("cpu:", 0) != 0) return "";
  return ", pinned to " + device.substr(0, device.find(' '));
}

// `name`: the command, which prefixes every line ("shard" or "worker").
Status RunShard(const ShardFlags& f, const std::string& name) {
  ShardServiceOptions options;
  SHARDLM_ASSIGN_OR_RETURN(options.socket_path, SocketName(f.listen));
  options.log = [name](const std::string& line) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), line.c_str());
  };
  options.allowed_uids = f.allow_uids;
  options.run_delay_for_test = std::chrono::milliseconds(std::max(0, f.batch_delay_ms));
  SHARDLM_TRY(ParseCores(f, options));
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set,
                  nullptr);  // before any thread starts: all inherit it
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<ShardService> service,
                           ShardService::Create(std::move(options)));
  const int threads = service->threads();
  const std::string pinned = PinnedSuffix(*service);
  std::fprintf(stderr, "%s: listening on unix:%s (%s%d thread%s%s)\n", name.c_str(),
               service->socket_path().c_str(), f.role.empty() ? "" : (f.role + ", ").c_str(),
               threads, threads == 1 ? "" : "s", pinned.c_str());
  std::fflush(stderr);
  Status status = ServeUntilSignal(*service, name);
  service.reset();  // removes the socket file
  if (status.ok()) std::fprintf(stderr, "%s: stopped\n", name.c_str());
  return status;
}

}  // namespace

void AddShardCommand(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("shard",
                                     "Serve one stage of a model to a server over "
                                     "a Unix socket (remote stage daemon)");
  auto flags = std::make_shared<ShardFlags>();
  DeclareFlags(*cmd, *flags, /*worker=*/false);
  cmd->callback([&action, flags] { action = [flags] { return RunShard(*flags, "shard"); }; });
}

// A prefill worker is a shard daemon that a server asks for every layer, with its pages laid over
// the server's own (shard_protocol.h SharedKv): the server sends it the long prompts.
void AddWorkerCommand(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "worker",
      "Prefill long prompts for a server (serve --prefill-worker unix:NAME) into the KV pages it "
      "decodes from, on cores of its own");
  auto flags = std::make_shared<ShardFlags>();
  cmd->add_option("--role", flags->role, "What the worker does: prefill")
      ->required()
      ->check(CLI::IsMember({"prefill"}));
  DeclareFlags(*cmd, *flags, /*worker=*/true);
  cmd->callback([&action, flags] { action = [flags] { return RunShard(*flags, "worker"); }; });
}

}  // namespace shardlm::cli
