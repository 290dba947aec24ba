// Private folders (private_folder.h): a missing folder and its missing parents are created
// 0700 whatever the umask allows; an existing folder of ours keeps its mode unless told to
// tighten it; a file is not a folder; a folder of another user is refused with a message
// that names the folder, its owner and the fix (as root, the test gives it to uid 65534).
#include "cache/private_folder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cache/file_mode.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace {

namespace fs = std::filesystem;
using testing_util::GiveToOtherUser;
using testing_util::ModeOf;
using testing_util::ScopedUmask;
using testing_util::TempDir;

TEST(PrivateFolder, CreatesTheFolderAndItsParents0700) {
  TempDir tmp;
  ScopedUmask open_umask(0);
  const fs::path dir = tmp.path() / "a" / "b" / "c";
  const Status made = EnsurePrivateFolder(dir.string() + "/", "--kv-cache-dir folder");
  ASSERT_TRUE(made.ok()) << made.message();
  for (const fs::path& path : {tmp.path() / "a", tmp.path() / "a" / "b", dir}) {
    EXPECT_EQ(ModeOf(path), 0700u) << path;
  }
  EXPECT_TRUE(EnsurePrivateFolder(dir, "x").ok());  // again: it exists and is ours
  EXPECT_TRUE(CheckPrivateFolder(dir, "x").ok());
}

TEST(PrivateFolder, AnExistingFolderKeepsItsModeUnlessTightened) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "wide";
  fs::create_directory(dir);
  ::chmod(dir.c_str(), 0755);
  ASSERT_TRUE(EnsurePrivateFolder(dir, "x").ok());
  EXPECT_EQ(ModeOf(dir), 0755u);
  ASSERT_TRUE(EnsurePrivateFolder(dir, "x", ExistingFolderMode::kTighten).ok());
  EXPECT_EQ(ModeOf(dir), 0700u);
}

TEST(PrivateFolder, AFileOrAMissingFolderIsAClearError) {
  TempDir tmp;
  const fs::path file = tmp.path() / "plain";
  std::ofstream(file) << "x";
  for (const Status& status :
       {EnsurePrivateFolder(file, "--slot-save-path folder"), CheckPrivateFolder(file, "x")}) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("is not a folder"), std::string::npos) << status.message();
  }
  EXPECT_EQ(EnsurePrivateFolder(file / "below", "x").code(), StatusCode::kIoError);
  const Status missing = CheckPrivateFolder(tmp.path() / "nope", "slot folder");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.message();
  EXPECT_FALSE(fs::exists(tmp.path() / "nope"));
  EXPECT_EQ(EnsurePrivateFolder("", "x").code(), StatusCode::kInvalidArgument);
}

TEST(PrivateFolder, AFolderOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another user";
  TempDir tmp;
  const fs::path dir = tmp.path() / "theirs";
  fs::create_directory(dir);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ASSERT_TRUE(GiveToOtherUser(dir));
  for (const Status& status :
       {EnsurePrivateFolder(dir, "--kv-cache-dir folder"),
        EnsurePrivateFolder(dir, "--kv-cache-dir folder", ExistingFolderMode::kTighten),
        CheckPrivateFolder(dir, "--kv-cache-dir folder")}) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    const std::string& m = status.message();
    EXPECT_NE(m.find("--kv-cache-dir folder '" + dir.string() + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("owned by uid 65534"), std::string::npos) << m;
    EXPECT_NE(m.find("not by uid 0"), std::string::npos) << m;
    EXPECT_NE(m.find("chown"), std::string::npos) << m;
  }
  EXPECT_EQ(ModeOf(dir), 0755u);  // tightening never touches another user's folder
}

}  // namespace
}  // namespace shardlm
