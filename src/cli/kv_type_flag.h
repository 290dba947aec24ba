// `--kv-type` and `--window-kv`, shared by serve, run and bench so each flag is declared once.
//
// Goals: one name, one help text, one parse error for the KV element type. Each command keeps
// its own default: serve stores F16 (half the memory and half the bytes attention reads per
// token, like llama-server), run and bench F32 (llama.cpp's golden outputs in the fixtures
// were made with F32 K and V).
// Non-goals: the page layout (kv/page_pool.h).
//
// Thread safety: plain functions.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "kv/page_pool.h"

namespace shardlm::cli {

// Declares --kv-type on `cmd`; `kv_type` holds the default on entry.
void DeclareKvTypeFlag(CLI::App& cmd, std::string& kv_type);

// "f32" | "f16" | "q8_0"; otherwise an error naming the flag.
Result<KvType> ParseKvTypeFlag(const std::string& kv_type);

// Declares --window-kv on `cmd` (default "ring": windowed layers keep only their window).
void DeclareWindowKvFlag(CLI::App& cmd, std::string& window_kv);
// "ring" | "full"; otherwise an error naming the flag.
Result<WindowKv> ParseWindowKvFlag(const std::string& window_kv);

}  // namespace shardlm::cli
