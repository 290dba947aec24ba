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
// its destructor; FreshDir's folder stays until the next FreshDir of the same name.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace shardlm::testing_util {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "shardlm") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the folder, as a string (sockets, command lines).
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// An empty folder <temp>/<prefix>_<pid>_<name>, emptied if it exists.
inline std::filesystem::path FreshDir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path dir =
      fs::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace shardlm::testing_util
