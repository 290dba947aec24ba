// Status and Result: how recoverable errors travel (bad file, bad request, bad flag).
//
// Goals: one small error type shared by every module; a message that carries the values
// and the fix; propagation with one macro (SHARDLM_TRY / SHARDLM_ASSIGN_OR_RETURN).
// Non-goals: error codes for every case (the message is for humans; `code` is coarse and
// lets the server choose an HTTP status), exceptions (none cross a module boundary).
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace shardlm {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad flag, bad request field
  kInvalidData,      // malformed or hostile file contents
  kNotFound,         // missing file, key or tensor
  kUnsupported,      // valid input we do not handle (unknown type, architecture)
  kOutOfRange,       // context or capacity exceeded
  kIoError,          // read/write/mmap failure
  kUnavailable,      // a part of the engine is gone for now (a shard daemon died); retry
  kInternal,
  kConflict,  // busy with something else (a slot processing a request); retry later
  kResourceExhausted,  // too much at once (another slot transfer running); retry later
  kQuotaExceeded,      // a configured byte budget is full; free room or raise the budget
  kSentinel
};

// A value type: cheap to move, copyable. Ok() carries no allocation.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes context, e.g. the file name: "model.gguf: tensor 'x': offset out of range".
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status InvalidArgument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status InvalidData(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidData, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status NotFound(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status Unsupported(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnsupported, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status OutOfRange(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kOutOfRange, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status IoError(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kIoError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status Conflict(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kConflict, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status ResourceExhausted(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kResourceExhausted, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status QuotaExceeded(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kQuotaExceeded, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status Unavailable(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnavailable, fmt::format(f, std::forward<Args>(args)...));
}

// Either a T or a non-ok Status. Accessing value() of an error is a broken invariant.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {
    if (std::get<Status>(v_).ok()) std::abort();  // an ok Status carries no value
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace shardlm

#define SHARDLM_CONCAT_INNER(a, b) a##b
#define SHARDLM_CONCAT(a, b) SHARDLM_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not ok.
#define SHARDLM_TRY(expr)                              \
  do {                                                 \
    ::shardlm::Status _st = (expr);                    \
    if (!_st.ok()) return _st;                         \
  } while (0)

// `lhs = value of expr` (a Result<T>), or return its Status.
#define SHARDLM_ASSIGN_OR_RETURN(lhs, expr) \
  SHARDLM_ASSIGN_OR_RETURN_IMPL(SHARDLM_CONCAT(_res_, __LINE__), lhs, expr)
#define SHARDLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
