#include "cache/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/temp_dir.h"

namespace shardlm {
namespace {

namespace fs = std::filesystem;
using testing_util::TempDir;

int CountFiles(const fs::path& dir) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) n += entry.is_regular_file() ? 1 : 0;
  return n;
}

TEST(AtomicFile, WritesAndReplacesLeavingNoTempFile) {
  TempDir dir;
  const fs::path path = dir.path() / "a.bin";
  const std::vector<uint8_t> first{1, 2, 3}, second{4, 5, 6, 7};
  ASSERT_TRUE(WriteFileAtomic(path, first).ok());
  ASSERT_TRUE(WriteFileAtomic(path, second).ok());
  auto read = ReadWholeFile(path, 100);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, second);
  EXPECT_EQ(CountFiles(dir.path()), 1);
  auto head = ReadFileHead(path, 2);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(*head, (std::vector<uint8_t>{4, 5}));
}

// Large files take the direct-I/O path (bypassing the page cache, the last chunk padded and
// cut back) where the filesystem supports it and the buffered one where it does not:
// either way the exact bytes, at sizes around the alignment and the chunk size.
void ExpectLargeRoundTrips(const fs::path& dir) {
  for (size_t size : {size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{4} << 20) - 1,
                      (size_t{4} << 20) + 4097, size_t{9} << 20}) {
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = uint8_t(i * 2654435761u >> 13);
    const fs::path path = dir / ("large-" + std::to_string(size));
    const Status written = WriteFileAtomic(path, bytes);
    ASSERT_TRUE(written.ok()) << written.message();
    EXPECT_EQ(fs::file_size(path), size);
    auto read = ReadWholeFile(path, size);
    ASSERT_TRUE(read.ok()) << read.status().message();
    EXPECT_TRUE(*read == bytes) << size;
  }
}

TEST(AtomicFile, LargeFilesRoundTripExactly) {
  TempDir dir;
  ExpectLargeRoundTrips(dir.path());
  if (fs::is_directory("/dev/shm")) {  // tmpfs: O_DIRECT refused before Linux 6.6
    const fs::path shm = fs::path("/dev/shm") / ("shardlm-atomic-" + std::to_string(::getpid()));
    fs::create_directories(shm);
    ExpectLargeRoundTrips(shm);
    fs::remove_all(shm);
  }
  EXPECT_EQ(CountFiles(dir.path()), 5);  // no temp file left
}

TEST(AtomicFile, ReadErrors) {
  TempDir dir;
  auto missing = ReadWholeFile(dir.path() / "none", 100);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const fs::path path = dir.path() / "big";
  ASSERT_TRUE(WriteFileAtomic(path, std::vector<uint8_t>(101)).ok());
  EXPECT_EQ(ReadWholeFile(path, 100).status().code(), StatusCode::kOutOfRange);
}

TEST(AtomicFile, MissingFolderIsAnError) {
  TempDir dir;
  const Status st = WriteFileAtomic(dir.path() / "no" / "a.bin", std::vector<uint8_t>{1});
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("create"), std::string::npos) << st.message();
}

TEST(AtomicFile, AFailedWriteRemovesTheTempFileAndKeepsTheOldFile) {
  TempDir dir;
  const fs::path path = dir.path() / "a.bin";
  ASSERT_TRUE(WriteFileAtomic(path, std::vector<uint8_t>{9}).ok());
  // A file size limit makes write() fail part way (EFBIG), like a disk filling up.
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status st = WriteFileAtomic(path, std::vector<uint8_t>(8192, 1));
  ::setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_EQ(CountFiles(dir.path()), 1);
  auto read = ReadWholeFile(path, 100);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, std::vector<uint8_t>{9});
}

TEST(AtomicFile, DiskFullIsNamed) {
  EXPECT_TRUE(IsDiskFull(ErrnoStatus(ENOSPC, "write x")));
  EXPECT_TRUE(IsDiskFull(ErrnoStatus(EDQUOT, "write x")));
  EXPECT_NE(ErrnoStatus(ENOSPC, "write x").message().find("write x: disk full"), std::string::npos);
  EXPECT_FALSE(IsDiskFull(ErrnoStatus(EIO, "write x")));
  EXPECT_EQ(ErrnoStatus(EIO, "write x").code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace shardlm
