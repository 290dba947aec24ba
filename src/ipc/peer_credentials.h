// Peer credentials of a connected Unix socket (SO_PEERCRED) and the rule for who may be at
// the other end of a shard socket: a process of this process's own uid, plus the uids the
// user named.
//
// Why both ends check: the socket file's 0600 mode keeps other users out only while the
// folder and the file keep their modes, and never keeps out root; a process of another uid
// that reaches the socket could feed a daemon requests, and a process that takes a socket
// path before the daemon does would receive the server's shared-memory region. The kernel
// records who called connect() or listen(), so this check holds whatever the file modes.
//
// Goals: the check runs before a single byte is exchanged (MessageChannel::Connect checks
// the listener right after connect, UnixListener::Accept checks each client right after
// accept); a refusal names the peer's uid and pid and the allowed uids.
// Non-goals: gids, supplementary groups, user names, checks across hosts (a later transport
// brings its own authentication).
//
// Thread safety: values and free functions.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace shardlm {

// Who is at the other end of a connected Unix socket: for the connecting side, the process
// that called listen(); for the accepting side, the process that called connect().
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Errors: IoError naming errno (e.g. not a Unix socket).
Result<PeerCredentials> ReadPeerCredentials(int fd);

// The uids a shard socket's peer may run as. Default: this process's effective uid alone.
class PeerUidPolicy {
 public:
  PeerUidPolicy();
  // This process's effective uid plus `extra_uids` (duplicates ignored).
  explicit PeerUidPolicy(const std::vector<uid_t>& extra_uids);

  bool Allows(uid_t uid) const;
  // "uid 1000" or "uids 1000, 0" (own uid first).
  std::string Describe() const;

 private:
  std::vector<uid_t> uids_;
};

// Ok when `peer` runs as an allowed uid; otherwise InvalidArgument "<what> runs as uid U
// (pid P); only uid A may". `what` names the peer ("the process listening on PATH").
Status CheckPeerUid(const PeerCredentials& peer, const PeerUidPolicy& policy,
                    const std::string& what);

}  // namespace shardlm
