// ConfinedPath: a user-chosen file name (e.g. `/slots/0?action=save {"filename": ...}`)
// turned into a path that is guaranteed to stay inside a configured folder.
//
// Rejected (InvalidArgument naming the rule): an empty name, a name longer than
// kMaxUserFilenameBytes, any '/' or '\' (so no absolute path and no subfolder), a name
// that starts with '.' (".", "..", hidden files and the cache's own temp files), and
// control characters (bytes < 0x20 and 0x7f). Anything else is used as is.
// Goals: no path a client sends can name a file outside `folder` (README "Security").
// Non-goals: checking that the file exists, symlinks planted inside the folder by someone
// with write access to it (they already own the folder).
// Thread safety: pure function.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

#include "base/status.h"

namespace shardlm {

// Leaves room under the usual 255-byte NAME_MAX for a suffix the server may add.
inline constexpr size_t kMaxUserFilenameBytes = 200;

Result<std::filesystem::path> ConfinedPath(const std::filesystem::path& folder,
                                           std::string_view user_filename);

}  // namespace shardlm
