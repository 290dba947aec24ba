// SpawnProcess: starts a child process for the tests that drive real binaries (the CLI, a
// shard daemon, a probe run as another user), with its output in files.
//
// Goals: one place that builds argv and the posix_spawn file actions, so every test starts
// its children the same way. Non-goals: waiting for or killing the child (its caller's).
//
// Thread safety: none needed (a free function). Lifetime: the child is the caller's.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace shardlm::testing {

struct SpawnOptions {
  std::string stdout_path;  // "": inherited
  std::string stderr_path;  // "": inherited, unless stderr_to_stdout
  bool stderr_to_stdout = false;
  std::string working_dir;   // "": the parent's
  bool search_path = false;  // argv[0] is looked up on PATH
};

// The child's pid, or 0 when it could not be started.
inline pid_t SpawnProcess(std::vector<std::string> argv, const SpawnOptions& options) {
  std::vector<char*> raw;
  for (std::string& arg : argv) raw.push_back(arg.data());
  raw.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC;
  if (!options.stdout_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, options.stdout_path.c_str(), kFlags, 0600);
  }
  if (!options.stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, options.stderr_path.c_str(), kFlags, 0600);
  } else if (options.stderr_to_stdout) {
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  if (!options.working_dir.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, options.working_dir.c_str());
  }
  pid_t pid = 0;
  const int rc = options.search_path
                     ? posix_spawnp(&pid, raw[0], &actions, nullptr, raw.data(), environ)
                     : posix_spawn(&pid, raw[0], &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : 0;
}

}  // namespace shardlm::testing
