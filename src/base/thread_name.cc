// SetThreadName (see thread_name.h).
#include "base/thread_name.h"

#include <pthread.h>

namespace shardlm {

void SetThreadName(const std::string& name) {
#ifdef __linux__
  constexpr size_t kMaxLength = 15;  // the kernel's TASK_COMM_LEN of 16, minus the NUL
  pthread_setname_np(pthread_self(), name.substr(0, kMaxLength).c_str());
#else
  (void)name;
#endif
}

}  // namespace shardlm
