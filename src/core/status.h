// Errors that callers handle, as values.
//
// `Status` is ok or an error code with a message; `StatusOr<T>` is a value or
// an error. A scheduling outcome (queued, infeasible) is not an error and is
// never reported through these. Plain values: thread-compatible.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace gandiva::core {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the input is malformed; the message names the field
  kNotFound,
  kFailedPrecondition,  // the request is well formed but not possible now
  kAlreadyExists,
  kUnavailable,
  kInternal,
  kIo,
  kUnauthenticated,   // no credential, or one the daemon does not know
  kPermissionDenied,  // the caller may not; the message names the rule
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: trace.csv:12: field 'num_gpus': ..."
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFound(std::string m) {
  return Status(StatusCode::kNotFound, std::move(m));
}
// What a request asks for is so already (a process already runs, a job is
// already suspended): the caller's goal holds, not an error to retry.
inline Status AlreadyExists(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status IoError(std::string m) {
  return Status(StatusCode::kIo, std::move(m));
}
inline Status Unauthenticated(std::string m) {
  return Status(StatusCode::kUnauthenticated, std::move(m));
}
inline Status PermissionDenied(std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(m));
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) {
      v_ = Status(StatusCode::kInternal, "StatusOr built from an ok Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

// Invariant checks: a failed check is a bug in the program, never bad input.
[[noreturn]] void CheckFailed(const char* file, int line, const char* expr,
                              const std::string& detail);

}  // namespace gandiva::core

#define GANDIVA_CHECK(cond)                                                   \
  do {                                                                        \
    if (!(cond))                                                              \
      ::gandiva::core::CheckFailed(__FILE__, __LINE__, #cond, std::string()); \
  } while (0)
#define GANDIVA_CHECK_MSG(cond, msg)                                  \
  do {                                                                \
    if (!(cond))                                                      \
      ::gandiva::core::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

#define GANDIVA_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::gandiva::core::Status gandiva_status_ = (expr);  \
    if (!gandiva_status_.ok()) return gandiva_status_; \
  } while (0)
