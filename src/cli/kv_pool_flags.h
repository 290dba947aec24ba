// `--kv-pool`, `--kv-tier`, `--kv-select`, `--kv-sink`, `--kv-tail`, `--kv-reselect`: bounded
// KV residency (kv/pager.h), shared by serve, run and bench so the flags are declared once.
//
// Goals: one name, one help text and one parse error per flag; `--kv-pool auto` sized from
// the memory the machine has free; a file tier's folder made private (0700) before the model
// loads.
// Non-goals: the policy itself (kv/pager.h), the tier (kv/kv_tier.h).
//
// Thread safety: plain functions.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "kv/kv_tier.h"
#include "kv/page_pool.h"
#include "kv/pager.h"
#include "model/model.h"

namespace shardlm::cli {

struct KvPoolFlags {
  std::string pool;  // positions, "auto" or "" (unbounded)
  std::string tier = "ram";
  std::string select = "qk";
  int sink = 64;
  int tail = 256;
  int reselect = 64;
};

void DeclareKvPoolFlags(CLI::App& cmd, KvPoolFlags& flags);

// What the flags ask for. `auto` takes a quarter of the memory available now, shared by
// n_parallel sequences, at the K and V of one position of `model`'s paged layers in kv_type.
struct ParsedKvPool {
  KvPoolOptions pool;
  KvTierSpec tier;
};
Result<ParsedKvPool> ParseKvPoolFlags(const KvPoolFlags& flags, int n_parallel, const Model& model,
                                      KvType kv_type, WindowKv window_kv);

// "kv pool: 4096 positions per sequence, tier ram, qk selection, sink 64, tail 256, ..."
std::string DescribeKvPool(const ParsedKvPool& parsed);

}  // namespace shardlm::cli
