#include "base/status.h"

namespace shardlm {

// Kept out of line so every module links one definition; the header stays allocation-free.
const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kInvalidData: return "invalid data";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kConflict: return "conflict";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kQuotaExceeded: return "quota exceeded";
    case StatusCode::kSentinel: break;
  }
  return "unknown";
}

}  // namespace shardlm
