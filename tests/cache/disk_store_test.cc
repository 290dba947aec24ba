#include "cache/disk_store.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/atomic_file.h"
#include "cache/file_mode.h"
#include "cache/snapshot_layout.h"
#include "cache/snapshot_test_util.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace {

namespace fs = std::filesystem;
using testing_util::EncodeBlock;
using testing_util::GiveToOtherUser;
using testing_util::ModeOf;
using testing_util::ScopedUmask;
using testing_util::SmallLayout;
using testing_util::TempDir;

BlockHash Hash(uint64_t i) { return BlockHash{0x5eed, i}; }

class DiskStoreTest : public ::testing::Test {
 protected:
  DiskStoreOptions Options(uint64_t budget = uint64_t{1} << 20) {
    DiskStoreOptions options;
    options.dir = dir_.path();
    options.budget_bytes = budget;
    options.layout = LayoutFingerprint(layout_);
    options.log = [this](const std::string& line) { log_.push_back(line); };
    return options;
  }
  std::unique_ptr<DiskStore> Open(const DiskStoreOptions& options) {
    auto store = DiskStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().message();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  std::vector<uint8_t> Block(uint64_t i, uint64_t parent = 0) {
    return EncodeBlock(layout_, Hash(i), parent == 0 ? kRootBlockHash : Hash(parent),
                       static_cast<uint8_t>(i));
  }
  bool LogMentions(const std::string& text) const {
    for (const std::string& line : log_) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }

  TempDir dir_;
  SnapshotLayout layout_ = SmallLayout();
  std::vector<std::string> log_;
  const uint64_t file_bytes_ = Block(1).size();
};

TEST_F(DiskStoreTest, PutFlushGetSurvivesARestart) {
  {
    auto store = Open(Options());
    ASSERT_TRUE(store);
    EXPECT_TRUE(store->Put(Hash(1), Block(1)));
    EXPECT_TRUE(store->Put(Hash(2), Block(2, 1)));
    EXPECT_TRUE(store->Put(Hash(1), Block(1)));  // already queued or stored: not twice
    store->Flush();
    const DiskStoreStats s = store->stats();
    EXPECT_EQ(s.files, 2);
    EXPECT_EQ(s.files_written, 2);
    EXPECT_EQ(s.bytes_written, static_cast<int64_t>(2 * file_bytes_));
    EXPECT_TRUE(fs::exists(store->folder() / (Hash(1).ToHex() + ".snap")));
  }
  auto store = Open(Options());  // the restarted server
  ASSERT_TRUE(store);
  EXPECT_EQ(store->stats().files, 2);
  auto got = store->Get(Hash(2));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->bytes, Block(2, 1));
  EXPECT_EQ(got->snapshot.header.parent_hash, Hash(1));
  ASSERT_EQ(got->snapshot.sections.size(), 3u);
  EXPECT_TRUE(CheckKvPageSection(layout_, 1, got->snapshot.sections[1]).ok());
  EXPECT_EQ(store->Get(Hash(3)).status().code(), StatusCode::kNotFound);
  const DiskStoreStats s = store->stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.bytes_read, static_cast<int64_t>(file_bytes_));
}

TEST_F(DiskStoreTest, OpenErrorsAreClear) {
  DiskStoreOptions missing = Options();
  missing.dir = dir_.path() / "nope";
  auto r = DiskStore::Open(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("does not exist"), std::string::npos);

  DiskStoreOptions file = Options();
  file.dir = dir_.path() / "plain";
  std::ofstream(file.dir) << "x";
  r = DiskStore::Open(file);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a folder"), std::string::npos);

  EXPECT_EQ(DiskStore::Open(Options(0)).status().code(), StatusCode::kInvalidArgument);
}

// Root writes through permission bits, so as root the read-only folder is one of sysfs,
// where nobody may create files.
TEST_F(DiskStoreTest, ReadOnlyFolderIsAClearErrorAtOpen) {
  DiskStoreOptions options = Options();
  if (::geteuid() == 0) {
    if (!fs::is_directory("/sys")) GTEST_SKIP() << "root, and no sysfs to be read-only";
    options.dir = "/sys";
  } else {
    options.dir = dir_.path() / "ro";
    fs::create_directory(options.dir);
    fs::permissions(options.dir, fs::perms::owner_read | fs::perms::owner_exec);
  }
  auto r = DiskStore::Open(options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find("not writable"), std::string::npos) << r.status().message();
}

TEST_F(DiskStoreTest, BudgetEvictsTheLeastValuableLeaf) {
  auto store = Open(Options(3 * file_bytes_));
  ASSERT_TRUE(store);
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(store->Put(Hash(i), Block(i)));
    store->Flush();
  }
  ASSERT_TRUE(store->Get(Hash(1)).ok());  // 1 is now hit and recent: 2 is the oldest
  ASSERT_TRUE(store->Put(Hash(4), Block(4)));
  store->Flush();
  EXPECT_TRUE(store->Contains(Hash(1)));
  EXPECT_FALSE(store->Contains(Hash(2)));
  EXPECT_FALSE(fs::exists(store->folder() / (Hash(2).ToHex() + ".snap")));
  EXPECT_TRUE(store->Contains(Hash(3)));
  EXPECT_TRUE(store->Contains(Hash(4)));
  const DiskStoreStats s = store->stats();
  EXPECT_EQ(s.evictions, 1);
  EXPECT_LE(s.bytes_on_disk, static_cast<int64_t>(3 * file_bytes_));
}

TEST_F(DiskStoreTest, AChainIsEvictedFromItsTail) {
  auto store = Open(Options(3 * file_bytes_));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Put(Hash(1), Block(1)));
  ASSERT_TRUE(store->Put(Hash(2), Block(2, 1)));
  ASSERT_TRUE(store->Put(Hash(3), Block(3, 2)));
  store->Flush();
  ASSERT_TRUE(store->Put(Hash(9), Block(9)));
  ASSERT_TRUE(store->Put(Hash(10), Block(10)));
  store->Flush();
  // Blocks 1 and 2 are the oldest but head the chain: 3 goes, then 2.
  EXPECT_TRUE(store->Contains(Hash(1)));
  EXPECT_FALSE(store->Contains(Hash(2)));
  EXPECT_FALSE(store->Contains(Hash(3)));
  EXPECT_TRUE(store->Contains(Hash(9)));
  EXPECT_TRUE(store->Contains(Hash(10)));
}

TEST_F(DiskStoreTest, HitsKeepAFileLongerThanRecencyAlone) {
  auto store = Open(Options(2 * file_bytes_));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Put(Hash(1), Block(1)));
  store->Flush();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->Get(Hash(1)).ok());
  // Newer one-off blocks pass through without displacing the popular one.
  for (uint64_t i = 2; i <= 6; ++i) {
    ASSERT_TRUE(store->Put(Hash(i), Block(i)));
    store->Flush();
  }
  EXPECT_TRUE(store->Contains(Hash(1)));
  EXPECT_TRUE(store->Contains(Hash(6)));
  EXPECT_EQ(store->stats().evictions, 4);
}

TEST_F(DiskStoreTest, ACorruptFileIsDiscardedWithALogLine) {
  fs::path path;
  {
    auto store = Open(Options());
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->Put(Hash(1), Block(1)));
    store->Flush();
    path = store->folder() / (Hash(1).ToHex() + ".snap");
    // Flip one payload byte behind the store's back.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kSnapshotHeaderBytes + kSectionDescriptorBytes + 3));
    f.put('\x5a');
    f.close();
    auto got = store->Get(Hash(1));
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidData);
    EXPECT_NE(got.status().message().find("checksum"), std::string::npos);
    EXPECT_TRUE(LogMentions(path.string()));
    EXPECT_FALSE(fs::exists(path));
    EXPECT_EQ(store->Get(Hash(1)).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(store->stats().corrupt_files, 1);
    EXPECT_EQ(store->stats().files, 0);
    // The block can be stored again.
    ASSERT_TRUE(store->Put(Hash(1), Block(1)));
    store->Flush();
    EXPECT_TRUE(store->Get(Hash(1)).ok());
  }
}

TEST_F(DiskStoreTest, DiscardDeletesAValidFileTheCallerCannotUse) {
  auto store = Open(Options());
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Put(Hash(1), Block(1)));
  store->Flush();
  const fs::path path = store->folder() / (Hash(1).ToHex() + ".snap");
  ASSERT_TRUE(store->Get(Hash(1)).ok());
  store->Discard(Hash(1), "no kv_page section for stage 1");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(store->Contains(Hash(1)));
  EXPECT_EQ(store->stats().corrupt_files, 1);
  EXPECT_EQ(store->stats().files, 0);
  EXPECT_EQ(store->stats().bytes_on_disk, 0);
  EXPECT_TRUE(LogMentions("no kv_page section for stage 1"));
  store->Discard(Hash(2), "not stored");  // nothing to do
  EXPECT_EQ(store->stats().corrupt_files, 1);
  EXPECT_FALSE(LogMentions("not stored"));
}

TEST_F(DiskStoreTest, OpenDeletesOurBrokenFilesAndLeavesOthersAlone) {
  fs::path folder;
  {
    auto store = Open(Options());
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->Put(Hash(1), Block(1)));
    store->Flush();
    folder = store->folder();
  }
  const fs::path truncated = folder / (Hash(2).ToHex() + ".snap");
  std::vector<uint8_t> half = Block(2);
  half.resize(40);
  ASSERT_TRUE(WriteFileAtomic(truncated, half).ok());
  const fs::path misnamed = folder / (Hash(3).ToHex() + ".snap");  // holds block 4
  ASSERT_TRUE(WriteFileAtomic(misnamed, Block(4)).ok());
  const fs::path leftover = folder / (Hash(5).ToHex() + ".snap.tmp.123.0");
  ASSERT_TRUE(WriteFileAtomic(leftover, Block(5)).ok());
  const fs::path stray = folder / "notes.txt";
  std::ofstream(stray) << "mine";

  auto store = Open(Options());
  ASSERT_TRUE(store);
  EXPECT_EQ(store->stats().files, 1);
  EXPECT_EQ(store->stats().corrupt_files, 2);
  EXPECT_FALSE(fs::exists(truncated));
  EXPECT_FALSE(fs::exists(misnamed));
  EXPECT_FALSE(fs::exists(leftover));
  EXPECT_TRUE(fs::exists(stray));
  EXPECT_TRUE(LogMentions(truncated.string()));
  EXPECT_TRUE(LogMentions("notes.txt"));
  EXPECT_TRUE(store->Get(Hash(1)).ok());
}

TEST_F(DiskStoreTest, AnotherLayoutNeverSeesTheFiles) {
  {
    auto store = Open(Options());
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->Put(Hash(1), Block(1)));
    store->Flush();
  }
  SnapshotLayout other = layout_;
  other.kv_type = KvType::kF16;
  DiskStoreOptions options = Options();
  options.layout = LayoutFingerprint(other);
  auto store = Open(options);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->stats().files, 0);
  EXPECT_EQ(store->Get(Hash(1)).status().code(), StatusCode::kNotFound);
  // A file of the first layout copied into this layout's folder is found and deleted.
  const fs::path copied = store->folder() / (Hash(1).ToHex() + ".snap");
  ASSERT_TRUE(WriteFileAtomic(copied, Block(1)).ok());
  store.reset();
  store = Open(options);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->stats().files, 0);
  EXPECT_FALSE(fs::exists(copied));
  // And Put refuses bytes of another layout.
  EXPECT_FALSE(store->Put(Hash(1), Block(1)));
  EXPECT_FALSE(store->Put(Hash(2), Block(1)));  // and bytes of another block
}

TEST_F(DiskStoreTest, AFullQueueDropsInsteadOfBlocking) {
  DiskStoreOptions options = Options();
  options.max_queued_writes = 2;
  auto store = Open(options);
  ASSERT_TRUE(store);
  store->PauseWriterForTest(true);
  EXPECT_TRUE(store->Put(Hash(1), Block(1)));
  EXPECT_TRUE(store->Put(Hash(2), Block(2)));
  EXPECT_FALSE(store->Put(Hash(3), Block(3)));  // returns at once, dropped
  EXPECT_EQ(store->stats().dropped_writes, 1);
  store->PauseWriterForTest(false);
  store->Flush();
  EXPECT_EQ(store->stats().files, 2);
  EXPECT_FALSE(store->Contains(Hash(3)));
  EXPECT_TRUE(store->Put(Hash(3), Block(3)));  // room again
  store->Flush();
  EXPECT_TRUE(store->Contains(Hash(3)));
}

TEST_F(DiskStoreTest, QueuedWritesAreFinishedAtShutdown) {
  {
    auto store = Open(Options());
    ASSERT_TRUE(store);
    store->PauseWriterForTest(true);
    for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(store->Put(Hash(i), Block(i)));
  }
  auto store = Open(Options());
  ASSERT_TRUE(store);
  EXPECT_EQ(store->stats().files, 5);
}

int LogLinesWith(const std::vector<std::string>& log, const std::string& text) {
  int n = 0;
  for (const std::string& line : log) n += line.find(text) != std::string::npos ? 1 : 0;
  return n;
}

// Any failed write (here EFBIG from a file size limit, not a full disk) starts a backoff:
// the writes queued behind it are dropped without an attempt, one line is logged, reads go
// on, and writes work again once the backoff is over.
TEST_F(DiskStoreTest, AnyFailedWriteBacksOffWithOneLogLineAndReadsGoOn) {
  DiskStoreOptions options = Options();
  options.write_failure_backoff = std::chrono::milliseconds(300);
  auto store = Open(options);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Put(Hash(1), Block(1)));
  store->Flush();
  store->PauseWriterForTest(true);
  for (uint64_t i = 2; i <= 4; ++i) ASSERT_TRUE(store->Put(Hash(i), Block(i)));
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = file_bytes_ / 2;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  store->PauseWriterForTest(false);
  store->Flush();
  ::setrlimit(RLIMIT_FSIZE, &old);
  DiskStoreStats s = store->stats();
  EXPECT_EQ(s.write_errors, 1);
  EXPECT_EQ(s.dropped_writes, 2);  // 3 and 4: not attempted
  EXPECT_EQ(LogLinesWith(log_, "skipping writes"), 1) << ::testing::PrintToString(log_);
  EXPECT_TRUE(LogMentions(Hash(2).ToHex()));
  EXPECT_FALSE(store->Put(Hash(5), Block(5)));  // still backing off
  int files_in_folder = 0;
  for (const auto& entry : fs::directory_iterator(store->folder())) {
    files_in_folder += entry.is_regular_file() ? 1 : 0;
  }
  EXPECT_EQ(files_in_folder, 1);  // no temp file left behind
  EXPECT_TRUE(store->Get(Hash(1)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  ASSERT_TRUE(store->Put(Hash(2), Block(2)));  // and writes work again
  store->Flush();
  EXPECT_TRUE(store->Contains(Hash(2)));
  EXPECT_EQ(store->stats().write_errors, 1);
}

// A failure that is neither a full disk nor a size limit: the file's name is taken by a
// folder, so the rename fails (EISDIR). The same backoff; the other blocks are served.
TEST_F(DiskStoreTest, AFailedRenameBacksOffToo) {
  DiskStoreOptions options = Options();
  options.write_failure_backoff = std::chrono::seconds(60);
  auto store = Open(options);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Put(Hash(1), Block(1)));
  store->Flush();
  fs::create_directory(store->folder() / (Hash(2).ToHex() + ".snap"));
  ASSERT_TRUE(store->Put(Hash(2), Block(2)));
  store->Flush();
  EXPECT_EQ(store->stats().write_errors, 1);
  EXPECT_EQ(LogLinesWith(log_, "skipping writes for 60.0 s, serving reads"), 1)
      << ::testing::PrintToString(log_);
  EXPECT_FALSE(store->Put(Hash(3), Block(3)));
  EXPECT_TRUE(store->Get(Hash(1)).ok());
}

// A scan reads headers only: a file indexed at Open is replaced by the next write of its
// block until a Get has read it in full; a validated file is not written again.
TEST_F(DiskStoreTest, AFileNotYetValidatedIsReplacedByTheNextWriteOfItsBlock) {
  fs::path path;
  {
    auto store = Open(Options());
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->Put(Hash(1), Block(1)));
    ASSERT_TRUE(store->Put(Hash(2), Block(2, 1)));
    store->Flush();
    EXPECT_FALSE(store->NeedsWrite(Hash(1)));  // written by this process
    path = store->folder() / (Hash(2).ToHex() + ".snap");
  }
  std::vector<uint8_t> bad = Block(2, 1);
  bad[bad.size() / 2] ^= 0x5a;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bad.data()), std::streamsize(bad.size()));
  }
  auto store = Open(Options());
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->Contains(Hash(2)));
  EXPECT_TRUE(store->NeedsWrite(Hash(2)));
  EXPECT_TRUE(store->NeedsWrite(Hash(3)));
  ASSERT_TRUE(store->Put(Hash(2), Block(2, 1)));
  store->Flush();
  EXPECT_FALSE(store->NeedsWrite(Hash(2)));
  auto got = store->Get(Hash(2));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->bytes, Block(2, 1));
  DiskStoreStats s = store->stats();
  EXPECT_EQ(s.files, 2);
  EXPECT_EQ(s.bytes_on_disk, static_cast<int64_t>(2 * file_bytes_));  // replaced, not added
  EXPECT_EQ(s.corrupt_files, 0);
  // Block 1, read in full, is not written again.
  ASSERT_TRUE(store->Get(Hash(1)).ok());
  EXPECT_FALSE(store->NeedsWrite(Hash(1)));
  ASSERT_TRUE(store->Put(Hash(1), Block(1)));
  store->Flush();
  EXPECT_EQ(store->stats().files_written, s.files_written);
}

// The layout subfolder is created 0700 (an older, wider one is tightened) and every file
// in it 0600; a cache folder or layout subfolder of another user is refused at Open.
TEST_F(DiskStoreTest, FoldersArePrivateAndAnotherUsersIsRefused) {
  {
    ScopedUmask open_umask(0);
    auto store = Open(Options());
    ASSERT_TRUE(store);
    EXPECT_EQ(ModeOf(store->folder()), 0700u);
    ASSERT_TRUE(store->Put(Hash(1), Block(1)));
    store->Flush();
    EXPECT_EQ(ModeOf(store->folder() / (Hash(1).ToHex() + ".snap")), 0600u);
    ::chmod(store->folder().c_str(), 0755);
  }
  auto reopened = Open(Options());
  ASSERT_TRUE(reopened);
  EXPECT_EQ(ModeOf(reopened->folder()), 0700u);
  const fs::path layout_folder = reopened->folder();
  reopened.reset();
  if (!GiveToOtherUser(layout_folder)) GTEST_SKIP() << "needs root to give a folder away";
  for (const fs::path& theirs : {layout_folder, dir_.path()}) {
    SCOPED_TRACE(theirs);
    if (theirs == dir_.path()) {
      ASSERT_TRUE(GiveToOtherUser(theirs));
    }
    auto refused = DiskStore::Open(Options());
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("'" + theirs.string() + "' is owned by uid 65534"),
              std::string::npos)
        << refused.status().message();
  }
}

TEST_F(DiskStoreTest, ConcurrentPutsAndGetsStayConsistentUnderTheBudget) {
  auto store = Open(Options(8 * file_bytes_));
  ASSERT_TRUE(store);
  std::vector<std::vector<uint8_t>> blocks;
  for (uint64_t i = 1; i <= 40; ++i) blocks.push_back(Block(i));
  std::atomic<int> bad{0};
  auto worker = [&](uint64_t first) {
    for (int round = 0; round < 3; ++round) {
      for (uint64_t i = first; i <= 40; i += 2) {
        store->Put(Hash(i), blocks[i - 1]);
        auto got = store->Get(Hash(i - (i > 2 ? 2 : 0)));
        if (got.ok() ? got->bytes != blocks[i - (i > 2 ? 2 : 0) - 1]
                     : got.status().code() != StatusCode::kNotFound) {
          ++bad;
        }
      }
    }
  };
  std::thread a(worker, 1), b(worker, 2);
  a.join();
  b.join();
  store->Flush();
  EXPECT_EQ(bad.load(), 0);
  const DiskStoreStats s = store->stats();
  EXPECT_LE(s.bytes_on_disk, static_cast<int64_t>(8 * file_bytes_));
  EXPECT_EQ(s.corrupt_files, 0);
  EXPECT_EQ(s.write_errors, 0);
  int files_in_folder = 0;
  for (const auto& entry : fs::directory_iterator(store->folder())) {
    files_in_folder += entry.is_regular_file() ? 1 : 0;
  }
  EXPECT_EQ(files_in_folder, s.files);  // the index and the folder agree
}

TEST_F(DiskStoreTest, ABlockLargerThanTheBudgetIsDropped) {
  auto store = Open(Options(file_bytes_ - 1));
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->Put(Hash(1), Block(1)));
  EXPECT_EQ(store->stats().dropped_writes, 1);
}

}  // namespace
}  // namespace shardlm
