// Names the calling thread, so `top -H`, `ps -L`, perf and gdb show what each of shardlm's
// threads is (engine, compute workers, stage workers, disk writer, ...).
//
// Goals: one call at the top of each long-lived thread's function. Non-goals: portability
// beyond Linux (elsewhere the call does nothing).
//
// Thread safety: affects the calling thread only.
#pragma once

#include <string>

namespace shardlm {

// Linux keeps 15 bytes of a thread name: longer names are cut.
void SetThreadName(const std::string& name);

}  // namespace shardlm
