#include "libkvstore/remote/redis_reply.h"

#include <string>

namespace kvstore {
namespace {

// Error text from a server is untrusted: keep messages one short line.
std::string Printable(std::string_view text) {
  constexpr size_t kMax = 200;
  std::string out;
  for (char c : text.substr(0, kMax)) out.push_back(c >= ' ' && c < 0x7f ? c : '?');
  if (text.size() > kMax) out += "...";
  return out;
}

}  // namespace

std::string_view RedisReply::error_code() const {
  if (type != Type::kError) return {};
  std::string_view s(str);
  return s.substr(0, s.find(' '));
}

std::string_view RedisReply::type_name() const {
  switch (type) {
    case Type::kNil: return "nil";
    case Type::kString: return "string";
    case Type::kArray: return "array";
    case Type::kInteger: return "integer";
    case Type::kStatus: return "status";
    case Type::kError: return "error";
  }
  return "unknown";
}

Status ErrorReplyStatus(std::string_view node, std::string_view command, std::string_view error) {
  std::string message =
      "redis " + std::string(node) + ": " + std::string(command) + ": " + Printable(error);
  std::string_view code = error.substr(0, error.find(' '));
  if (code == "NOPERM" || code == "WRONGPASS" || code == "NOAUTH") return Status::PermissionDenied(message);
  if (code == "WRONGTYPE") return Status::FailedPrecondition(message);
  if (code == "OOM") return Status::ResourceExhausted(message);
  return Status::IOError(message);
}

Status AccessDenied(std::string_view what, std::string_view node, std::string_view user, std::string_view reason) {
  return Status::PermissionDenied("redis: " + std::string(what) + " for user " +
                                  Printable(user.empty() ? std::string_view("default") : user) + " at " +
                                  std::string(node) + ": " + Printable(reason));
}

std::string RedisNodeName(std::string_view host, uint16_t port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  std::string name;
  if (v6) name += '[';
  name += host;
  if (v6) name += ']';
  name += ':';
  name += std::to_string(port);
  return name;
}

Status UnexpectedReply(std::string_view node, std::string_view command, const RedisReply& reply) {
  std::string message = "redis " + std::string(node) + ": " + std::string(command) +
                        ": unexpected " + std::string(reply.type_name()) + " reply";
  if (reply.is_error()) return ErrorReplyStatus(node, command, reply.str);
  return Status::IOError(message);
}

}  // namespace kvstore
