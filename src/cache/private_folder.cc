// Private folders: create 0700 or check the owner (see private_folder.h).
#include "cache/private_folder.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "cache/atomic_file.h"

namespace shardlm {
namespace fs = std::filesystem;
namespace {

constexpr mode_t kPrivateFolderMode = 0700;
constexpr mode_t kGroupOtherBits = 0077;

// "uid 1000 (alice)", or "uid 1000" when the user database has no name for it.
std::string DescribeUser(uid_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(4096);
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return fmt::format("uid {} ({})", uid, found->pw_name);
  }
  return fmt::format("uid {}", uid);
}

// "a/b/" and "a/b" are the same folder; its parent is "a".
fs::path WithoutTrailingSeparator(fs::path dir) {
  while (!dir.has_filename() && dir.has_relative_path()) dir = dir.parent_path();
  return dir;
}

Status CheckExisting(const fs::path& dir, std::string_view what, const struct stat& st,
                     ExistingFolderMode existing) {
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument("{} '{}' is not a folder: give a folder's path", what, dir.string());
  }
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return InvalidArgument(
        "{} '{}' is owned by {}, not by {} that runs shardlm: that user could read or replace "
        "the files shardlm keeps there. Give a folder of your own, or make this one yours "
        "(chown {} '{}')",
        what, dir.string(), DescribeUser(st.st_uid), DescribeUser(me), me, dir.string());
  }
  if (existing == ExistingFolderMode::kTighten && (st.st_mode & kGroupOtherBits) != 0 &&
      ::chmod(dir.c_str(), kPrivateFolderMode) != 0) {
    return ErrnoStatus(errno, fmt::format("{} '{}': chmod 0700", what, dir.string()));
  }
  return Status::Ok();
}

// mkdir(dir, 0700); a folder someone made meanwhile is checked like an existing one.
Status MakeOne(const fs::path& dir, std::string_view what, ExistingFolderMode existing) {
  if (::mkdir(dir.c_str(), kPrivateFolderMode) == 0) return Status::Ok();
  const int err = errno;
  struct stat st {};
  if (err == EEXIST && ::stat(dir.c_str(), &st) == 0) return CheckExisting(dir, what, st, existing);
  return ErrnoStatus(err, fmt::format("{} '{}' is not writable: create it", what, dir.string()));
}

}  // namespace

Status CheckPrivateFolder(const fs::path& path, std::string_view what) {
  if (path.empty()) return InvalidArgument("{}: empty path", what);
  const fs::path dir = WithoutTrailingSeparator(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound("{} '{}' does not exist", what, dir.string());
    return ErrnoStatus(errno, fmt::format("{} '{}'", what, dir.string()));
  }
  return CheckExisting(dir, what, st, ExistingFolderMode::kKeep);
}

Status EnsurePrivateFolder(const fs::path& path, std::string_view what,
                           ExistingFolderMode existing) {
  if (path.empty()) return InvalidArgument("{}: empty path", what);
  const fs::path dir = WithoutTrailingSeparator(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return CheckExisting(dir, what, st, existing);
  if (errno != ENOENT) return ErrnoStatus(errno, fmt::format("{} '{}'", what, dir.string()));
  // The missing parents, nearest last; each is created 0700 like the folder itself.
  std::vector<fs::path> missing;
  for (fs::path parent = dir.parent_path(); !parent.empty() && parent != parent.root_path();
       parent = parent.parent_path()) {
    if (::stat(parent.c_str(), &st) == 0) break;
    missing.push_back(parent);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    SHARDLM_TRY(MakeOne(*it, what, ExistingFolderMode::kKeep));
  }
  return MakeOne(dir, what, existing);
}

}  // namespace shardlm
