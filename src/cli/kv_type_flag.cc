// --kv-type (see kv_type_flag.h).
#include "cli/kv_type_flag.h"

namespace shardlm::cli {

void DeclareKvTypeFlag(CLI::App& cmd, std::string& kv_type) {
  cmd.add_option("--kv-type", kv_type, "KV cache element type: f32 | f16 | q8_0")
      ->capture_default_str();
}

Result<KvType> ParseKvTypeFlag(const std::string& kv_type) {
  Result<KvType> type = ParseKvType(kv_type);
  if (!type.ok()) return InvalidArgument("--kv-type: {}", type.status().message());
  return type;
}

}  // namespace shardlm::cli
