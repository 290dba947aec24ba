// Engine: names of the finish reasons and slot states, and the default slot operations of
// an engine without slots (engine.h). The engine itself is the Scheduler (scheduler.h);
// this file owns only what every Engine implementation shares.
#include "engine/engine.h"

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

const char* SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kIdle:
      return "idle";
    case SlotState::kProcessing:
      return "processing";
    case SlotState::kSaving:
      return "saving";
    case SlotState::kRestoring:
      return "restoring";
    case SlotState::kSentinel:
      break;
  }
  return "unknown";
}

Result<SlotSaveResult> Engine::SaveSlot(int32_t, const std::filesystem::path&) {
  return Unsupported("this engine has no slots to save");
}

Result<SlotRestoreResult> Engine::RestoreSlot(int32_t, const std::filesystem::path&) {
  return Unsupported("this engine has no slots to restore");
}

Result<int32_t> Engine::EraseSlot(int32_t) {
  return Unsupported("this engine has no slots to erase");
}

}  // namespace shardlm
