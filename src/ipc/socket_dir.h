// Where shard sockets live. A socket named without '/' (`--listen unix:s1.sock`,
// `--devices cpu:0,unix:s1.sock`) is a file in a folder only this user can enter:
// $XDG_RUNTIME_DIR/shardlm/ when XDG_RUNTIME_DIR is an absolute path (the per-user runtime
// folder of a login session), else /tmp/shardlm-$UID/ (the effective uid). A name with '/'
// (`unix:/srv/s1.sock`, `unix:./s1.sock`) is used as given.
//
// Why a private folder: in a folder that others can write to, another user could take the
// socket's name first (and be connected to) or replace a stale socket file; in a folder only
// we can enter, neither can happen, and a socket's own mode is not the only guard.
//
// Goals: the folder is created mode 0700 from the start (mkdir with that mode, never a wider
// one narrowed later); an existing folder is used only when it is a real folder (not a
// symbolic link) owned by this user with no group or other permission bits, else a clear
// error says what is wrong and how to fix it; both ends of a socket resolve a name the same
// way, so the daemon and the server meet without either spelling out the folder.
// Non-goals: creating the parent ($XDG_RUNTIME_DIR or /tmp must exist), checking folders of
// paths given with '/' (the user chose them), cleaning up old sockets (a listener replaces a
// stale one).
//
// Thread safety: free functions; they read the environment (not to be changed meanwhile).
#pragma once

#include <string>

#include "base/status.h"

namespace shardlm {

// The default socket folder for this process, from the environment; nothing is created.
std::string DefaultSocketDir();

// Makes `dir` mode 0700 if it is missing, then checks that it is a folder (not a symbolic
// link) owned by this process's effective uid with no group or other permission bits.
// Errors name the folder: IoError when it cannot be created or inspected, InvalidArgument
// when it exists but is not private to this user.
Status EnsurePrivateDir(const std::string& dir);

// The socket path a `unix:` name stands for: a name without '/' in DefaultSocketDir(), made
// or checked by EnsurePrivateDir; a name with '/' unchanged. Errors (InvalidArgument unless
// said): an empty name, "." or "..", a path longer than a socket address holds, and those of
// EnsurePrivateDir.
Result<std::string> ResolveSocketPath(const std::string& name);

}  // namespace shardlm
