// Remote stages: a ShardService daemon and RemoteStage clients give bitwise the logits of the
// unsplit model in local+remote splits; a wrong model, version or geometry is refused with the
// reason on both sides; a garbage client or a second server does not harm the session of a proper
// one; a real `shardlm shard` process killed with -9 makes Run and Health say the stage is down,
// and a restarted daemon is reached again by Reconnect.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gguf/fingerprint.h"
#include "ipc/message_channel.h"
#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "model/model_config.h"
#include "pipeline/local_stage.h"
#include "pipeline/remote_stage.h"
#include "shard/shard_service.h"
#include "support/fixtures.h"
#include "support/spawn.h"
#include "support/temp_dir.h"

extern char** environ;

namespace shardlm {
namespace shard_test {

using testing::FixturePath;

constexpr int kPageTokens = 4;  // small pages: the test sequences cross page boundaries
constexpr int kSlots = 3;
constexpr int kPages = 40;  // more than one page transfer (kShardPagesPerTransfer)
constexpr int kMaxBatch = 32;

// Removed at exit: a daemon the test kills leaves its socket file behind.
std::string TempSocket(const std::string& name) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("shardlm_shard_" + std::to_string(::getpid()) + "_" + name + ".sock");
  testing_util::RemovedAtExit::Paths().Add(path);
  return path.string();
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A model file opened once, with what a server sends in a Hello.
struct ModelUnderTest {
  std::string path;
  std::shared_ptr<const GgufFile> file;
  ModelConfig config;
  Fingerprint128 fingerprint;
};

ModelUnderTest OpenModel(const std::string& name) {
  ModelUnderTest m;
  m.path = FixturePath(name);
  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(m.path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return m;
  m.file = std::move(file).value();
  m.config = ReadModelConfig(*m.file).value();
  m.fingerprint = ModelFingerprint(*m.file);
  return m;
}

// A daemon on a thread of this process, its log lines kept for the assertions.
class ServiceThread {
 public:
  explicit ServiceThread(const std::string& name, int threads = 1,
                         std::chrono::milliseconds run_delay = std::chrono::milliseconds{0}) {
    ShardServiceOptions options;
    options.socket_path = TempSocket(name);
    options.threads = threads;
    options.run_delay_for_test = run_delay;
    options.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      log_ += line + "\n";
    };
    Result<std::unique_ptr<ShardService>> service = ShardService::Create(std::move(options));
    EXPECT_TRUE(service.ok()) << service.status().message();
    service_ = std::move(service).value();
    thread_ = std::thread([this] { run_status_ = service_->Run(); });
  }
  ~ServiceThread() {
    service_->Stop();
    thread_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_.message();
  }
  const std::string& path() const { return service_->socket_path(); }
  std::string log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  // Waits until the log contains `part` (the daemon logs after it replied).
  bool WaitLog(const std::string& part) {
    for (int i = 0; i < 500; ++i) {
      if (Contains(log(), part)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  std::unique_ptr<ShardService> service_;
  std::thread thread_;
  Status run_status_;
  std::mutex mu_;
  std::string log_;
};

RemoteStageOptions RemoteOptions(const ModelUnderTest& m, int index, LayerRange layers,
                                 const std::string& socket_path) {
  RemoteStageOptions o;
  o.index = index;
  o.socket_path = socket_path;
  o.model_path = m.path;
  o.fingerprint = m.fingerprint;
  o.config = m.config;
  o.layers = layers;
  o.kv.n_pages = kPages;
  o.kv.page_tokens = kPageTokens;
  o.threads = 1;
  o.kv.max_batch_tokens = kMaxBatch;
  o.max_logit_rows = kMaxBatch;
  o.max_embedding_rows = kMaxBatch;
  return o;
}

std::unique_ptr<Stage> Remote(const ModelUnderTest& m, int index, LayerRange layers,
                              const std::string& socket_path) {
  Result<std::unique_ptr<RemoteStage>> stage =
      RemoteStage::Create(RemoteOptions(m, index, layers, socket_path));
  EXPECT_TRUE(stage.ok()) << stage.status().message();
  return stage.ok() ? std::move(stage).value() : nullptr;
}

std::unique_ptr<Stage> Local(const ModelUnderTest& m, int index, LayerRange layers) {
  LocalStageOptions o;
  o.index = index;
  o.threads = 1;
  o.kv.n_pages = kPages;
  o.kv.page_tokens = kPageTokens;
  o.kv.max_batch_tokens = kMaxBatch;
  Result<std::unique_ptr<LocalStage>> stage = LocalStage::Load(m.file, layers, o);
  EXPECT_TRUE(stage.ok()) << stage.status().message();
  return stage.ok() ? std::move(stage).value() : nullptr;
}

// Drives stages by hand the way a pipeline does: one PageAllocator for every stage, a
// BlockTable per slot, copy-on-write copies sent with the batch that needs them.
class Driver {
 public:
  Driver(std::vector<std::unique_ptr<Stage>> stages, const ModelConfig& config)
      : stages_(std::move(stages)),
        config_(config),
        allocator_(PageAllocator::Create(kPages, kPageTokens).value()) {
    Reset();
  }
  Stage& stage(size_t i) { return *stages_[i]; }
  void Reset() {
    tables_.clear();
    for (int slot = 0; slot < kSlots; ++slot) tables_.emplace_back(allocator_.get());
  }
  void Fork(int from, int to) { tables_[to] = tables_[from].Fork(); }

  // Runs the batch through every stage; the logits rows then the embedding rows, or the
  // first error.
  Result<std::vector<float>> Run(const std::vector<BatchEntry>& entries) {
    std::vector<PageCopy> copies;
    std::vector<int> end(kSlots, 0);
    for (const BatchEntry& e : entries) end[e.slot] = std::max(end[e.slot], e.position + 1);
    for (int slot = 0; slot < kSlots; ++slot) {
      if (end[slot] == 0) continue;
      int begin = end[slot];
      for (const BatchEntry& e : entries) {
        if (e.slot == slot) begin = std::min(begin, e.position);
      }
      SHARDLM_TRY(tables_[slot].PrepareWrite(begin, end[slot], &copies));
    }
    std::vector<PageList> pages_by_slot;
    for (const BlockTable& table : tables_) pages_by_slot.push_back(table.page_list());
    StageBatch batch{entries, pages_by_slot, copies};
    const BatchOutputRows rows = CountOutputRows(entries);
    const size_t out_floats =
        size_t(rows.logits) * config_.n_vocab + size_t(rows.embeddings) * config_.n_embd;
    std::vector<float> hidden, next;
    for (size_t i = 0; i < stages_.size(); ++i) {
      const bool last = i + 1 == stages_.size();
      next.assign(last ? out_floats : entries.size() * config_.n_embd, 0.0f);
      SHARDLM_TRY(stages_[i]->Run(batch, i == 0 ? nullptr : hidden.data(), next.data()));
      hidden.swap(next);
    }
    for (int slot = 0; slot < kSlots; ++slot) {
      if (end[slot] > 0) tables_[slot].SetTokens(end[slot]);
    }
    copies_sent_ += copies.size();
    return hidden;
  }
  size_t copies_sent() const { return copies_sent_; }

 private:
  std::vector<std::unique_ptr<Stage>> stages_;
  ModelConfig config_;
  std::unique_ptr<PageAllocator> allocator_;
  std::vector<BlockTable> tables_;
  size_t copies_sent_ = 0;
};

// Sequences A (slot 0, 9-token prompt) and B (slot 1, 7 tokens) prefilled in one batch with
// logits at every position, 2 decode steps of both; then A is forked into C (slot 2), which
// shares A's pages, and 2 steps of A, B and C with different tokens for A and C (the shared
// partial page is copied on write). Every step's logits, concatenated.
Result<std::vector<float>> RunScript(Driver& driver, int n_vocab) {
  driver.Reset();
  std::vector<float> all;
  std::vector<BatchEntry> prefill;
  int length[kSlots] = {9, 7, 0};
  for (int slot = 0; slot < 2; ++slot) {
    for (int pos = 0; pos < length[slot]; ++pos) {
      prefill.push_back({(pos * 7 + slot * 13 + 1) % n_vocab, pos, slot, true});
    }
  }
  SHARDLM_ASSIGN_OR_RETURN(std::vector<float> logits, driver.Run(prefill));
  all.insert(all.end(), logits.begin(), logits.end());
  for (int step = 0; step < 4; ++step) {
    if (step == 2) {
      driver.Fork(0, 2);
      length[2] = length[0];
    }
    std::vector<BatchEntry> decode;
    for (int slot = 0; slot < kSlots; ++slot) {
      if (length[slot] == 0) continue;
      decode.push_back({(step * 5 + slot * 11 + 3) % n_vocab, length[slot]++, slot, true});
    }
    SHARDLM_ASSIGN_OR_RETURN(logits, driver.Run(decode));
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

void ExpectBitwiseEqual(const std::vector<float>& want, const std::vector<float>& got,
                        const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  ASSERT_FALSE(want.empty());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0 && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0u) << what << ": first at " << first << ": " << want[first] << " vs "
                            << got[first];
}

// A (slot 0, 9 tokens) wants the embedding of every position and the logits of its last,
// B (slot 1, 7 tokens) the logits of every other position, in one batch; then a step where
// both decode and A's token also wants its embedding. The output rows, concatenated.
Result<std::vector<float>> RunEmbeddingScript(Driver& driver, int n_vocab) {
  driver.Reset();
  std::vector<BatchEntry> prefill;
  for (int pos = 0; pos < 9; ++pos) {
    prefill.push_back({.token = (pos * 5 + 2) % n_vocab,
                       .position = pos,
                       .slot = 0,
                       .wants_logits = pos == 8,
                       .wants_embedding = true});
  }
  for (int pos = 0; pos < 7; ++pos) {
    prefill.push_back({(pos * 3 + 1) % n_vocab, pos, 1, pos % 2 == 0});
  }
  SHARDLM_ASSIGN_OR_RETURN(std::vector<float> all, driver.Run(prefill));
  const std::vector<BatchEntry> decode = {
      {.token = 4, .position = 9, .slot = 0, .wants_logits = true, .wants_embedding = true},
      {.token = 5, .position = 7, .slot = 1, .wants_logits = true}};
  SHARDLM_ASSIGN_OR_RETURN(std::vector<float> step, driver.Run(decode));
  all.insert(all.end(), step.begin(), step.end());
  return all;
}

using Script = Result<std::vector<float>> (*)(Driver&, int);

std::vector<float> Unsplit(const ModelUnderTest& m, Script script = RunScript) {
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(Local(m, 0, {0, m.config.n_layers}));
  Driver driver(std::move(stages), m.config);
  Result<std::vector<float>> logits = script(driver, m.config.n_vocab);
  EXPECT_TRUE(logits.ok()) << logits.status().message();
  return logits.ok() ? logits.value() : std::vector<float>{};
}

TEST(ShardTest, LocalPlusRemoteSplitGivesBitwiseUnsplitLogits) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread daemon("split2");
  for (const char* name :
       {"stories260K.gguf", "qwen3-tiny-q8_0.gguf", "qwen3-tiny-f32.gguf", "llama-tiny-spm.gguf"}) {
    SCOPED_TRACE(name);
    const ModelUnderTest m = OpenModel(name);
    ASSERT_TRUE(m.file);
    const std::vector<float> want = Unsplit(m);
    const int n = m.config.n_layers, k = n / 2;
    std::vector<std::unique_ptr<Stage>> stages;
    stages.push_back(Local(m, 0, {0, k}));
    stages.push_back(Remote(m, 1, {k, n}, daemon.path()));
    ASSERT_TRUE(stages[0] && stages[1]);
    EXPECT_TRUE(stages[1]->info().remote);
    EXPECT_TRUE(stages[1]->info().last);
    EXPECT_GT(stages[1]->info().weight_bytes, 0u);
    EXPECT_GT(stages[1]->info().kv_bytes, 0u);
    Driver driver(std::move(stages), m.config);
    Result<std::vector<float>> got = RunScript(driver, m.config.n_vocab);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectBitwiseEqual(want, got.value(), std::string(name) + " local+remote");
    const StageStats stats = driver.stage(1).Stats();
    EXPECT_EQ(stats.batches, 5u);
    EXPECT_EQ(stats.tokens, 16u + 2 * 2 + 2 * 3);
    EXPECT_EQ(stats.bytes_in, (16u + 10) * m.config.n_embd * sizeof(float));
    EXPECT_GT(driver.copies_sent(), 0u);
    Result<ShardStatsReply> daemon_stats = static_cast<RemoteStage&>(driver.stage(1)).DaemonStats();
    ASSERT_TRUE(daemon_stats.ok()) << daemon_stats.status().message();
    EXPECT_EQ(daemon_stats->batches, 5u);
    EXPECT_EQ(daemon_stats->tokens, stats.tokens);
    EXPECT_GT(daemon_stats->rss_bytes, 0u);
  }
  EXPECT_TRUE(daemon.WaitLog("ended"));
}

// The last stage in a daemon sends its embedding rows after its logits rows, bitwise those
// of the unsplit model.
TEST(ShardTest, RemoteLastStageGivesBitwiseUnsplitEmbeddingRows) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread daemon("embeddings");
  for (const char* name : {"stories260K.gguf", "qwen3-tiny-f32.gguf"}) {
    SCOPED_TRACE(name);
    const ModelUnderTest m = OpenModel(name);
    ASSERT_TRUE(m.file);
    const std::vector<float> want = Unsplit(m, RunEmbeddingScript);
    ASSERT_EQ(want.size(), size_t(1 + 4 + 2) * m.config.n_vocab + size_t(9 + 1) * m.config.n_embd);
    const int n = m.config.n_layers, k = n / 2;
    std::vector<std::unique_ptr<Stage>> stages;
    stages.push_back(Local(m, 0, {0, k}));
    stages.push_back(Remote(m, 1, {k, n}, daemon.path()));
    ASSERT_TRUE(stages[0] && stages[1]);
    Driver driver(std::move(stages), m.config);
    Result<std::vector<float>> got = RunEmbeddingScript(driver, m.config.n_vocab);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectBitwiseEqual(want, got.value(), std::string(name) + " local+remote embedding rows");
  }
}

// A batch with more embedding rows than the session's Hello allows is refused, and the
// session goes on.
TEST(ShardTest, EmbeddingRowsBeyondTheHelloAreRefused) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread daemon("embedding_rows");
  const ModelUnderTest m = OpenModel("stories260K.gguf");
  ASSERT_TRUE(m.file);
  RemoteStageOptions options = RemoteOptions(m, 0, {0, m.config.n_layers}, daemon.path());
  options.max_embedding_rows = 2;
  Result<std::unique_ptr<RemoteStage>> stage = RemoteStage::Create(options);
  ASSERT_TRUE(stage.ok()) << stage.status().message();
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(std::move(stage).value());
  Driver driver(std::move(stages), m.config);
  std::vector<BatchEntry> three;
  for (int pos = 0; pos < 3; ++pos) {
    three.push_back({.token = 1 + pos, .position = pos, .slot = 0, .wants_embedding = true});
  }
  Result<std::vector<float>> refused = driver.Run(three);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(refused.status().message(), "embedding")) << refused.status().message();
  three.pop_back();
  Result<std::vector<float>> two = driver.Run(three);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->size(), 2u * m.config.n_embd);
  EXPECT_TRUE(driver.stage(0).Health().ok());
}

TEST(ShardTest, RemoteFirstAndMiddleStagesGiveBitwiseUnsplitLogits) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread first("first"), middle("middle");
  const ModelUnderTest m = OpenModel("stories260K.gguf");  // 5 layers
  ASSERT_TRUE(m.file);
  const std::vector<float> want = Unsplit(m);
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(Remote(m, 0, {0, 1}, first.path()));
  stages.push_back(Remote(m, 1, {1, 3}, middle.path()));
  stages.push_back(Local(m, 2, {3, 5}));
  ASSERT_TRUE(stages[0] && stages[1] && stages[2]);
  Driver driver(std::move(stages), m.config);
  Result<std::vector<float>> got = RunScript(driver, m.config.n_vocab);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectBitwiseEqual(want, got.value(), "remote+remote+local");
}

TEST(ShardTest, PagesExportAndImportRoundTrip) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread daemon("pages");
  const ModelUnderTest m = OpenModel("qwen3-tiny-q8_0.gguf");
  ASSERT_TRUE(m.file);
  Result<std::unique_ptr<RemoteStage>> stage =
      RemoteStage::Create(RemoteOptions(m, 0, {0, m.config.n_layers}, daemon.path()));
  ASSERT_TRUE(stage.ok()) << stage.status().message();
  RemoteStage& remote = *stage.value();
  // 20 pages: more than one transfer's worth.
  std::vector<PageId> pages;
  for (PageId p = 0; p < 20; ++p) pages.push_back(p);
  std::vector<uint8_t> written(pages.size() * remote.page_bytes());
  for (size_t i = 0; i < written.size(); ++i) written[i] = uint8_t(i * 31 + 7);
  ASSERT_TRUE(remote.ImportPages(pages, written.data()).ok());
  std::vector<uint8_t> read(written.size());
  ASSERT_TRUE(remote.ExportPages(pages, read.data()).ok());
  EXPECT_EQ(written, read);
  const PageId bad[] = {kPages};
  Status status = remote.ExportPages(bad, read.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
  EXPECT_TRUE(Contains(status.message(), "outside the pool")) << status.message();
  EXPECT_TRUE(remote.Health().ok());
}

// Stage 0 local over layers [0, 2), stage 1 remote as `options` say; null when it fails.
std::unique_ptr<Driver> LocalPlusRemote(const ModelUnderTest& m,
                                        const RemoteStageOptions& options) {
  Result<std::unique_ptr<RemoteStage>> remote = RemoteStage::Create(options);
  EXPECT_TRUE(remote.ok()) << remote.status().message();
  if (!remote.ok()) return nullptr;
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(Local(m, 0, {0, 2}));
  stages.push_back(std::move(remote).value());
  return std::make_unique<Driver>(std::move(stages), m.config);
}

// Every batch takes 150 ms in the daemon, longer than the client's 60 ms heartbeat timeout:
// the daemon's Working messages (every 15 ms) keep the stage up and the logits are right.
TEST(ShardTest, SlowBatchesWithHeartbeatsStayUp) {
  SHARDLM_REQUIRE_FIXTURES();
  const ModelUnderTest m = OpenModel("stories260K.gguf");
  ASSERT_TRUE(m.file);
  const std::vector<float> want = Unsplit(m);
  ServiceThread daemon("slow", 1, std::chrono::milliseconds{150});
  const int n = m.config.n_layers;
  RemoteStageOptions options = RemoteOptions(m, 1, {2, n}, daemon.path());
  options.heartbeat_timeout_ms = 60;
  std::unique_ptr<Driver> made = LocalPlusRemote(m, options);
  ASSERT_TRUE(made);
  Driver& driver = *made;
  Result<std::vector<float>> got = RunScript(driver, m.config.n_vocab);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectBitwiseEqual(want, got.value(), "slow daemon with heartbeats");
  EXPECT_TRUE(driver.stage(1).Health().ok());
}

TEST(ShardTest, BadBatchIsAnErrorAndTheSessionGoesOn) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread daemon("badbatch");
  const ModelUnderTest m = OpenModel("qwen3-tiny-q8_0.gguf");
  ASSERT_TRUE(m.file);
  const std::vector<float> want = Unsplit(m);
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(Remote(m, 0, {0, m.config.n_layers}, daemon.path()));
  ASSERT_TRUE(stages[0]);
  Stage& remote = *stages[0];
  // A page id beyond the pool and a slot without pages: refused, nothing computed.
  const std::vector<PageId> bad_pages = {kPages + 3};
  const PageList bad_lists[] = {bad_pages};
  const BatchEntry entry{1, 0, 0, true};
  std::vector<float> out(m.config.n_vocab);
  Status status = remote.Run({std::span(&entry, 1), bad_lists, {}}, nullptr, out.data());
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), StatusCode::kUnavailable) << status.message();
  const BatchEntry no_slot{1, 0, 5, true};
  status = remote.Run({std::span(&no_slot, 1), bad_lists, {}}, nullptr, out.data());
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), StatusCode::kUnavailable) << status.message();
  EXPECT_TRUE(remote.Health().ok());
  Driver driver(std::move(stages), m.config);
  Result<std::vector<float>> got = RunScript(driver, m.config.n_vocab);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectBitwiseEqual(want, got.value(), "after refused batches");
}

TEST(ShardTest, WrongModelIsRefusedOnBothSides) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread daemon("fingerprint");
  const ModelUnderTest m = OpenModel("qwen3-tiny-q8_0.gguf");
  const ModelUnderTest other = OpenModel("qwen3-tiny-q4_0.gguf");  // same shape
  ASSERT_TRUE(m.file && other.file);
  RemoteStageOptions options = RemoteOptions(m, 1, {1, 2}, daemon.path());
  options.fingerprint = other.fingerprint;
  Result<std::unique_ptr<RemoteStage>> stage = RemoteStage::Create(options);
  ASSERT_FALSE(stage.ok());
  const std::string want = "model fingerprint mismatch: " + m.path + " has " +
                           m.fingerprint.ToHex() + ", the server expects " +
                           other.fingerprint.ToHex();
  EXPECT_EQ(stage.status().message(), "stage 1 (unix:" + daemon.path() + ") refused: " + want);
  EXPECT_TRUE(daemon.WaitLog("refused: " + want)) << daemon.log();

  // Another shape than the file's: refused, naming both.
  options = RemoteOptions(m, 1, {1, 2}, daemon.path());
  options.config.n_layers = 3;
  stage = RemoteStage::Create(options);
  ASSERT_FALSE(stage.ok());
  EXPECT_TRUE(Contains(stage.status().message(), "refused: model shape mismatch"))
      << stage.status().message();

  // A file that is not there: the reader's error, both sides.
  options = RemoteOptions(m, 1, {1, 2}, daemon.path());
  options.model_path = m.path + ".missing";
  stage = RemoteStage::Create(options);
  ASSERT_FALSE(stage.ok());
  EXPECT_TRUE(Contains(stage.status().message(), ".missing")) << stage.status().message();
  EXPECT_TRUE(daemon.WaitLog(".missing")) << daemon.log();

  // The daemon still serves a proper Hello.
  EXPECT_TRUE(Remote(m, 1, {1, 2}, daemon.path()));
}

// Sends a raw Hello (as another version of the server would) and returns the reply.
ShardHelloReply RawHello(const std::string& path, const ShardHello& hello) {
  Result<std::unique_ptr<MessageChannel>> channel = MessageChannel::Connect(path);
  EXPECT_TRUE(channel.ok()) << channel.status().message();
  if (!channel.ok()) return {};
  std::vector<uint8_t> payload;
  EncodeHello(hello, payload);
  EXPECT_TRUE((*channel)->Send(ShardMessageType::kHello, payload).ok());
  Result<ReceivedMessage> reply = (*channel)->Receive(1 << 16, 10000);
  EXPECT_TRUE(reply.ok()) << reply.status().message();
  if (!reply.ok()) return {};
  EXPECT_EQ(reply->type, ShardMessageType::kHelloReply);
  Result<ShardHelloReply> decoded = DecodeHelloReply(reply->payload);
  EXPECT_TRUE(decoded.ok());
  return decoded.ok() ? decoded.value() : ShardHelloReply{};
}

TEST(ShardTest, VersionAndGeometryMismatchesAreRefused) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread daemon("version");
  const ModelUnderTest m = OpenModel("qwen3-tiny-q8_0.gguf");
  ASSERT_TRUE(m.file);
  ShardHello hello;
  hello.version = kShardProtocolVersion + 7;
  ShardHelloReply reply = RawHello(daemon.path(), hello);
  EXPECT_FALSE(reply.accepted);
  const std::string want = "protocol version " + std::to_string(kShardProtocolVersion + 7) +
                           ", daemon speaks " + std::to_string(kShardProtocolVersion);
  EXPECT_EQ(reply.error, want);
  EXPECT_TRUE(daemon.WaitLog("refused: " + want)) << daemon.log();

  // Geometry beyond the bounds, then no region at all.
  hello = ShardHello{};
  hello.model_path = m.path;
  hello.fingerprint_hi = m.fingerprint.hi;
  hello.fingerprint_lo = m.fingerprint.lo;
  hello.layer_begin = 0;
  hello.layer_end = m.config.n_layers;
  hello.n_layers = m.config.n_layers;
  hello.n_embd = m.config.n_embd;
  hello.n_vocab = m.config.n_vocab;
  hello.n_pages = 1 << 30;
  hello.page_tokens = 64;
  hello.max_batch_tokens = 8;
  hello.max_logit_rows = 8;
  reply = RawHello(daemon.path(), hello);
  EXPECT_FALSE(reply.accepted);
  EXPECT_TRUE(Contains(reply.error, "n_pages")) << reply.error;
  hello.n_pages = 8;
  hello.shm_bytes = 1 << 20;
  reply = RawHello(daemon.path(), hello);
  EXPECT_FALSE(reply.accepted);
  EXPECT_TRUE(Contains(reply.error, "shared region")) << reply.error;
  // Regions of the server's pages that do not cover the stage's layers, or shared both ways.
  hello.shm_bytes = 0;
  hello.shared_kv = {{1, 0}};
  reply = RawHello(daemon.path(), hello);
  EXPECT_FALSE(reply.accepted);
  EXPECT_TRUE(Contains(reply.error, "the shared KV regions end at layer 1")) << reply.error;
  hello.shared_kv = {{m.config.n_layers, 0}};
  hello.share_kv = true;
  reply = RawHello(daemon.path(), hello);
  EXPECT_FALSE(reply.accepted);
  EXPECT_TRUE(Contains(reply.error, "both lay its pages")) << reply.error;
}

TEST(ShardTest, GarbageClientIsDroppedAndASecondServerIsRefused) {
  SHARDLM_REQUIRE_FIXTURES();
  ServiceThread daemon("garbage");
  const ModelUnderTest m = OpenModel("qwen3-tiny-q8_0.gguf");
  ASSERT_TRUE(m.file);
  {
    Result<std::unique_ptr<MessageChannel>> channel = MessageChannel::Connect(daemon.path());
    ASSERT_TRUE(channel.ok()) << channel.status().message();
    const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::send((*channel)->fd(), garbage, sizeof(garbage), MSG_NOSIGNAL),
              ssize_t(sizeof(garbage)));
    // The daemon hangs up on it.
    Result<ReceivedMessage> reply = (*channel)->Receive(1 << 16, 10000);
    ASSERT_FALSE(reply.ok());
    EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable) << reply.status().message();
    EXPECT_TRUE(daemon.WaitLog("session 1: closed")) << daemon.log();
  }
  const std::vector<float> want = Unsplit(m);
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(Remote(m, 0, {0, m.config.n_layers}, daemon.path()));
  ASSERT_TRUE(stages[0]);
  // While it serves this server, another one is told so and the first one is unharmed.
  Result<std::unique_ptr<RemoteStage>> second =
      RemoteStage::Create(RemoteOptions(m, 0, {0, m.config.n_layers}, daemon.path()));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(second.status().message(), "refused: busy: serving another server"))
      << second.status().message();
  Driver driver(std::move(stages), m.config);
  Result<std::vector<float>> got = RunScript(driver, m.config.n_vocab);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectBitwiseEqual(want, got.value(), "after a garbage client");
}

// A `shardlm shard` process with stderr in a file.
class DaemonProcess {
 public:
  explicit DaemonProcess(const std::string& socket_path) : socket_path_(socket_path) {
    err_path_ = socket_path + "." + std::to_string(++instances_) + ".stderr";
    std::vector<std::string> args = {testing::ShardlmBinary(), "shard",     "--listen",
                                     "unix:" + socket_path,    "--threads", "1"};
    // Another working directory than the server's: a relative model path must still work.
    testing::SpawnOptions options;
    options.stderr_path = err_path_;
    options.working_dir = "/";
    pid_ = testing::SpawnProcess(std::move(args), options);
    EXPECT_GT(pid_, 0);
  }
  ~DaemonProcess() {
    if (pid_ > 0) Signal(SIGKILL);
    std::filesystem::remove(err_path_);
  }
  std::string Stderr() const { return testing::ReadTextFile(err_path_); }
  bool WaitReady() {
    for (int i = 0; i < 3000; ++i) {
      if (Contains(Stderr(), "shard: listening on unix:" + socket_path_)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // SIGSTOP / SIGCONT: the process stays alive and its socket open. kill() only queues the
  // signal: until the daemon's threads are scheduled and stop, they may still answer a request,
  // so this waits for the kernel to report the child stopped (or running again).
  void Pause(bool paused) {
    ::kill(pid_, paused ? SIGSTOP : SIGCONT);
    int status = 0;
    while (::waitpid(pid_, &status, paused ? WUNTRACED : WCONTINUED) == pid_) {
      if (paused ? WIFSTOPPED(status) : WIFCONTINUED(status)) return;
      if (WIFEXITED(status) || WIFSIGNALED(status)) {
        ADD_FAILURE() << "the daemon ended while being paused or resumed";
        pid_ = -1;
        return;
      }
    }
  }
  // Sends `sig` (0: none, just wait) and reaps the process; its exit code (128 + signal when
  // killed).
  int Signal(int sig) {
    if (sig != 0) ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  static inline int instances_ = 0;
  std::string socket_path_;
  std::string err_path_;
  pid_t pid_ = -1;
};

TEST(ShardProcessTest, KilledDaemonIsDownUntilRestartedAndReconnected) {
  SHARDLM_REQUIRE_FIXTURES();
  SHARDLM_REQUIRE_BINARY();
  const std::string socket_path = TempSocket("process");
  const ModelUnderTest m = OpenModel("stories260K.gguf");
  ASSERT_TRUE(m.file);
  const std::vector<float> want = Unsplit(m);
  auto daemon = std::make_unique<DaemonProcess>(socket_path);
  ASSERT_TRUE(daemon->WaitReady()) << daemon->Stderr();
  struct stat st;
  ASSERT_EQ(::stat(socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  {
    // A second daemon on a live socket: refused, and the first one keeps its socket.
    DaemonProcess second(socket_path);
    EXPECT_EQ(second.Signal(0), 1);
    EXPECT_TRUE(Contains(second.Stderr(), socket_path)) << second.Stderr();
  }

  const int n = m.config.n_layers;
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(Local(m, 0, {0, 2}));
  // The server names the model relative to its own directory.
  ModelUnderTest relative = m;
  relative.path = std::filesystem::relative(m.path).string();
  ASSERT_NE(relative.path.front(), '/');
  stages.push_back(Remote(relative, 1, {2, n}, socket_path));
  ASSERT_TRUE(stages[0] && stages[1]);
  Driver driver(std::move(stages), m.config);
  Result<std::vector<float>> got = RunScript(driver, m.config.n_vocab);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectBitwiseEqual(want, got.value(), "through a daemon process");

  EXPECT_EQ(daemon->Signal(SIGKILL), 128 + SIGKILL);
  const std::string down = "stage 1 (unix:" + socket_path + ") is down";
  got = RunScript(driver, m.config.n_vocab);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(got.status().message(), down)) << got.status().message();
  Status health = driver.stage(1).Health();
  EXPECT_EQ(health.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(health.message(), down)) << health.message();
  // Nothing listens yet: reconnecting fails and the stage stays down.
  EXPECT_EQ(driver.stage(1).Reconnect().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(driver.stage(1).Health().ok());

  // A new daemon on the same path (the killed one left its socket file behind).
  daemon.reset();
  daemon = std::make_unique<DaemonProcess>(socket_path);
  ASSERT_TRUE(daemon->WaitReady()) << daemon->Stderr();
  Status reconnected = driver.stage(1).Reconnect();
  ASSERT_TRUE(reconnected.ok()) << reconnected.message();
  EXPECT_TRUE(driver.stage(1).Health().ok());
  got = RunScript(driver, m.config.n_vocab);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectBitwiseEqual(want, got.value(), "after a restart");

  // SIGTERM: a clean exit that removes the socket file.
  EXPECT_EQ(daemon->Signal(SIGTERM), 0) << daemon->Stderr();
  EXPECT_FALSE(std::filesystem::exists(socket_path));
}

// A stopped daemon (SIGSTOP: the process is alive, the socket open, nothing answers) is
// down within the heartbeat timeout, not after the 10-minute run timeout; once it runs again
// the stage reconnects and gives the same logits.
TEST(ShardProcessTest, StoppedDaemonIsDownWithinTheHeartbeatTimeout) {
  SHARDLM_REQUIRE_FIXTURES();
  SHARDLM_REQUIRE_BINARY();
  const std::string socket_path = TempSocket("stopped");
  const ModelUnderTest m = OpenModel("stories260K.gguf");
  ASSERT_TRUE(m.file);
  const std::vector<float> want = Unsplit(m);
  DaemonProcess daemon(socket_path);
  ASSERT_TRUE(daemon.WaitReady()) << daemon.Stderr();
  const int n = m.config.n_layers;
  RemoteStageOptions options = RemoteOptions(m, 1, {2, n}, socket_path);
  options.heartbeat_timeout_ms = 300;
  options.hello_timeout_ms = 1000;
  std::unique_ptr<Driver> made = LocalPlusRemote(m, options);
  ASSERT_TRUE(made);
  Driver& driver = *made;
  ASSERT_TRUE(RunScript(driver, m.config.n_vocab).ok());

  daemon.Pause(true);
  const auto start = std::chrono::steady_clock::now();
  Result<std::vector<float>> got = RunScript(driver, m.config.n_vocab);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(got.status().message(), "no heartbeat")) << got.status().message();
  EXPECT_LT(seconds, 5.0);
  EXPECT_FALSE(driver.stage(1).Health().ok());

  daemon.Pause(false);
  // The daemon first notices that its old session is gone; until then it refuses.
  Status reconnected = Unavailable("not tried");
  for (int i = 0; i < 100 && !reconnected.ok(); ++i) {
    reconnected = driver.stage(1).Reconnect();
    if (!reconnected.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(reconnected.ok()) << reconnected.message() << "\n" << daemon.Stderr();
  got = RunScript(driver, m.config.n_vocab);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectBitwiseEqual(want, got.value(), "after the daemon ran again");
}

}  // namespace shard_test
}  // namespace shardlm
