// Child processes of the real `shardlm` binary for CLI tests: run one to completion with a
// deadline (stdout and stderr captured), or keep one in the background (a shard daemon)
// until the test kills it.
//
// Goals: a command that should fail but hangs (a server that starts after all) fails the
// test after its deadline instead of hanging ctest; no shell (arguments pass verbatim).
// Non-goals: stdin, environment changes.
//
// Thread safety: one test thread. Lifetime: a BackgroundProcess kills (SIGKILL) and reaps
// its child in the destructor.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "support/fixtures.h"
#include "support/spawn.h"

extern char** environ;

namespace shardlm::testing {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when it could not start
  std::string out;
  std::string err;
};

inline std::string CliTempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("shardlm_cli_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Starts `shardlm args...` with stdout and stderr to files; 0 when it cannot start.
inline pid_t SpawnShardlm(const std::vector<std::string>& args, const std::string& out_path,
                          const std::string& err_path) {
  std::vector<std::string> argv = {ShardlmBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  SpawnOptions options;
  options.stdout_path = out_path;
  options.stderr_path = err_path;
  return SpawnProcess(std::move(argv), options);
}

inline int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs `shardlm args...` to completion; killed (SIGKILL) after `deadline`.
inline ProcessResult RunShardlm(const std::vector<std::string>& args,
                                std::chrono::seconds deadline = std::chrono::seconds(120)) {
  static int serial = 0;
  const std::string tag = std::to_string(serial++);
  const std::string out_path = CliTempPath("out" + tag), err_path = CliTempPath("err" + tag);
  ProcessResult result;
  const pid_t pid = SpawnShardlm(args, out_path, err_path);
  if (pid == 0) return result;
  const auto end = std::chrono::steady_clock::now() + deadline;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result.exit_code = ExitCode(status);
  result.out = ReadTextFile(out_path);
  result.err = ReadTextFile(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return result;
}

// A `shardlm` child left running (a shard daemon); its stderr is readable while it runs.
class BackgroundProcess {
 public:
  explicit BackgroundProcess(const std::vector<std::string>& args)
      : out_path_(CliTempPath("bg_out" + std::to_string(reinterpret_cast<uintptr_t>(this)))),
        err_path_(CliTempPath("bg_err" + std::to_string(reinterpret_cast<uintptr_t>(this)))) {
    pid_ = SpawnShardlm(args, out_path_, err_path_);
  }
  ~BackgroundProcess() {
    Kill();
    std::filesystem::remove(out_path_);
    std::filesystem::remove(err_path_);
  }
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  std::string log() const { return ReadTextFile(out_path_) + ReadTextFile(err_path_); }
  bool running() {
    if (pid_ == 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) pid_ = 0;
    return pid_ != 0;
  }
  // Polls the log for `text` until it appears (true), the child exits or the deadline passes.
  bool WaitFor(const std::string& text, std::chrono::seconds deadline) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (std::chrono::steady_clock::now() < end) {
      if (log().find(text) != std::string::npos) return true;
      if (!running()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void Kill() {
    if (pid_ == 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

 private:
  std::string out_path_;
  std::string err_path_;
  pid_t pid_ = 0;
};

}  // namespace shardlm::testing
