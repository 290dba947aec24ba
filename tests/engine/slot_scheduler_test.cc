// Slot save, restore and erase at the scheduler (engine.h "Slots") on the fixture models:
// a finished request's slot retains its sequence; saved to a file, restored into a fresh
// scheduler (a new pool, after other requests), the next prompt that starts with it reports
// its full pages as cached_tokens and gives bitwise the tokens and logprobs of a cold
// scheduler — unsplit, over a 2-stage local split and over a local + remote split whose
// daemon restarted. Saving a restored slot rewrites the same bytes. A corrupt, truncated,
// missing or foreign file (other model, other split) is refused and changes nothing; a busy
// slot answers kConflict; erase drops the sequence; retained pages are not "used" pages; a
// cancelled request retains only the KV every stage wrote; a lost stage drops everything.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/file_mode.h"
#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"
#include "pipeline/fake_stage.h"
#include "pipeline/stage_factory.h"
#include "support/file_bytes.h"

namespace shardlm {
namespace slot_scheduler_test {

namespace fs = std::filesystem;
using scheduler_test_util::Collector;
using scheduler_test_util::Concat;
using scheduler_test_util::Encode;
using scheduler_test_util::ExpectSameOutput;
using scheduler_test_util::Fixture;
using scheduler_test_util::kLongText;
using scheduler_test_util::kPageTokens;
using scheduler_test_util::kQwen;
using scheduler_test_util::kStories;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using scheduler_test_util::RunOne;
using scheduler_test_util::ServiceThread;
using scheduler_test_util::StoryTokens;
using scheduler_test_util::SubmitHeld;
using scheduler_test_util::WithRemoteStage;

// Turn 1: a 70-token prompt and 4 generated tokens, of which 3 were fed: 73 positions.
constexpr int kTurn1Prompt = 70;
constexpr int kTurn1Held = kTurn1Prompt + 4 - 1;

SchedulerOptions Options(bool prefix_cache = true) {
  SchedulerOptions options = scheduler_test_util::TestOptions(2);
  options.prefix_cache = prefix_cache;
  return options;
}

SchedulerOptions LocalSplit(SchedulerOptions options) {
  options.placement.devices.assign(2, DeviceSpec{});
  options.placement.layer_split = {1, 1};
  options.threads = 1;
  return options;
}

fs::path TempDir(const std::string& name) { return testing_util::FreshDir("shardlm_slots", name); }

std::vector<TokenId> Turn1(const std::string& file) {
  return StoryTokens(file, kTurn1Prompt, kLongText);
}

// Runs turn 1 in slot 0 of `scheduler` and saves the slot to `path`; returns the tokens
// the slot held (turn 1's prompt and fed replies).
std::vector<TokenId> RunAndSave(Scheduler& scheduler, const std::string& file,
                                const fs::path& path) {
  auto reply = RunOne(scheduler, Request(Turn1(file), 4));
  EXPECT_EQ(reply->ids.size(), 4u);
  const std::vector<SlotInfo> slots = scheduler.Slots();
  EXPECT_EQ(slots[0].state, SlotState::kIdle);
  EXPECT_EQ(slots[0].n_tokens, kTurn1Held);
  Result<SlotSaveResult> saved = scheduler.SaveSlot(0, path);
  EXPECT_TRUE(saved.ok()) << saved.status().message();
  if (saved.ok()) {
    EXPECT_EQ(saved->n_saved, kTurn1Held);
    EXPECT_EQ(saved->n_written, fs::file_size(path));
  }
  std::vector<TokenId> held = Concat(Turn1(file), reply->ids);
  held.resize(kTurn1Held);
  return held;
}

// A scheduler over `file` whose slot 0 holds turn 1, saved to `path` (null when it could not
// be made, and the test has failed then too).
std::unique_ptr<Scheduler> SavedTurn1(const std::string& file, const SchedulerOptions& options,
                                      const fs::path& path) {
  auto scheduler = MakeScheduler(file, options);
  if (scheduler) (void)RunAndSave(*scheduler, file, path);
  return scheduler;
}

// The next turn: what the slot held, then new text.
std::vector<TokenId> Turn2(const std::string& file, const std::vector<TokenId>& held) {
  return Concat(held, Encode(file, " Then they went home to eat.", false));
}

std::unique_ptr<Collector> Cold(const std::string& file, const EngineRequest& request) {
  auto cold = MakeScheduler(file, Options(false));
  return cold ? RunOne(*cold, request) : nullptr;
}

// The full pages of a sequence of n positions, in tokens: what a restore of it hits.
int FullPageTokens(int n) { return n / kPageTokens * kPageTokens; }

// Runs `next` on `scheduler`: `cached` of its prompt tokens hit, and its output is bitwise a
// cold scheduler's.
void ExpectHitsAndColdOutput(Scheduler& scheduler, const std::string& file,
                             const EngineRequest& next, int cached) {
  auto want = Cold(file, next);
  ASSERT_TRUE(want);
  auto got = RunOne(scheduler, next);
  EXPECT_EQ(got->finish.usage.cached_tokens, cached);
  ExpectSameOutput(*got, *want);
}

// Save on one scheduler, restore on a fresh one (after an unrelated request, so the pool's
// pages held other KV), then the next turn hits every restored full page.
void SaveRestoreCase(const std::string& file, const SchedulerOptions& options, uint64_t seed,
                     const std::string& name) {
  const fs::path path = TempDir(name) / "chat1";
  std::vector<TokenId> held;
  {
    auto first = MakeScheduler(file, options);
    ASSERT_TRUE(first);
    held = RunAndSave(*first, file, path);
  }
  const EngineRequest next = Request(Turn2(file, held), 12, seed);
  auto restarted = MakeScheduler(file, options);
  ASSERT_TRUE(restarted);
  (void)RunOne(*restarted, Request(StoryTokens(file, 90, "A big bird sang in the rain."), 4));
  Result<SlotRestoreResult> restored = restarted->RestoreSlot(1, path);
  ASSERT_TRUE(restored.ok()) << restored.status().message();
  EXPECT_EQ(restored->n_restored, kTurn1Held);
  EXPECT_EQ(restored->n_read, fs::file_size(path));
  EXPECT_EQ(restarted->Slots()[1].n_tokens, kTurn1Held);
  ExpectHitsAndColdOutput(*restarted, file, next, FullPageTokens(kTurn1Held));
  EXPECT_EQ(restarted->Stats().prompt_tokens_memory, FullPageTokens(kTurn1Held));
}

TEST(SlotSchedulerTest, SaveRestartRestoreHitsAndIsBitwiseCold) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    for (uint64_t seed : {0, 7}) {
      SCOPED_TRACE(fmt::format("{} seed {}", file, seed));
      SaveRestoreCase(file, Options(), seed, "unsplit");
    }
  }
}

TEST(SlotSchedulerTest, TwoStageLocalSplitSavesAndRestoresEveryStage) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    SCOPED_TRACE(file);
    SaveRestoreCase(file, LocalSplit(Options()), 7, "split");
  }
}

TEST(SlotSchedulerTest, LocalPlusRemoteSplitRestoresAfterTheDaemonRestarts) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string file = kQwen;
  const fs::path dir = TempDir("remote");
  const std::string socket = (dir / "stage1.sock").string();
  const SchedulerOptions options = WithRemoteStage(Options(), socket);
  std::vector<TokenId> held;
  {
    ServiceThread daemon(socket);
    ASSERT_TRUE(daemon.ok());
    auto first = MakeScheduler(file, options);
    ASSERT_TRUE(first);
    held = RunAndSave(*first, file, dir / "chat1");
  }
  ServiceThread daemon(socket);
  ASSERT_TRUE(daemon.ok());
  auto restarted = MakeScheduler(file, options);
  ASSERT_TRUE(restarted);
  Result<SlotRestoreResult> restored = restarted->RestoreSlot(0, dir / "chat1");
  ASSERT_TRUE(restored.ok()) << restored.status().message();
  ExpectHitsAndColdOutput(*restarted, file, Request(Turn2(file, held), 12),
                          FullPageTokens(kTurn1Held));
}

TEST(SlotSchedulerTest, SavingARestoredSlotWritesTheSameBytes) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = TempDir("resave");
  ASSERT_TRUE(SavedTurn1(kStories, Options(), dir / "a"));
  auto second = MakeScheduler(kStories, Options());
  ASSERT_TRUE(second);
  ASSERT_TRUE(second->RestoreSlot(1, dir / "a").ok());
  Result<SlotSaveResult> saved = second->SaveSlot(1, dir / "b");
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  EXPECT_EQ(testing_util::ReadBytes(dir / "a"), testing_util::ReadBytes(dir / "b"));
}

// Restores `path` into slot 0 of `scheduler`, which holds turn 1: the error, after checking
// that the slot still holds turn 1.
Status RefusedRestore(Scheduler& scheduler, const fs::path& path) {
  Result<SlotRestoreResult> restored = scheduler.RestoreSlot(0, path);
  EXPECT_FALSE(restored.ok());
  EXPECT_EQ(scheduler.Slots()[0].n_tokens, kTurn1Held);
  return restored.status();
}

TEST(SlotSchedulerTest, CorruptTruncatedMissingOrForeignFilesChangeNothing) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string file = kStories;
  const fs::path dir = TempDir("bad");
  ASSERT_TRUE(SavedTurn1(file, LocalSplit(Options()), dir / "split"));
  ASSERT_TRUE(SavedTurn1(kQwen, Options(), dir / "qwen"));
  auto scheduler = MakeScheduler(file, Options());
  ASSERT_TRUE(scheduler);
  const std::vector<TokenId> held = RunAndSave(*scheduler, file, dir / "good");
  const std::vector<uint8_t> good = testing_util::ReadBytes(dir / "good");
  std::vector<uint8_t> flipped = good;
  flipped[good.size() / 2] ^= 0x20;  // inside stage 0's pages: only the checksum tells
  testing_util::WriteBytes(dir / "flipped", flipped);
  testing_util::WriteBytes(dir / "truncated", std::vector<uint8_t>(good.begin(), good.end() - 100));
  for (const char* bad : {"flipped", "truncated", "split", "qwen"}) {
    SCOPED_TRACE(bad);
    const Status status = RefusedRestore(*scheduler, dir / bad);
    EXPECT_EQ(status.code(), StatusCode::kInvalidData) << status.message();
    EXPECT_NE(status.message().find(bad), std::string::npos) << status.message();
  }
  const Status foreign = RefusedRestore(*scheduler, dir / "split");
  EXPECT_NE(foreign.message().find("layout fingerprint"), std::string::npos) << foreign.message();
  const Status missing = RefusedRestore(*scheduler, dir / "nothing");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.message();
  EXPECT_EQ(scheduler->SaveSlot(2, dir / "x").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(scheduler->RestoreSlot(-1, dir / "good").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(scheduler->Stats().prompt_tokens_cached, 0);
  // Still serving, and the good file still restores.
  const EngineRequest next = Request(Turn2(file, held), 8);
  auto want = Cold(file, next);
  ASSERT_TRUE(want);
  ASSERT_TRUE(scheduler->RestoreSlot(1, dir / "good").ok());
  ExpectSameOutput(*RunOne(*scheduler, next), *want);
}

TEST(SlotSchedulerTest, ABusySlotAnswersConflict) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = TempDir("busy");
  auto scheduler = SavedTurn1(kStories, Options(), dir / "chat1");
  ASSERT_TRUE(scheduler);
  // Runs until the context is full (or cancelled below), the engine thread held inside
  // on_token: busy all through the checks.
  Collector running;
  auto id = SubmitHeld(*scheduler, Request(Turn1(kStories), -1), running, 2);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(scheduler->Slots()[0].state, SlotState::kProcessing);
  // Answered by the engine thread once released: run them aside.
  auto save = std::async(std::launch::async, [&] { return scheduler->SaveSlot(0, dir / "x"); });
  auto erase = std::async(std::launch::async, [&] { return scheduler->EraseSlot(0); });
  auto restore =
      std::async(std::launch::async, [&] { return scheduler->RestoreSlot(0, dir / "chat1"); });
  auto empty = std::async(std::launch::async, [&] { return scheduler->SaveSlot(1, dir / "y"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  running.release.set_value();
  EXPECT_EQ(save.get().status().code(), StatusCode::kConflict);
  EXPECT_EQ(erase.get().status().code(), StatusCode::kConflict);
  const Status busy = restore.get().status();
  EXPECT_EQ(busy.code(), StatusCode::kConflict);
  EXPECT_NE(busy.message().find("slot 0 is processing a request"), std::string::npos)
      << busy.message();
  EXPECT_EQ(empty.get().status().code(), StatusCode::kInvalidArgument);  // holds nothing
  EXPECT_FALSE(fs::exists(dir / "x"));
  scheduler->Cancel(*id);
  ASSERT_TRUE(running.Wait());
  EXPECT_EQ(running.finish.reason, FinishReason::kCancelled);  // still running until now
}

// A restore whose file cannot be opened without blocking: if the restore opened it, the
// result would not come; then the test writes to the FIFO to let it go, and fails.
Status RestoreFromFifo(Scheduler& scheduler, int32_t slot, const fs::path& fifo) {
  auto restore = std::async(std::launch::async, [&] { return scheduler.RestoreSlot(slot, fifo); });
  if (restore.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "the restore blocked on opening the FIFO";
  }
  return restore.get().status();
}

TEST(SlotSchedulerTest, ABusySlotIsRefusedBeforeItsFileIsOpened) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = TempDir("busy_fifo");
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto scheduler = MakeScheduler(kStories, Options());
  ASSERT_TRUE(scheduler);
  Collector running;
  auto id = SubmitHeld(*scheduler, Request(Turn1(kStories), -1), running, 2);
  ASSERT_TRUE(id.ok());
  running.release.set_value();
  const Status busy = RestoreFromFifo(*scheduler, 0, fifo);
  EXPECT_EQ(busy.code(), StatusCode::kConflict) << busy.message();
  // An idle slot opens it, and a FIFO is no slot file (and no reason to wait for a writer).
  const Status fifo_file = RestoreFromFifo(*scheduler, 1, fifo);
  EXPECT_EQ(fifo_file.code(), StatusCode::kInvalidData) << fifo_file.message();
  scheduler->Cancel(*id);
  ASSERT_TRUE(running.Wait());
}

// A restore that fails after the slot was taken (too few free pages for the file's
// sequence, a checksum that fails at the end of the pages) leaves the slot's retained
// sequence as it was: its tokens, its pages (a save writes the same bytes) and its hits.
TEST(SlotSchedulerTest, AFailedRestoreLeavesTheRetainedSequence) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string file = kStories;
  const fs::path dir = TempDir("failed_restore");
  {
    auto other = MakeScheduler(file, Options());
    ASSERT_TRUE(other);
    ASSERT_EQ(RunOne(*other, Request(StoryTokens(file, 70, "A big bird sang in the rain."), 4))
                  ->ids.size(),
              4u);
    ASSERT_TRUE(other->SaveSlot(0, dir / "other").ok());
  }
  std::vector<uint8_t> bad = testing_util::ReadBytes(dir / "other");
  bad[bad.size() - 20] ^= 0x01;  // the last stage's last page: found after every import
  testing_util::WriteBytes(dir / "bad_end", bad);
  // One slot of 96 positions: 6 pages, 5 of them retained by turn 1.
  SchedulerOptions small = Options();
  small.n_parallel = 1;
  small.n_ctx = 96;
  for (const SchedulerOptions& options : {small, Options()}) {
    SCOPED_TRACE(options.n_parallel);
    auto scheduler = MakeScheduler(file, options);
    ASSERT_TRUE(scheduler);
    const std::vector<TokenId> held = RunAndSave(*scheduler, file, dir / "before");
    const fs::path refused = options.n_parallel == 1 ? dir / "other" : dir / "bad_end";
    const Status status = scheduler->RestoreSlot(0, refused).status();
    EXPECT_EQ(status.code(),
              options.n_parallel == 1 ? StatusCode::kOutOfRange : StatusCode::kInvalidData)
        << status.message();
    EXPECT_EQ(scheduler->Slots()[0].n_tokens, kTurn1Held);
    const EngineStats stats = scheduler->Stats();
    EXPECT_EQ(stats.kv_pages_retained, 5);
    EXPECT_EQ(stats.kv_pages_used, 0);  // the fresh pages went back
    ASSERT_TRUE(scheduler->SaveSlot(0, dir / "after").ok());
    EXPECT_TRUE(testing_util::ReadBytes(dir / "after") == testing_util::ReadBytes(dir / "before"));
    ExpectHitsAndColdOutput(*scheduler, file, Request(Turn2(file, held), 8),
                            FullPageTokens(kTurn1Held));
  }
}

// One save or restore at a time: while a save waits for the engine thread (held inside a
// request's on_token), a restore waits slot_io_wait, then is refused; it runs once the
// save is done.
TEST(SlotSchedulerTest, OneSaveOrRestoreAtATime) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = TempDir("one_at_a_time");
  SchedulerOptions options = Options();
  options.slot_io_wait = std::chrono::milliseconds(200);
  auto scheduler = SavedTurn1(kStories, options, dir / "chat1");
  ASSERT_TRUE(scheduler);
  Collector running;
  auto id = SubmitHeld(*scheduler, Request(Turn1(kStories), -1), running, 2);
  ASSERT_TRUE(id.ok());
  const int32_t idle = scheduler->Slots()[0].state == SlotState::kProcessing ? 1 : 0;
  auto save = std::async(std::launch::async, [&] { return scheduler->SaveSlot(idle, dir / "x"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the save takes the turn
  const auto start = std::chrono::steady_clock::now();
  const Status refused = scheduler->RestoreSlot(idle, dir / "chat1").status();
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.message();
  EXPECT_NE(refused.message().find("one at a time"), std::string::npos) << refused.message();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_EQ(save.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  running.release.set_value();
  (void)save.get();  // saved, or nothing to save in that slot: either way it is done
  const Result<SlotRestoreResult> restored = scheduler->RestoreSlot(idle, dir / "chat1");
  EXPECT_TRUE(restored.ok()) << restored.status().message();
  scheduler->Cancel(*id);
  ASSERT_TRUE(running.Wait());
}

// Slot files stay under slot_save_budget: a save past it is refused (naming the budget and
// what the files take) and writes nothing; replacing a file credits its size; files that are
// not slot files do not count. Saved files are 0600.
TEST(SlotSchedulerTest, SavesStayUnderTheBudgetAndFilesArePrivate) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = TempDir("budget");
  testing_util::ScopedUmask open_umask(0);
  ASSERT_TRUE(SavedTurn1(kStories, Options(), dir / "a"));
  const uint64_t file_bytes = fs::file_size(dir / "a");
  EXPECT_EQ(testing_util::ModeOf(dir / "a"), 0600u);
  testing_util::WriteBytes(dir / "notes",
                           std::vector<uint8_t>(4 * file_bytes, 'x'));  // not a slot file
  SchedulerOptions options = Options();
  options.slot_save_budget = file_bytes + file_bytes / 2;
  auto scheduler = MakeScheduler(kStories, options);
  ASSERT_TRUE(scheduler);
  (void)RunOne(*scheduler, Request(Turn1(kStories), 4));
  const Status refused = scheduler->SaveSlot(0, dir / "b").status();
  EXPECT_EQ(refused.code(), StatusCode::kQuotaExceeded) << refused.message();
  EXPECT_NE(refused.message().find("--slot-save-budget"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find(fmt::format("{:.1f} MiB", double(file_bytes) / (1 << 20))),
            std::string::npos)
      << refused.message();
  EXPECT_FALSE(fs::exists(dir / "b"));
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir)) entries += bool(entry.exists());
  EXPECT_EQ(entries, 2);  // a and notes: no temp file either
  const Result<SlotSaveResult> replaced = scheduler->SaveSlot(0, dir / "a");
  ASSERT_TRUE(replaced.ok()) << replaced.status().message();
  EXPECT_EQ(testing_util::ModeOf(dir / "a"), 0600u);
}

TEST(SlotSchedulerTest, EraseDropsTheRetainedSequenceAndRetainedPagesAreNotUsed) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = MakeScheduler(kStories, Options());
  ASSERT_TRUE(scheduler);
  (void)RunOne(*scheduler, Request(Turn1(kStories), 4));
  EngineStats stats = scheduler->Stats();
  EXPECT_EQ(stats.kv_pages_used, 0);
  // 73 positions: 5 pages, the 4 full ones cached (shared with the index), the last not.
  EXPECT_EQ(stats.kv_pages_retained, 5);
  Result<int32_t> erased = scheduler->EraseSlot(0);
  ASSERT_TRUE(erased.ok()) << erased.status().message();
  EXPECT_EQ(*erased, kTurn1Held);
  EXPECT_EQ(scheduler->Slots()[0].n_tokens, 0);
  stats = scheduler->Stats();
  EXPECT_EQ(stats.kv_pages_retained, 0);
  EXPECT_EQ(stats.kv_pages_used, 0);
  EXPECT_EQ(scheduler->EraseSlot(0).value(), 0);
  const Status nothing = scheduler->SaveSlot(0, TempDir("erase") / "x").status();
  EXPECT_EQ(nothing.code(), StatusCode::kInvalidArgument) << nothing.message();
  // The cached pages outlive the erase: the prefix still hits.
  auto again = RunOne(*scheduler, Request(Turn1(kStories), 4));
  EXPECT_EQ(again->finish.usage.cached_tokens, 4 * kPageTokens);
}

TEST(SlotSchedulerTest, ACancelledRequestRetainsWhatEveryStageWrote) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string file = kQwen;
  const fs::path dir = TempDir("cancel");
  std::vector<TokenId> written;
  {
    auto scheduler = MakeScheduler(file, LocalSplit(Options()));
    ASSERT_TRUE(scheduler);
    Collector cancelled;
    auto id = SubmitHeld(*scheduler, Request(Turn1(file), 40), cancelled, 3);
    ASSERT_TRUE(id.ok());
    scheduler->Cancel(*id);
    cancelled.release.set_value();
    ASSERT_TRUE(cancelled.Wait());
    EXPECT_EQ(cancelled.finish.reason, FinishReason::kCancelled);
    const int held = scheduler->Slots()[0].n_tokens;
    EXPECT_GE(held, kTurn1Prompt);
    EXPECT_LT(held, kTurn1Prompt + int(cancelled.ids.size()));
    Result<SlotSaveResult> saved = scheduler->SaveSlot(0, dir / "cut");
    ASSERT_TRUE(saved.ok()) << saved.status().message();
    written = Concat(Turn1(file), cancelled.ids);
    written.resize(size_t(held));
  }
  auto restarted = MakeScheduler(file, LocalSplit(Options()));
  ASSERT_TRUE(restarted);
  ASSERT_TRUE(restarted->RestoreSlot(0, dir / "cut").ok());
  ExpectHitsAndColdOutput(*restarted, file, Request(Turn2(file, written), 8),
                          FullPageTokens(int(written.size())));
}

TEST(SlotSchedulerTest, RestoreNeedsThePrefixCacheAndSlotFilesTheModel) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = TempDir("needs");
  auto off = SavedTurn1(kStories, Options(false), dir / "chat1");  // saving needs no cache
  ASSERT_TRUE(off);
  const Status status = off->RestoreSlot(0, dir / "chat1").status();
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("--no-prefix-cache"), std::string::npos) << status.message();
  const LoadedModel& loaded = Fixture(kStories);
  auto pipeline = Pipeline::Create(*loaded.model, Options().ToPipelineOptions());
  ASSERT_TRUE(pipeline.ok());
  auto bare = Scheduler::Create(std::move(pipeline).value(), *loaded.tokenizer, Options());
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ((*bare)->SaveSlot(0, dir / "x").status().code(), StatusCode::kUnsupported);
}

TEST(SlotSchedulerTest, ALostStageDropsRetainedSequences) {
  SHARDLM_REQUIRE_FIXTURES();
  const LoadedModel& loaded = Fixture(kStories);
  ASSERT_TRUE(loaded.model);
  const SchedulerOptions options = LocalSplit(Options());
  scheduler_test_util::FaultySplit split =
      scheduler_test_util::SchedulerWithFaultyStage1(loaded, options);
  ASSERT_TRUE(split.scheduler);
  testing::FaultyStage* faulty = split.faulty;
  Scheduler& scheduler = *split.scheduler;
  // Both slots retain a sequence; the failing request takes slot 0 (dropping its own).
  (void)scheduler_test_util::RunAll(scheduler,
                                    {Request(Turn1(kStories), 4), Request(Turn1(kStories), 4, 5)});
  EXPECT_EQ(scheduler.Slots()[1].n_tokens, kTurn1Held);
  faulty->FailAfter(0);
  auto failed = RunOne(scheduler, Request(StoryTokens(kStories, 20, "The sun"), 4));
  EXPECT_EQ(failed->finish.reason, FinishReason::kError);
  // Back once the engine thread has reconnected the stage (after dropping everything).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!scheduler.Health().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(scheduler.Health().ok()) << scheduler.Health().message();
  for (const SlotInfo& slot : scheduler.Slots()) EXPECT_EQ(slot.n_tokens, 0) << slot.id;
  EXPECT_EQ(scheduler.Stats().kv_pages_retained, 0);
}

}  // namespace slot_scheduler_test
}  // namespace shardlm
