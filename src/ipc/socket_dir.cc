// The private socket folder and `unix:` name resolution (socket_dir.h).
#include "ipc/socket_dir.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace shardlm {
namespace {

// Only the owner may list, enter or create entries.
constexpr mode_t kPrivateDirMode = 0700;

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

std::string DefaultSocketDir() {
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  // The XDG base directory rules: a relative path is invalid and ignored.
  if (runtime_dir != nullptr && runtime_dir[0] == '/') {
    std::string dir = runtime_dir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir + "/shardlm";
  }
  return "/tmp/shardlm-" + std::to_string(::geteuid());
}

Status EnsurePrivateDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), kPrivateDirMode) == 0) {
    // The umask may have taken bits away (never added any): give the owner back its access.
    if (::chmod(dir.c_str(), kPrivateDirMode) != 0) {
      return IoError("cannot chmod 700 the socket folder {}: {}", dir, ErrnoText());
    }
  } else if (errno != EEXIST) {
    return IoError("cannot create the socket folder {}: {}", dir, ErrnoText());
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return IoError("cannot inspect the socket folder {}: {}", dir, ErrnoText());
  }
  constexpr std::string_view kFix = "remove it, or give the socket as a path with '/'";
  if (S_ISLNK(st.st_mode)) {
    return InvalidArgument("the socket folder {} is a symbolic link; refusing it ({})", dir, kFix);
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument("the socket folder {} exists and is not a folder ({})", dir, kFix);
  }
  const uid_t uid = ::geteuid();
  if (st.st_uid != uid) {
    return InvalidArgument(
        "the socket folder {} belongs to uid {}, not to this user (uid {}); refusing it, since "
        "its owner could put any socket there ({})",
        dir, st.st_uid, uid, kFix);
  }
  if ((st.st_mode & 077) != 0) {
    return InvalidArgument(
        "the socket folder {} has mode {:03o}, which lets other users in; refusing it (chmod 700 "
        "{}, or give the socket as a path with '/')",
        dir, st.st_mode & 0777, dir);
  }
  return Status::Ok();
}

Result<std::string> ResolveSocketPath(const std::string& name) {
  if (name.empty() || name == "." || name == "..") {
    return InvalidArgument("'{}' is not a socket name (write unix:NAME or unix:/path/to/s.sock)",
                           name);
  }
  std::string path = name;
  if (name.find('/') == std::string::npos) {
    const std::string dir = DefaultSocketDir();
    SHARDLM_TRY(EnsurePrivateDir(dir));
    path = dir + "/" + name;
  }
  constexpr size_t kMaxPathBytes = sizeof(sockaddr_un::sun_path) - 1;  // and a NUL
  if (path.size() > kMaxPathBytes) {
    return InvalidArgument("Unix socket path {} is {} bytes; the limit is {} (choose a shorter {})",
                           path, path.size(), kMaxPathBytes, path == name ? "path" : "name");
  }
  return path;
}

}  // namespace shardlm
