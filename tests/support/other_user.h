// Children that run as another user, for the tests of checks between users (a shard socket's
// peer uid): uid and gid 65534 (nobody) through `setpriv`, which only root may do.
//
// Goals: a test that needs another user skips with a message saying so when not run as root
// (CI runs as root, so it runs there); the child can reach what it needs whatever folder the
// build lives in (OtherUserDir holds copies of binaries and models readable by everyone);
// the child's stdout and stderr are one file the test can poll.
// Non-goals: user names, groups, running as root from a non-root test.
//
// Thread safety: one test thread. Lifetime: an OtherUserDir removes its folder; a
// ChildProcess kills (SIGKILL) and reaps its child in the destructor.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "support/fixtures.h"
#include "support/spawn.h"
#include "support/temp_dir.h"

extern char** environ;

namespace shardlm::testing {

// The other user: `nobody` on Debian and most distributions.
inline constexpr uid_t kOtherUid = 65534;

// `argv` run as kOtherUid, its gid, and no supplementary groups.
inline std::vector<std::string> AsOtherUser(const std::vector<std::string>& argv) {
  std::vector<std::string> command = {"setpriv", "--reuid=" + std::to_string(kOtherUid),
                                      "--regid=" + std::to_string(kOtherUid), "--clear-groups"};
  command.insert(command.end(), argv.begin(), argv.end());
  return command;
}

// A fresh folder (mode 0755) for the files both users need; removed with its contents.
class OtherUserDir {
 public:
  OtherUserDir() : path_(folder_.path().string()) { ::chmod(path_.c_str(), 0755); }

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // A copy of `source` named `name`, readable (and runnable, if it was) by everyone.
  std::string Copy(const std::string& source, const std::string& name) const {
    const std::string target = File(name);
    std::filesystem::copy_file(source, target);
    ::chmod(target.c_str(), 0755);
    return target;
  }
  // A subfolder with the given owner and mode (e.g. the other user's own 0700 folder).
  std::string Subdir(const std::string& name, uid_t owner, mode_t mode) const {
    const std::string dir = File(name);
    EXPECT_EQ(::mkdir(dir.c_str(), mode), 0) << dir;
    EXPECT_EQ(::chown(dir.c_str(), owner, owner), 0) << dir;
    EXPECT_EQ(::chmod(dir.c_str(), mode), 0) << dir;
    return dir;
  }

 private:
  testing_util::TempDir folder_{"shardlm_uid"};
  std::string path_;  // folder_.path()
};

// A child process (found on PATH) with stdout and stderr in one file.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& output_path)
      : output_path_(output_path) {
    SpawnOptions options;
    options.stdout_path = output_path;
    options.stderr_to_stdout = true;
    options.search_path = true;
    pid_ = SpawnProcess(argv, options);
    running_ = pid_ != 0;
    EXPECT_TRUE(running_) << "cannot start " << argv[0];
  }
  ~ChildProcess() {
    if (running_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string output() const { return ReadTextFile(output_path_); }
  // Polls the output for `text` until it appears (true), the child exits, or `deadline`.
  bool WaitFor(const std::string& text, std::chrono::seconds deadline) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (std::chrono::steady_clock::now() < end) {
      if (output().find(text) != std::string::npos) return true;
      if (!Running()) return output().find(text) != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // Waits up to `deadline` for the child to exit (killing it then); its exit code, 128 + the
  // signal that ended it, or -1 when it never started.
  int Wait(std::chrono::seconds deadline) {
    if (pid_ == 0) return -1;
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (Running()) {
      if (std::chrono::steady_clock::now() > end) ::kill(pid_, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }

 private:
  // Reaps the child once it has exited.
  bool Running() {
    if (running_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) running_ = false;
    return running_;
  }

  std::string output_path_;
  pid_t pid_ = 0;  // 0: never started
  bool running_ = false;
  int status_ = 0;
};

}  // namespace shardlm::testing

// Skips the test unless it runs as root (only root can start a child as another user).
#define SHARDLM_REQUIRE_ROOT_FOR_OTHER_USER()                                            \
  do {                                                                                   \
    if (::geteuid() != 0) {                                                              \
      GTEST_SKIP() << "needs root: runs a peer as uid " << ::shardlm::testing::kOtherUid \
                   << " with setpriv, which only root may (CI runs the tests as root)";  \
    }                                                                                    \
  } while (0)
