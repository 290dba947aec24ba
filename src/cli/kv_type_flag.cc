// --kv-type (see kv_type_flag.h).
#include "cli/kv_type_flag.h"

namespace shardlm::cli {

void DeclareKvTypeFlag(CLI::App& cmd, std::string& kv_type) {
  cmd.add_option("--kv-type", kv_type,
                 "KV cache element type: f32 | f16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | iq4_nl")
      ->capture_default_str();
}

Result<KvType> ParseKvTypeFlag(const std::string& kv_type) {
  Result<KvType> type = ParseKvType(kv_type);
  if (!type.ok()) return InvalidArgument("--kv-type: {}", type.status().message());
  return type;
}

void DeclareWindowKvFlag(CLI::App& cmd, std::string& window_kv) {
  cmd.add_option("--window-kv", window_kv,
                 "KV of sliding-window layers: ring (each sequence keeps its window only; a "
                 "cached prefix resumes where a state was kept) | full (every position kept; "
                 "any cached prefix resumes)")
      ->capture_default_str();
}

Result<WindowKv> ParseWindowKvFlag(const std::string& window_kv) {
  Result<WindowKv> placement = ParseWindowKv(window_kv);
  if (!placement.ok()) return InvalidArgument("--window-kv: {}", placement.status().message());
  return placement;
}

}  // namespace shardlm::cli
