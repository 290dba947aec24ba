#include "cache/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/file_mode.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace {

namespace fs = std::filesystem;
using testing_util::ModeOf;
using testing_util::ScopedUmask;
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

// The temp file of a write in progress (".tmp." in its name), or an empty path.
fs::path TempFileIn(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().find(kTempFileMarker) != std::string::npos) {
      return entry.path();
    }
  }
  return {};
}

// Every file is 0600 from its creation: the temp file while it is written, then the file.
// (A whole-file write's result is its temp file renamed, the same inode and mode: nothing
// chmods it in between.)
TEST(AtomicFile, FilesAndTempFilesAre0600WhateverTheUmask) {
  TempDir dir;
  ScopedUmask open_umask(0);
  for (size_t size : {size_t{3}, size_t{2} << 20}) {  // buffered and direct I/O
    const fs::path path = dir.path() / ("whole-" + std::to_string(size));
    ASSERT_TRUE(WriteFileAtomic(path, std::vector<uint8_t>(size, 7)).ok());
    EXPECT_EQ(ModeOf(path), 0600u) << size;
  }
  const fs::path path = dir.path() / "streamed";
  Result<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  ASSERT_TRUE(writer->WriteAt(0, std::vector<uint8_t>{1, 2}).ok());
  const fs::path temp = TempFileIn(dir.path());
  ASSERT_EQ(temp, writer->temp_path());
  EXPECT_EQ(ModeOf(temp), 0600u);
  EXPECT_FALSE(fs::exists(path));  // nothing under the name until the commit
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_FALSE(fs::exists(temp));
}

TEST(AtomicFile, AStreamedFileIsWrittenAtAnyOffsetAndAppearsAtCommit) {
  TempDir dir;
  const fs::path path = dir.path() / "s.bin";
  ASSERT_TRUE(WriteFileAtomic(path, std::vector<uint8_t>{9}).ok());
  {
    Result<AtomicFileWriter> abandoned = AtomicFileWriter::Create(path);
    ASSERT_TRUE(abandoned.ok());
    ASSERT_TRUE(abandoned->WriteAt(0, std::vector<uint8_t>{1, 2, 3}).ok());
  }  // never committed: the temp file goes, the old file stays
  EXPECT_EQ(CountFiles(dir.path()), 1);
  EXPECT_EQ(ReadWholeFile(path, 100).value(), std::vector<uint8_t>{9});
  Result<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->WriteAt(4, std::vector<uint8_t>{5, 6}).ok());  // a hole before it
  ASSERT_TRUE(writer->WriteAt(0, std::vector<uint8_t>{1, 2}).ok());
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(ReadWholeFile(path, 100).value(), (std::vector<uint8_t>{1, 2, 0, 0, 5, 6}));
  EXPECT_EQ(CountFiles(dir.path()), 1);
  EXPECT_EQ(writer->Commit().code(), StatusCode::kInternal);  // once
}

TEST(AtomicFile, ReadOnlyFileReadsRangesAndRefusesWhatIsNoFile) {
  TempDir dir;
  const fs::path path = dir.path() / "r.bin";
  ASSERT_TRUE(WriteFileAtomic(path, std::vector<uint8_t>{1, 2, 3, 4, 5}).ok());
  Result<ReadOnlyFile> file = ReadOnlyFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->size(), 5u);
  std::vector<uint8_t> got(2);
  ASSERT_TRUE(file->ReadAt(3, got).ok());
  EXPECT_EQ(got, (std::vector<uint8_t>{4, 5}));
  const Status past = file->ReadAt(4, got);
  EXPECT_EQ(past.code(), StatusCode::kInvalidData) << past.message();
  EXPECT_EQ(ReadOnlyFile::Open(dir.path() / "none").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadOnlyFile::Open(dir.path()).status().code(), StatusCode::kInvalidData);
  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Status fifo_status = ReadOnlyFile::Open(fifo).status();  // at once, no writer needed
  EXPECT_EQ(fifo_status.code(), StatusCode::kInvalidData);
  EXPECT_NE(fifo_status.message().find("not a regular file"), std::string::npos)
      << fifo_status.message();
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
