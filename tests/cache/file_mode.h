// Test helpers for file modes and owners: the permission bits of a path, a scoped umask, and
// the user a test gives a folder to when it needs one that is not the server's.
//
// Goals: one copy for the cache, slot, server and CLI tests of private files and folders.
// Non-goals: anything beyond stat, umask and chown.
//
// Thread safety: ScopedUmask changes the process's umask (tests run one at a time).
// Lifetime: ScopedUmask restores the previous umask when destroyed.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace shardlm::testing_util {

// Another user for a foreign-owned folder: `nobody` on Debian. Only root can chown to it.
inline constexpr uid_t kOtherUid = 65534;

// The umask for a test's duration: 0 shows the modes shardlm asks for, not the umask's.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  mode_t old_;
};

// The permission bits of `path` (following a symlink); 0 when it cannot be stat'ed.
inline mode_t ModeOf(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// Gives `path` to kOtherUid; false when that is not allowed (not root).
inline bool GiveToOtherUser(const std::filesystem::path& path) {
  return ::geteuid() == 0 && ::chown(path.c_str(), kOtherUid, kOtherUid) == 0;
}

}  // namespace shardlm::testing_util
