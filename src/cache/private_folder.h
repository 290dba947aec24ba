// Private folders: where the KV cache and slot files live (`--kv-cache-dir` and its layout
// subfolders, `--slot-save-path` or the slots subfolder of `--kv-cache-dir`). A saved
// sequence holds the text of a conversation in its token ids and KV, so these folders are
// the server user's alone: created 0700, and an existing one owned by another user is
// refused rather than written into (that user could read every file, or plant and swap
// files under the server's feet).
//
// EnsurePrivateFolder creates a missing folder and every missing parent with mkdir(0700)
// (never wider: the process umask can only narrow it, and there is no moment where the
// folder is open to others), or checks an existing one: a folder (following a symlink, as
// a user-named folder may be one), owned by the effective uid. Its errors name the folder,
// the flag it came from, the owner and the fix.
//
// Goals: one rule for every folder the cache and slots write; errors a user can act on.
// Non-goals: the files themselves (atomic_file.h creates them 0600); checking the parents
// of an existing folder (whoever owns a parent can rename the folder away, a risk the user
// chose with the path); locking against other processes.
//
// Thread safety: pure functions over the filesystem; concurrent calls on one path are fine
// (a folder another thread created first is checked like any existing one).
#pragma once

#include <filesystem>
#include <string_view>

#include "base/status.h"

namespace shardlm {

// What to do with an existing folder's group and other permission bits.
enum class ExistingFolderMode {
  kKeep,     // a folder the user named: its mode is the user's choice
  kTighten,  // a subfolder shardlm made (an older build may have made it 0755): set 0700
  kSentinel
};

// `dir` exists afterwards as a folder owned by this process's effective uid, mode 0700 if
// created here. `what` names it for messages, e.g. "--kv-cache-dir" or "slot folder".
// Errors: InvalidArgument (empty path, not a folder, owned by another user), IoError
// (mkdir or stat failed; a read-only parent gives "not writable").
Status EnsurePrivateFolder(const std::filesystem::path& dir, std::string_view what,
                           ExistingFolderMode existing = ExistingFolderMode::kKeep);

// The checks of EnsurePrivateFolder without creating anything: NotFound when `dir` is
// missing (a restore from a folder that was never made).
Status CheckPrivateFolder(const std::filesystem::path& dir, std::string_view what);

}  // namespace shardlm
