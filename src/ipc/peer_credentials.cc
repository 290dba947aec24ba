// Peer credentials and the peer uid rule (peer_credentials.h).
#include "ipc/peer_credentials.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shardlm {

Result<PeerCredentials> ReadPeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return IoError("cannot read the peer's credentials (SO_PEERCRED): {}", std::strerror(errno));
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

PeerUidPolicy::PeerUidPolicy() : PeerUidPolicy(std::vector<uid_t>{}) {}

PeerUidPolicy::PeerUidPolicy(const std::vector<uid_t>& extra_uids) : uids_{::geteuid()} {
  for (uid_t uid : extra_uids) {
    if (!Allows(uid)) uids_.push_back(uid);
  }
}

bool PeerUidPolicy::Allows(uid_t uid) const {
  return std::find(uids_.begin(), uids_.end(), uid) != uids_.end();
}

std::string PeerUidPolicy::Describe() const {
  std::string text = uids_.size() == 1 ? "uid " : "uids ";
  for (size_t i = 0; i < uids_.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(uids_[i]);
  }
  return text;
}

Status CheckPeerUid(const PeerCredentials& peer, const PeerUidPolicy& policy,
                    const std::string& what) {
  if (policy.Allows(peer.uid)) return Status::Ok();
  return InvalidArgument("{} runs as uid {} (pid {}); only {} may", what, peer.uid, peer.pid,
                         policy.Describe());
}

}  // namespace shardlm
