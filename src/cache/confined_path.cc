#include "cache/confined_path.h"

namespace shardlm {

Result<std::filesystem::path> ConfinedPath(const std::filesystem::path& folder,
                                           std::string_view user_filename) {
  if (user_filename.empty()) return InvalidArgument("empty file name");
  if (user_filename.size() > kMaxUserFilenameBytes) {
    return InvalidArgument("file name of {} bytes: at most {}", user_filename.size(),
                           kMaxUserFilenameBytes);
  }
  if (user_filename.front() == '.') {
    return InvalidArgument("file name '{}' starts with '.'", user_filename);
  }
  for (char c : user_filename) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '/' || c == '\\') {
      return InvalidArgument("file name '{}' contains a path separator: give a plain name",
                             user_filename);
    }
    if (byte < 0x20 || byte == 0x7f) {
      return InvalidArgument("file name contains control character 0x{:02x}", byte);
    }
  }
  return folder / std::filesystem::path(std::string(user_filename));
}

}  // namespace shardlm
