// The page geometry the kv tests build pools of, in one call.
//
// Thread safety: a pure function.
#pragma once

#include "kv/page_pool.h"

namespace shardlm::kv_test {

inline PagePoolConfig PoolConfig(int n_pages, int page_tokens, int n_layers, int n_kv_heads,
                                 int head_dim, KvType kv_type = KvType::kF32) {
  return PagePoolConfig{n_pages, page_tokens, n_layers, n_kv_heads, head_dim, kv_type, {}};
}

}  // namespace shardlm::kv_test
