// The private socket folder: a bare socket name lands in $XDG_RUNTIME_DIR/shardlm/ (else
// /tmp/shardlm-$UID/), made 0700 even under a permissive umask; a path with '/' is kept; an
// existing folder that others may enter, that another user owns, or that is a symbolic link
// is refused with an error naming it and the fix; a listener and a client meet through the
// bare name.
#include "ipc/socket_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "ipc/message_channel.h"
#include "support/other_user.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace {

using testing_util::TempDir;

bool HasText(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Sets XDG_RUNTIME_DIR (nullptr: unsets it) for one test and restores it afterwards.
class ScopedRuntimeDir {
 public:
  explicit ScopedRuntimeDir(const char* value) {
    if (const char* old = std::getenv("XDG_RUNTIME_DIR")) saved_ = old;
    if (value) {
      ::setenv("XDG_RUNTIME_DIR", value, 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
  }
  ~ScopedRuntimeDir() {
    if (saved_) {
      ::setenv("XDG_RUNTIME_DIR", saved_->c_str(), 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
  }

 private:
  std::optional<std::string> saved_;
};

struct stat Stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(SocketDir, RuntimeDirWhenAbsoluteElseTmpPerUid) {
  const std::string fallback = "/tmp/shardlm-" + std::to_string(::geteuid());
  {
    ScopedRuntimeDir env("/run/user/1000/");
    EXPECT_EQ(DefaultSocketDir(), "/run/user/1000/shardlm");
  }
  {
    ScopedRuntimeDir env("relative/dir");  // invalid by the XDG rules: ignored
    EXPECT_EQ(DefaultSocketDir(), fallback);
  }
  {
    ScopedRuntimeDir env(nullptr);
    EXPECT_EQ(DefaultSocketDir(), fallback);
  }
}

TEST(SocketDir, BareNameIsMadeInAPrivateFolderEvenUnderAPermissiveUmask) {
  TempDir runtime;
  ScopedRuntimeDir env(runtime.File("").c_str());
  const mode_t old_mask = ::umask(0);
  Result<std::string> path = ResolveSocketPath("s1.sock");
  ::umask(old_mask);
  ASSERT_TRUE(path.ok()) << path.status().message();
  EXPECT_EQ(*path, runtime.File("shardlm/s1.sock"));
  const struct stat st = Stat(runtime.File("shardlm"));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  // Again: the folder exists and is ours, so it is used as it is.
  Result<std::string> again = ResolveSocketPath("s2.sock");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, runtime.File("shardlm/s2.sock"));
}

TEST(SocketDir, FallbackFolderIsPrivateToThisUser) {
  ScopedRuntimeDir env(nullptr);
  Result<std::string> path = ResolveSocketPath("fallback.sock");
  ASSERT_TRUE(path.ok()) << path.status().message();
  const std::string dir = "/tmp/shardlm-" + std::to_string(::geteuid());
  EXPECT_EQ(*path, dir + "/fallback.sock");
  const struct stat st = Stat(dir);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
}

TEST(SocketDir, PathsWithASlashAreUsedAsGiven) {
  TempDir runtime;
  ScopedRuntimeDir env(runtime.File("").c_str());
  for (const std::string name : {"/srv/x/s1.sock", "./s1.sock", "sub/s1.sock"}) {
    Result<std::string> path = ResolveSocketPath(name);
    ASSERT_TRUE(path.ok()) << path.status().message();
    EXPECT_EQ(*path, name);
  }
  struct stat st {};
  EXPECT_NE(::lstat(runtime.File("shardlm").c_str(), &st), 0) << "no folder for given paths";
}

TEST(SocketDir, BadNamesAreRefused) {
  TempDir runtime;
  ScopedRuntimeDir env(runtime.File("").c_str());
  for (const std::string name : {"", ".", ".."}) {
    Result<std::string> path = ResolveSocketPath(name);
    ASSERT_FALSE(path.ok()) << name;
    EXPECT_EQ(path.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(HasText(path.status().message(), "is not a socket name"))
        << path.status().message();
  }
  Result<std::string> long_name = ResolveSocketPath(std::string(120, 'x'));
  ASSERT_FALSE(long_name.ok());
  EXPECT_TRUE(HasText(long_name.status().message(), "choose a shorter name"))
      << long_name.status().message();
}

TEST(SocketDir, FolderOthersMayEnterIsRefused) {
  TempDir runtime;
  ScopedRuntimeDir env(runtime.File("").c_str());
  const std::string dir = runtime.File("shardlm");
  for (mode_t mode : {0755, 0770, 0701}) {
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    Result<std::string> path = ResolveSocketPath("s1.sock");
    ASSERT_FALSE(path.ok()) << std::oct << mode;
    EXPECT_EQ(path.status().code(), StatusCode::kInvalidArgument);
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%03o", unsigned(mode));
    EXPECT_EQ(path.status().message(), "the socket folder " + dir + " has mode " + octal +
                                           ", which lets other users in; refusing it (chmod 700 " +
                                           dir + ", or give the socket as a path with '/')");
    // Refused means untouched: the user decides.
    EXPECT_EQ(Stat(dir).st_mode & 0777, mode);
    ASSERT_EQ(::rmdir(dir.c_str()), 0);
  }
}

TEST(SocketDir, SymbolicLinkOrFileIsRefused) {
  TempDir runtime;
  ScopedRuntimeDir env(runtime.File("").c_str());
  const std::string dir = runtime.File("shardlm");
  ASSERT_EQ(::mkdir(runtime.File("elsewhere").c_str(), 0700), 0);
  ASSERT_EQ(::symlink(runtime.File("elsewhere").c_str(), dir.c_str()), 0);
  Result<std::string> path = ResolveSocketPath("s1.sock");
  ASSERT_FALSE(path.ok());
  EXPECT_TRUE(HasText(path.status().message(), dir + " is a symbolic link"))
      << path.status().message();
  ASSERT_EQ(::unlink(dir.c_str()), 0);
  { std::ofstream(dir) << "not a folder"; }
  path = ResolveSocketPath("s1.sock");
  ASSERT_FALSE(path.ok());
  EXPECT_TRUE(HasText(path.status().message(), dir + " exists and is not a folder"))
      << path.status().message();
}

TEST(SocketDir, FolderOfAnotherUserIsRefused) {
  SHARDLM_REQUIRE_ROOT_FOR_OTHER_USER();
  TempDir runtime;
  ScopedRuntimeDir env(runtime.File("").c_str());
  const std::string dir = runtime.File("shardlm");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), testing::kOtherUid, testing::kOtherUid), 0);
  Result<std::string> path = ResolveSocketPath("s1.sock");
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(path.status().message(),
            "the socket folder " + dir + " belongs to uid " + std::to_string(testing::kOtherUid) +
                ", not to this user (uid " + std::to_string(::geteuid()) +
                "); refusing it, since its owner could put any socket there (remove it, or give "
                "the socket as a path with '/')");
}

TEST(SocketDir, MissingParentIsAnErrorNamingTheFolder) {
  TempDir runtime;
  ScopedRuntimeDir env(runtime.File("gone").c_str());
  Result<std::string> path = ResolveSocketPath("s1.sock");
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kIoError);
  EXPECT_TRUE(HasText(path.status().message(),
                      "cannot create the socket folder " + runtime.File("gone/shardlm")))
      << path.status().message();
}

TEST(SocketDir, ListenerAndClientMeetThroughTheBareName) {
  TempDir runtime;
  ScopedRuntimeDir env(runtime.File("").c_str());
  Result<std::string> listen_path = ResolveSocketPath("meet.sock");
  ASSERT_TRUE(listen_path.ok()) << listen_path.status().message();
  Result<std::unique_ptr<UnixListener>> listener = UnixListener::Listen(*listen_path);
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  Result<std::string> connect_path = ResolveSocketPath("meet.sock");
  ASSERT_TRUE(connect_path.ok()) << connect_path.status().message();
  Result<std::unique_ptr<MessageChannel>> client = MessageChannel::Connect(*connect_path);
  ASSERT_TRUE(client.ok()) << client.status().message();
  Result<std::unique_ptr<MessageChannel>> server = (*listener)->Accept(5000);
  ASSERT_TRUE(server.ok()) << server.status().message();
}

}  // namespace
}  // namespace shardlm
