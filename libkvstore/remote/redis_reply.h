// RedisReply: one RESP2 reply, as parsed by RedisConnection. A value type
// with no library types in it, so everything above the connection wrapper
// is independent of hiredis.
#ifndef KVSTORE_LIBKVSTORE_REMOTE_REDIS_REPLY_H_
#define KVSTORE_LIBKVSTORE_REMOTE_REDIS_REPLY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/status.h"

namespace kvstore {

struct RedisReply {
  enum class Type : uint8_t { kNil, kString, kArray, kInteger, kStatus, kError };

  Type type = Type::kNil;
  int64_t integer = 0;               // kInteger
  std::string str;                   // kString (bulk bytes), kStatus and kError (text)
  std::vector<RedisReply> elements;  // kArray

  bool is_error() const { return type == Type::kError; }
  // The first word of an error reply ("MOVED", "NOPERM", "ERR"); empty otherwise.
  std::string_view error_code() const;
  // One word for messages: "nil", "string", "array", "integer", "status", "error".
  std::string_view type_name() const;
};

// The Status for an error reply `error` (its text, e.g. "NOPERM ...") that
// node `node` ("host:port") gave to `command`:
//   NOPERM, WRONGPASS, NOAUTH  -> PermissionDenied (retrying cannot help)
//   WRONGTYPE                  -> FailedPrecondition
//   OOM                        -> ResourceExhausted
//   anything else              -> IOError
Status ErrorReplyStatus(std::string_view node, std::string_view command, std::string_view error);

// PermissionDenied "redis: <what> for user U at NODE: <reason>" (U
// "default" when empty), e.g. "authentication failed" when the server
// refused AUTH or answered NOAUTH (the URL gives no password).
Status AccessDenied(std::string_view what, std::string_view node, std::string_view user, std::string_view reason);

// "host:port", with an IPv6 address in brackets ("[::1]:6379"): how nodes
// are named in messages and in the router's node table.
std::string RedisNodeName(std::string_view host, uint16_t port);

// IOError for a reply of the wrong shape, e.g. "redis 127.0.0.1:6379: GET:
// unexpected integer reply".
Status UnexpectedReply(std::string_view node, std::string_view command, const RedisReply& reply);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_REMOTE_REDIS_REPLY_H_
