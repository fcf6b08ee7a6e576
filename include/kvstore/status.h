// Status and Result<T>: the one error type of libkvstore.
//
// Every fallible function in the public API returns a Status or a Result<T>;
// no exception crosses the API. A Status is cheap to copy when ok (no
// allocation) and carries a code plus a message that names the thing and the
// failed check, e.g. "tensor '3.1': data_offsets end 4096 > data size 4000".
//
// Thread safety: Status and Result are values; distinct objects may be used
// from different threads freely, a single object like any standard value.
#ifndef KVSTORE_STATUS_H_
#define KVSTORE_STATUS_H_

#include <cassert>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace kvstore {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // a caller-supplied value or an input that breaks a rule
  kNotFound = 2,            // a file, tensor, key or entry that does not exist
  kIOError = 3,             // the operating system refused (open, write, fsync, ...)
  kCorruption = 4,          // bytes from a file fail a structural or integrity check
  kNotSupported = 5,        // a valid request this class/layout/build cannot do
  kFailedPrecondition = 6,  // the object is not in a state that allows the call
  kResourceExhausted = 7,   // a size cap was hit (declared sizes, budgets)
  kInternal = 8,            // a bug in libkvstore
  kPermissionDenied = 9,    // credentials refused or an access not granted (Redis AUTH, ACL)
};

// The upper-case name of a code, e.g. "Corruption".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string_view message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view msg) { return {StatusCode::kInvalidArgument, msg}; }
  static Status NotFound(std::string_view msg) { return {StatusCode::kNotFound, msg}; }
  static Status IOError(std::string_view msg) { return {StatusCode::kIOError, msg}; }
  static Status Corruption(std::string_view msg) { return {StatusCode::kCorruption, msg}; }
  static Status NotSupported(std::string_view msg) { return {StatusCode::kNotSupported, msg}; }
  static Status FailedPrecondition(std::string_view msg) {
    return {StatusCode::kFailedPrecondition, msg};
  }
  static Status ResourceExhausted(std::string_view msg) {
    return {StatusCode::kResourceExhausted, msg};
  }
  static Status Internal(std::string_view msg) { return {StatusCode::kInternal, msg}; }
  static Status PermissionDenied(std::string_view msg) { return {StatusCode::kPermissionDenied, msg}; }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // Empty when ok.
  std::string_view message() const { return rep_ ? std::string_view(rep_->message) : ""; }
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // Returns a status with the same code and "<prefix>: <message>"; ok stays ok.
  Status WithPrefix(std::string_view prefix) const;

  bool IsInvalidArgument() const { return code() == StatusCode::kInvalidArgument; }
  bool IsNotFound() const { return code() == StatusCode::kNotFound; }
  bool IsIOError() const { return code() == StatusCode::kIOError; }
  bool IsCorruption() const { return code() == StatusCode::kCorruption; }
  bool IsNotSupported() const { return code() == StatusCode::kNotSupported; }
  bool IsPermissionDenied() const { return code() == StatusCode::kPermissionDenied; }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null when ok; immutable, so sharing is safe
};

// Either a value of type T or a non-ok Status.
//
// REQUIRES (asserted): value() only on ok results; constructing from an ok
// Status is a caller bug.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : v_(value) {}  // NOLINT(google-explicit-constructor)
  Result(T&& value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  template <typename U,
            typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                        !std::is_same_v<std::decay_t<U>, Status> &&
                                        !std::is_same_v<std::decay_t<U>, Result<T>>>>
  Result(U&& value) : v_(T(std::forward<U>(value))) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // OK when holding a value.
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? std::get<T>(v_) : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvstore

#define KVSTORE_CONCAT_INNER_(a, b) a##b
#define KVSTORE_CONCAT_(a, b) KVSTORE_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (a Status) is not ok.
#define KV_RETURN_IF_ERROR(expr)                   \
  do {                                             \
    ::kvstore::Status kv_status_ = (expr);         \
    if (!kv_status_.ok()) return kv_status_;       \
  } while (0)

// `lhs = value of expr` (a Result<T>), or returns its Status from the
// enclosing function. `lhs` may be a declaration: KV_ASSIGN_OR_RETURN(auto x, F());
#define KV_ASSIGN_OR_RETURN(lhs, expr) \
  KV_ASSIGN_OR_RETURN_IMPL_(KVSTORE_CONCAT_(kv_result_, __LINE__), lhs, expr)
#define KV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // KVSTORE_STATUS_H_
