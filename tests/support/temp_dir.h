// Temporary folders for tests: TempDir, a fresh folder removed with its contents when it
// goes out of scope, and FreshDir, an emptied folder with a stable name that outlives the
// test (for tests that restart a server or a daemon on the same paths).
//
// Goals: one helper for every test binary; names that carry the process id, so two test
// binaries running at once (ctest -j) never share a folder; removal that works even after
// a test took the owner's write permission away (the cache tests do).
// Non-goals: folders other users may enter (other_user.h makes those).
//
// Thread safety: none (one test owns its folder). Lifetime: TempDir removes its folder in
// its destructor; FreshDir's folder stays until the next FreshDir of the same name or the
// process's exit (a test binary that crashes leaves its FreshDir folders behind).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace shardlm::testing_util {

// Removes `dir` and what it holds (or a file), giving the owner back write permission first.
inline void RemoveFolder(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add, ec);
  std::filesystem::remove_all(dir, ec);
}

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "shardlm") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() { RemoveFolder(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the folder, as a string (sockets, command lines).
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Removes the paths added to it when the process exits (a static's destructor): the FreshDir
// folders and the sockets of daemons a test kills, whose names carry the process id and so are
// never made again by a later run (every ctest run left ~60 of them in the temporary folder).
class RemovedAtExit {
 public:
  static RemovedAtExit& Paths() {
    static RemovedAtExit paths;
    return paths;
  }
  void Add(const std::filesystem::path& path) { paths_.push_back(path); }
  ~RemovedAtExit() {
    for (const std::filesystem::path& path : paths_) RemoveFolder(path);
  }

 private:
  RemovedAtExit() = default;
  std::vector<std::filesystem::path> paths_;
};

// An empty folder <temp>/<prefix>_<pid>_<name>, emptied if it exists, removed at exit.
inline std::filesystem::path FreshDir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path dir =
      fs::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  RemovedAtExit::Paths().Add(dir);
  return dir;
}

}  // namespace shardlm::testing_util
