// Bounded KV residency flags (see kv_pool_flags.h).
#include "cli/kv_pool_flags.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>

#include "cache/private_folder.h"

namespace shardlm::cli {
namespace {

// MemAvailable of /proc/meminfo in bytes, or 0 when unknown.
uint64_t AvailableMemory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

void DeclareKvPoolFlags(CLI::App& cmd, KvPoolFlags& flags) {
  cmd.add_option("--kv-pool", flags.pool,
                 "Bound each sequence's resident KV to this many positions per stage (rounded "
                 "up to pages) or 'auto' (a quarter of the free memory); the rest moves to "
                 "--kv-tier. Default: unbounded");
  cmd.add_option("--kv-tier", flags.tier,
                 "Where KV pages outside the pool live: ram | file:DIR (a sparse file per "
                 "stage, so a context larger than RAM works)")
      ->capture_default_str();
  cmd.add_option("--kv-select", flags.select,
                 "How the pool chooses pages: qk (pages whose keys bound the query's scores "
                 "highest) | lru (the most recent)")
      ->capture_default_str();
  cmd.add_option("--kv-sink", flags.sink, "First positions of a sequence always resident")
      ->capture_default_str();
  cmd.add_option("--kv-tail", flags.tail, "Last positions of a sequence always resident")
      ->capture_default_str();
  cmd.add_option("--kv-reselect", flags.reselect, "Decode tokens between two page selections (qk)")
      ->capture_default_str();
}

Result<ParsedKvPool> ParseKvPoolFlags(const KvPoolFlags& flags, int n_parallel, const Model& model,
                                      KvType kv_type, WindowKv window_kv) {
  ParsedKvPool parsed;
  KvPoolOptions& pool = parsed.pool;
  pool.sink_tokens = flags.sink;
  pool.tail_tokens = flags.tail;
  pool.reselect_tokens = flags.reselect;
  SHARDLM_ASSIGN_OR_RETURN(pool.select, ParsePageSelect(flags.select));
  SHARDLM_ASSIGN_OR_RETURN(parsed.tier, ParseKvTierSpec(flags.tier));
  if (flags.pool.empty()) return parsed;
  if (flags.pool == "auto") {
    const ModelConfig& config = model.config();
    SHARDLM_TRY(CheckModelKvRows(config, kv_type));
    const size_t bytes_per_position =
        KvPageBytes(StageKvPoolConfig(config, {0, config.n_layers}, 1, 1, kv_type, window_kv));
    const uint64_t available = AvailableMemory();
    const uint64_t per_sequence =
        available / 4 / uint64_t(std::max(1, n_parallel)) / std::max<size_t>(1, bytes_per_position);
    if (per_sequence == 0) {
      return InvalidArgument("--kv-pool auto: cannot tell the free memory; give a size");
    }
    // Whole 256-position steps, at least enough for the sink, the tail and a batch.
    pool.pool_tokens = int(std::min<uint64_t>(per_sequence / 256 * 256 + 256, 1u << 30));
  } else {
    int value = 0;
    const char* end = flags.pool.data() + flags.pool.size();
    const auto [ptr, ec] = std::from_chars(flags.pool.data(), end, value);
    if (ec != std::errc() || ptr != end || value <= 0) {
      return InvalidArgument("--kv-pool '{}' is not a positive number of positions or 'auto'",
                             flags.pool);
    }
    pool.pool_tokens = value;
  }
  if (parsed.tier.kind == KvTierSpec::Kind::kFile) {
    SHARDLM_TRY(EnsurePrivateFolder(parsed.tier.dir, "--kv-tier file:", ExistingFolderMode::kKeep));
  }
  return parsed;
}

std::string DescribeKvPool(const ParsedKvPool& parsed) {
  const KvPoolOptions& pool = parsed.pool;
  return fmt::format(
      "kv pool: {} positions per sequence and stage, tier {}, {} selection (every {} tokens), "
      "sink {}, tail {}",
      pool.pool_tokens, KvTierSpecName(parsed.tier), PageSelectName(pool.select),
      pool.reselect_tokens, pool.sink_tokens, pool.tail_tokens);
}

}  // namespace shardlm::cli
