// Prefill worker process: what `serve --disagg prefill=cpu:A-B,decode=cpu:C-D` starts beside the
// server — a `shardlm worker --role prefill` child on its own cores, listening on a socket of the
// private socket folder, restarted when it dies (the scheduler reconnects to it on its own), and
// killed when the server loses it (a hung worker would never let a new session start).
//
// Goals: one command gives the same two processes as starting the worker by hand; the child dies
// with the server (PR_SET_PDEATHSIG), even when the server is killed; a child that cannot start
// is an error before the server listens.
// Non-goals: the scheduler's side (engine/scheduler.h "Prefill worker"), other roles or hosts.
//
// Thread safety: Start and the destructor from one thread; a supervisor thread of its own.
// Lifetime: the destructor stops the child (SIGTERM, SIGKILL after a few seconds) and waits for
// it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

namespace shardlm::cli {

// `--disagg prefill=cpu:A[-B][,decode=DEVICE]`: the worker's cores as `--cores` takes them (A-B)
// and the server's own device (empty: the server's --devices, which may list a split).
struct DisaggSpec {
  std::string prefill_cores;
  std::string decode_devices;
};
Result<DisaggSpec> ParseDisaggSpec(const std::string& text);

class PrefillWorkerProcess {
 public:
  // Starts `shardlm worker --role prefill --listen unix:SOCKET --cores CORES` from this
  // executable and waits (up to a minute) until it listens.
  static Result<std::unique_ptr<PrefillWorkerProcess>> Start(const std::string& cores);
  ~PrefillWorkerProcess();
  PrefillWorkerProcess(const PrefillWorkerProcess&) = delete;
  PrefillWorkerProcess& operator=(const PrefillWorkerProcess&) = delete;

  // What serve --prefill-worker takes: unix:NAME.
  const std::string& socket() const { return socket_; }
  // Ends the child `pid` at once (SIGKILL; the supervisor starts another): the server lost it,
  // and a hung worker would otherwise keep its session, and the pages it may write, forever.
  // Does not block; a no-op unless `pid` is the child running now (one that died by itself may
  // already have been replaced).
  void Kill(pid_t pid);

 private:
  PrefillWorkerProcess(std::string exe, std::string cores, std::string socket);
  Result<pid_t> Spawn();
  void Supervise();  // restarts the child until stopping_

  std::string exe_;
  std::string cores_;
  std::string socket_;  // unix:NAME
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  pid_t child_ = -1;  // guarded by mu_
  std::thread supervisor_;
};

}  // namespace shardlm::cli
