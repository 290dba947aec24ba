// Engine: names of the finish reasons (engine.h). The engine itself is the Scheduler
// (scheduler.h); this file owns only what every Engine implementation shares.
#include "runtime/engine.h"

namespace shardlm {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    case FinishReason::kSentinel:
      break;
  }
  return "unknown";
}

}  // namespace shardlm
