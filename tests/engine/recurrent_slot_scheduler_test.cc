// Slot save and restore on a model with recurrent layers (qwen35-tiny: three gated DeltaNet
// layers, one attention layer): a slot file carries each stage's recurrent state at the
// sequence's last whole page besides its pages, so a conversation saved after a turn and
// restored into a fresh scheduler (after other requests ran in its slots) resumes its next
// turn there, with bitwise the tokens and logprobs of the same conversation never saved and of
// a cold scheduler — whether the state was the slot's checkpoint or its live state, saved with
// or without the prefix cache, unsplit, over splits whose first stage holds recurrent layers
// and no KV, and through a shard daemon that restarted; a restored state reaches the disk tier
// too. Saving a restored slot rewrites the same bytes (the slot holds the file's state). A
// flipped state byte, a truncated file, a file without its state or of format version 1 is
// refused by name and changes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache/snapshot_file.h"
#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"
#include "support/file_bytes.h"

namespace shardlm {
namespace recurrent_slot_scheduler_test {

namespace fs = std::filesystem;
using scheduler_test_util::Collector;
using scheduler_test_util::Concat;
using scheduler_test_util::Encode;
using scheduler_test_util::ExpectSameOutput;
using scheduler_test_util::kLongText;
using scheduler_test_util::kPageTokens;
using scheduler_test_util::kQwen35;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using scheduler_test_util::RunOne;
using scheduler_test_util::ServiceThread;
using scheduler_test_util::StoryTokens;
using scheduler_test_util::WithRemoteStage;

// Replies of turn 1; the last is never fed, so the slot holds the prompt and 3 of them.
constexpr int kReplies = 4;
// A turn-1 prompt whose held sequence (73 positions) ends mid-page: the state saved is the
// slot's checkpoint at 64; and one whose held sequence (64) ends on a page: its live state.
constexpr int kMidPagePrompt = 70;
constexpr int kOnPagePrompt = 61;

SchedulerOptions Options(bool prefix_cache = true) {
  SchedulerOptions options = scheduler_test_util::TestOptions(2);
  options.prefix_cache = prefix_cache;
  return options;
}

// Two local stages of `split` layers.
SchedulerOptions Split(SchedulerOptions options, const std::vector<double>& split) {
  options.placement.devices.assign(2, DeviceSpec{});
  options.placement.layer_split = split;
  options.threads = 1;
  return options;
}

fs::path Dir(const std::string& name) {
  return testing_util::FreshDir("shardlm_recurrent_slots", name);
}

std::vector<TokenId> Turn1(int prompt) { return StoryTokens(kQwen35, prompt, kLongText); }

// Runs turn 1 in slot 0 of `scheduler` and saves the slot to `path`; returns what the slot
// held.
std::vector<TokenId> RunAndSave(Scheduler& scheduler, int prompt, const fs::path& path,
                                uint64_t seed = 0) {
  auto reply = RunOne(scheduler, Request(Turn1(prompt), kReplies, seed));
  EXPECT_EQ(reply->ids.size(), size_t(kReplies));
  std::vector<TokenId> held = Concat(Turn1(prompt), reply->ids);
  held.pop_back();
  EXPECT_EQ(scheduler.Slots()[0].n_tokens, int(held.size()));
  Result<SlotSaveResult> saved = scheduler.SaveSlot(0, path);
  EXPECT_TRUE(saved.ok()) << saved.status().message();
  if (saved.ok()) {
    EXPECT_EQ(saved->n_written, fs::file_size(path));
  }
  return held;
}

// The next turn: what the slot held, then new text.
EngineRequest Turn2(const std::vector<TokenId>& held, uint64_t seed = 0) {
  return Request(Concat(held, Encode(kQwen35, " Then they went home to eat.", false)), 12, seed);
}

// The same conversation never saved: turn 1, then `next`, on one scheduler.
std::unique_ptr<Collector> Unsaved(const SchedulerOptions& options, int prompt,
                                   const EngineRequest& next, uint64_t seed = 0) {
  auto scheduler = MakeScheduler(kQwen35, options);
  if (!scheduler) return nullptr;
  (void)RunOne(*scheduler, Request(Turn1(prompt), kReplies, seed));
  return RunOne(*scheduler, next);
}

// Runs `next` on `restored`, whose slots hold a restored sequence of `held` positions: it
// resumes at that sequence's last whole page, as the unsaved conversation does, with bitwise
// the output of that conversation and of a cold scheduler.
void ExpectContinues(Scheduler& restored, const EngineRequest& next, int held,
                     const Collector& unsaved) {
  auto cold_scheduler = MakeScheduler(kQwen35, Options(false));
  ASSERT_TRUE(cold_scheduler);
  auto cold = RunOne(*cold_scheduler, next);
  auto got = RunOne(restored, next);
  EXPECT_EQ(got->finish.usage.cached_tokens, held / kPageTokens * kPageTokens);
  EXPECT_EQ(unsaved.finish.usage.cached_tokens, got->finish.usage.cached_tokens);
  ExpectSameOutput(*got, unsaved);
  ExpectSameOutput(*got, *cold);
}

// Saves turn 1 on one scheduler (made with `saver`), restores it on a fresh one (after an
// unrelated request, so the pool's pages and the slots' states held something else) and
// runs the next turn.
void SaveRestoreCase(const SchedulerOptions& options, int prompt, const std::string& name,
                     uint64_t seed = 0, const SchedulerOptions* saver = nullptr) {
  const fs::path path = Dir(name) / "chat1";
  std::vector<TokenId> held;
  {
    auto first = MakeScheduler(kQwen35, saver != nullptr ? *saver : options);
    ASSERT_TRUE(first);
    held = RunAndSave(*first, prompt, path, seed);
  }
  const EngineRequest next = Turn2(held, seed);
  auto unsaved = Unsaved(options, prompt, next, seed);
  ASSERT_TRUE(unsaved);
  auto restarted = MakeScheduler(kQwen35, options);
  ASSERT_TRUE(restarted);
  (void)RunOne(*restarted, Request(StoryTokens(kQwen35, 90, "A big bird sang in the rain."), 4));
  Result<SlotRestoreResult> restored = restarted->RestoreSlot(1, path);
  ASSERT_TRUE(restored.ok()) << restored.status().message();
  EXPECT_EQ(restored->n_restored, int(held.size()));
  EXPECT_EQ(restarted->Slots()[1].n_tokens, int(held.size()));
  ExpectContinues(*restarted, next, int(held.size()), *unsaved);
}

TEST(RecurrentSlotSchedulerTest, ARestoredConversationContinuesAsTheUnsavedOne) {
  SHARDLM_REQUIRE_FIXTURES();
  for (int prompt : {kMidPagePrompt, kOnPagePrompt}) {
    SCOPED_TRACE(prompt);
    SaveRestoreCase(Options(), prompt, "unsplit");
  }
  SCOPED_TRACE("sampled");
  SaveRestoreCase(Options(), kMidPagePrompt, "sampled", 7);
}

// Without the prefix cache nothing keeps a state when a sequence ends: the save exports the
// slot's own.
TEST(RecurrentSlotSchedulerTest, ASaveWithoutThePrefixCacheExportsTheSlotsState) {
  SHARDLM_REQUIRE_FIXTURES();
  const SchedulerOptions no_cache = Options(false);
  SaveRestoreCase(Options(), kMidPagePrompt, "no_cache", 0, &no_cache);
}

// Stage 0 of layers 0-2 holds only recurrent layers (no KV, no kv_page section) and stage 1
// only the attention layer (no state); with layers 1-3 in stage 1 both stages hold a state.
TEST(RecurrentSlotSchedulerTest, SplitsSaveAndRestoreEachStagesPart) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const std::vector<double>& split : {std::vector<double>{3, 1}, std::vector<double>{1, 3}}) {
    const std::string name = fmt::format("split_{}_{}", split[0], split[1]);
    SCOPED_TRACE(name);
    SaveRestoreCase(Split(Options(), split), kMidPagePrompt, name);
  }
}

TEST(RecurrentSlotSchedulerTest, ARemoteStageMovesItsStateThroughItsRestartedDaemon) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = Dir("remote");
  const std::string socket = (dir / "stage1.sock").string();
  SchedulerOptions options = WithRemoteStage(Options(), socket);
  options.placement.layer_split = {1, 3};  // the daemon's layers: two recurrent, the attention
  std::vector<TokenId> held;
  {
    ServiceThread daemon(socket);
    ASSERT_TRUE(daemon.ok());
    auto first = MakeScheduler(kQwen35, options);
    ASSERT_TRUE(first);
    held = RunAndSave(*first, kMidPagePrompt, dir / "chat1");
  }
  const EngineRequest next = Turn2(held);
  auto unsaved = Unsaved(Split(Options(), {1, 3}), kMidPagePrompt, next);
  ASSERT_TRUE(unsaved);
  ServiceThread daemon(socket);
  ASSERT_TRUE(daemon.ok());
  auto restarted = MakeScheduler(kQwen35, options);
  ASSERT_TRUE(restarted);
  Result<SlotRestoreResult> restored = restarted->RestoreSlot(0, dir / "chat1");
  ASSERT_TRUE(restored.ok()) << restored.status().message();
  ExpectContinues(*restarted, next, int(held.size()), *unsaved);
}

// The slot a file is restored into holds the file's state, not the one its last request
// left (an unrelated sequence of the same length, whose state at the same position differs).
TEST(RecurrentSlotSchedulerTest, SavingARestoredSlotWritesTheSameBytes) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = Dir("resave");
  {
    auto first = MakeScheduler(kQwen35, Options());
    ASSERT_TRUE(first);
    (void)RunAndSave(*first, kMidPagePrompt, dir / "a");
  }
  auto second = MakeScheduler(kQwen35, Options());
  ASSERT_TRUE(second);
  (void)RunOne(*second, Request(StoryTokens(kQwen35, kMidPagePrompt, "A big bird sang."), 4));
  ASSERT_TRUE(second->RestoreSlot(0, dir / "a").ok());
  Result<SlotSaveResult> saved = second->SaveSlot(0, dir / "b");
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  EXPECT_TRUE(testing_util::ReadBytes(dir / "a") == testing_util::ReadBytes(dir / "b"));
}

// `file` without its last section (the unsplit model's one recurrent_state), as `version`.
std::vector<uint8_t> WithoutState(const std::vector<uint8_t>& file, uint32_t version) {
  const SnapshotHeader header = DecodeSnapshotHeader(file).value();
  Snapshot snapshot = DecodeSnapshotOfKind(file, SnapshotFileKind::kSlot, header.layout).value();
  EXPECT_EQ(snapshot.sections.back().kind, SectionKind::kRecurrentState);
  snapshot.sections.pop_back();
  snapshot.header.format_version = version;
  return EncodeSnapshot(snapshot.header, snapshot.sections).value();
}

TEST(RecurrentSlotSchedulerTest, BadStatesAreRefusedByNameAndChangeNothing) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = Dir("bad");
  auto scheduler = MakeScheduler(kQwen35, Options());
  ASSERT_TRUE(scheduler);
  const std::vector<TokenId> held = RunAndSave(*scheduler, kMidPagePrompt, dir / "good");
  const std::vector<uint8_t> good = testing_util::ReadBytes(dir / "good");
  std::vector<uint8_t> flipped = good;
  flipped[good.size() - 20] ^= 0x20;  // inside the state, the last section
  testing_util::WriteBytes(dir / "flipped", flipped);
  testing_util::WriteBytes(dir / "truncated", std::vector<uint8_t>(good.begin(), good.end() - 100));
  testing_util::WriteBytes(dir / "stateless", WithoutState(good, 2));
  testing_util::WriteBytes(dir / "version1", WithoutState(good, 1));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"flipped", "recurrent_state, stage 0): payload checksum mismatch"},
      {"truncated", "truncated"},
      {"stateless", "(tokens, 1 kv_page, 1 recurrent_state)"},
      {"version1", "format version 1 holds no recurrent state"},
  };
  for (const auto& [bad, why] : cases) {
    SCOPED_TRACE(bad);
    const Status status = scheduler->RestoreSlot(0, dir / bad).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidData) << status.message();
    EXPECT_NE(status.message().find("slot file '" + bad + "'"), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find(why), std::string::npos) << status.message();
    EXPECT_EQ(scheduler->Slots()[0].n_tokens, int(held.size()));
  }
  // The slot kept its sequence and its state: it saves the same bytes, and a good file still
  // restores and continues.
  ASSERT_TRUE(scheduler->SaveSlot(0, dir / "again").ok());
  EXPECT_TRUE(testing_util::ReadBytes(dir / "again") == good);
  EXPECT_EQ(scheduler->Stats().prompt_tokens_cached, 0);
  auto unsaved = Unsaved(Options(), kMidPagePrompt, Turn2(held));
  ASSERT_TRUE(unsaved);
  ASSERT_TRUE(scheduler->RestoreSlot(1, dir / "good").ok());
  ExpectContinues(*scheduler, Turn2(held), int(held.size()), *unsaved);
}

// A sequence shorter than a page has no state to carry: its restore offers nothing to resume
// from, and the next turn is computed from the start, as the unsaved one is.
TEST(RecurrentSlotSchedulerTest, ASequenceWithoutAWholePageRestoresWithoutState) {
  SHARDLM_REQUIRE_FIXTURES();
  SaveRestoreCase(Options(), 10, "short");
}

// A restore into a scheduler with a disk tier persists the pages and the state beside them:
// a restarted server resumes the next turn from disk.
TEST(RecurrentSlotSchedulerTest, ARestoredStateReachesTheDiskTier) {
  SHARDLM_REQUIRE_FIXTURES();
  const fs::path dir = Dir("disk_slots");
  SchedulerOptions options = Options();
  options.kv_cache_dir = Dir("disk_cache").string();
  std::vector<TokenId> held;
  {
    auto first = MakeScheduler(kQwen35, Options());
    ASSERT_TRUE(first);
    held = RunAndSave(*first, kMidPagePrompt, dir / "chat1");
  }
  {
    auto restoring = MakeScheduler(kQwen35, options);
    ASSERT_TRUE(restoring);
    ASSERT_TRUE(restoring->RestoreSlot(0, dir / "chat1").ok());
  }
  const EngineRequest next = Turn2(held);
  auto unsaved = Unsaved(Options(), kMidPagePrompt, next);
  ASSERT_TRUE(unsaved);
  auto restarted = MakeScheduler(kQwen35, options);
  ASSERT_TRUE(restarted);
  auto got = RunOne(*restarted, next);
  EXPECT_EQ(got->finish.usage.cached_tokens, int(held.size()) / kPageTokens * kPageTokens);
  EXPECT_EQ(got->finish.usage.cached_disk_tokens, got->finish.usage.cached_tokens);
  ExpectSameOutput(*got, *unsaved);
}

}  // namespace recurrent_slot_scheduler_test
}  // namespace shardlm
