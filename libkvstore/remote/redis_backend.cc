// RedisKvBackend: KvBackend's calls as Redis commands over RedisRouter, and
// the checks that each reply has the shape its command promises.
#include <unordered_set>

#include "kvstore/redis_backend.h"
#include "libkvstore/integrity/sha1.h"
#include "libkvstore/remote/redis_router.h"

namespace kvstore {
namespace {

using Type = RedisReply::Type;

// A bound on one node's SCAN (10^9 keys at COUNT 1000) against a server
// that never ends its iteration.
constexpr size_t kMaxScanRounds = 1 << 20;

// KEYS[1] is unlinked only while its value has length ARGV[1] and SHA-1
// ARGV[2]: one round trip, and the value never travels (refused values can
// be large). STRLEN first, so a value of another length is not hashed.
// STRLEN answers WRONGTYPE for a key of another type (not the value, so
// kept); other errors (NOPERM) are the script's. STRLEN rather than TYPE:
// the documented ACL grants it already.
constexpr std::string_view kDeleteIfEqualsScript =
    "local n = redis.pcall('STRLEN', KEYS[1]) "
    "if type(n) == 'table' then if string.sub(n.err, 1, 9) == 'WRONGTYPE' then return 0 end return n end "
    "if n == tonumber(ARGV[1]) and redis.sha1hex(redis.call('GET', KEYS[1]) or '') == ARGV[2] then "
    "return redis.call('UNLINK', KEYS[1]) end return 0";

// KEYS[1] is unlinked only while it holds another type than a string: a
// good value written since a reader found a LIST there is a string, kept.
constexpr std::string_view kDeleteIfOtherTypeScript =
    "local n = redis.pcall('STRLEN', KEYS[1]) "
    "if type(n) == 'table' then if string.sub(n.err, 1, 9) == 'WRONGTYPE' then "
    "return redis.call('UNLINK', KEYS[1]) end return n end return 0";

// "GET 'key'" for messages; keys are caller bytes, so clipped and made printable.
std::string Label(std::string_view command, std::string_view key) {
  std::string out(command);
  out += " '";
  for (char c : key.substr(0, 100)) out.push_back(c >= ' ' && c < 0x7f ? c : '?');
  if (key.size() > 100) out += "...";
  return out + "'";
}

// The first error reply among `replies` (a MULTI block reports its queued
// commands' errors there, then EXECABORT), as a Status.
Status FirstError(const RedisKeyReplies& r, std::string_view label) {
  for (const RedisReply& reply : r.replies) {
    if (reply.is_error()) return ErrorReplyStatus(r.node->name(), label, reply.str);
  }
  return Status::OK();
}

// Escapes Redis glob characters so that SCAN MATCH takes `prefix` literally.
std::string GlobPrefix(std::string_view prefix) {
  std::string out;
  for (char c : prefix) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "*";
}

class RedisKvBackend final : public KvBackend {
 public:
  explicit RedisKvBackend(std::unique_ptr<RedisRouter> router) : router_(std::move(router)) {}

  using KvBackend::Get;
  Result<std::vector<std::optional<std::string>>> Get(std::span<const std::string> keys,
                                                      std::vector<bool>* other_type) override {
    return Count(DoGet(keys, other_type));
  }
  Result<std::optional<std::string>> GetRange(std::string_view key, int64_t start,
                                              int64_t length) override {
    return Count(DoGetRange(key, start, length));
  }
  Result<std::vector<bool>> Exists(std::span<const std::string> keys) override {
    return Count(DoIntegers("EXISTS", keys));
  }
  Result<std::vector<bool>> PutIfAbsent(std::span<const KvPut> items) override {
    return Count(DoPutIfAbsent(items));
  }
  Status Delete(std::span<const std::string> keys) override {
    return Count(DoIntegers("UNLINK", keys)).status();
  }
  Result<bool> DeleteIfEquals(std::string_view key, std::string_view expected) override {
    const std::string length = std::to_string(expected.size());
    const std::string digest = Sha1Hex(expected);
    return Count(DoEval(kDeleteIfEqualsScript, "delete if equal", key, {length, digest}));
  }
  Result<bool> DeleteIfOtherType(std::string_view key) override {
    return Count(DoEval(kDeleteIfOtherTypeScript, "delete if another type", key, {}));
  }
  Result<std::vector<std::string>> Scan(std::string_view prefix, size_t limit) override {
    return Count(DoScan(prefix, limit));
  }
  std::string Describe() const override { return router_->Describe(); }

  KvBackendStats Stats() const override {
    const RedisCounters& c = router_->counters();
    return KvBackendStats{.calls = c.calls, .failed_calls = c.failed_calls, .timeouts = c.timeouts,
                          .fast_failures = c.fast_failures, .connects = c.connects, .moved = c.moved,
                          .asked = c.asked, .slot_map_loads = c.slot_map_loads,
                          .bytes_sent = c.bytes_sent, .bytes_received = c.bytes_received};
  }

 private:
  template <typename T>
  T Count(T result) {
    ++router_->counters().calls;
    if (!result.ok()) ++router_->counters().failed_calls;
    return result;
  }

  // One single-key command per key: COMMAND key.
  Result<std::vector<RedisKeyReplies>> PerKey(std::string_view command,
                                              std::span<const std::string> keys) {
    std::vector<RedisKeyRequest> requests(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) requests[i] = {keys[i], {{command, keys[i]}}};
    return router_->Run(requests);
  }

  Result<std::vector<std::optional<std::string>>> DoGet(std::span<const std::string> keys,
                                                        std::vector<bool>* other_type) {
    KV_ASSIGN_OR_RETURN(std::vector<RedisKeyReplies> replies, PerKey("GET", keys));
    std::vector<std::optional<std::string>> out(keys.size());
    if (other_type != nullptr) other_type->assign(keys.size(), false);
    for (size_t i = 0; i < keys.size(); ++i) {
      RedisReply& r = replies[i].replies[0];
      if (r.type == Type::kString) {
        out[i] = std::move(r.str);
      } else if (other_type != nullptr && r.error_code() == "WRONGTYPE") {
        (*other_type)[i] = true;
      } else if (r.type != Type::kNil) {
        return UnexpectedReply(replies[i].node->name(), Label("GET", keys[i]), r);
      }
    }
    return out;
  }

  // EXISTS or UNLINK: an integer per key, true when it is 1.
  Result<std::vector<bool>> DoIntegers(std::string_view command, std::span<const std::string> keys) {
    KV_ASSIGN_OR_RETURN(std::vector<RedisKeyReplies> replies, PerKey(command, keys));
    std::vector<bool> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const RedisReply& r = replies[i].replies[0];
      if (r.type != Type::kInteger || r.integer < 0 || r.integer > 1) {
        return UnexpectedReply(replies[i].node->name(), Label(command, keys[i]), r);
      }
      out[i] = r.integer == 1;
    }
    return out;
  }

  Result<std::vector<bool>> DoPutIfAbsent(std::span<const KvPut> items) {
    std::vector<RedisKeyRequest> requests(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      requests[i] = {items[i].key, {{"SET", items[i].key, items[i].value, "NX"}}};
    }
    KV_ASSIGN_OR_RETURN(std::vector<RedisKeyReplies> replies, router_->Run(requests));
    std::vector<bool> out(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const RedisReply& r = replies[i].replies[0];
      if (r.type == Type::kStatus && r.str == "OK") {
        out[i] = true;
      } else if (r.type != Type::kNil) {
        return UnexpectedReply(replies[i].node->name(), Label("SET NX", items[i].key), r);
      }
    }
    return out;
  }

  // A one-key script answering 1 (deleted) or 0.
  Result<bool> DoEval(std::string_view script, std::string_view what, std::string_view key,
                      std::vector<std::string_view> args) {
    RedisKeyRequest request{key, {{"EVAL", script, "1", key}}};
    for (std::string_view arg : args) request.commands[0].push_back(arg);
    KV_ASSIGN_OR_RETURN(std::vector<RedisKeyReplies> replies, router_->Run({&request, 1}));
    const std::string label = Label("EVAL (" + std::string(what) + ")", key);
    KV_RETURN_IF_ERROR(FirstError(replies[0], label));
    const RedisReply& r = replies[0].replies[0];
    if (r.type != Type::kInteger || r.integer < 0 || r.integer > 1) {
      return UnexpectedReply(replies[0].node->name(), label, r);
    }
    return r.integer == 1;
  }

  // GETRANGE cannot tell an absent key from an empty range, so EXISTS runs
  // with it in one MULTI block: one round trip, one consistent answer.
  Result<std::optional<std::string>> DoGetRange(std::string_view key, int64_t start, int64_t length) {
    assert(start >= 0 && length >= 0);
    std::string first = std::to_string(start);
    std::string last = std::to_string(length > INT64_MAX - start ? INT64_MAX : start + length - 1);
    RedisKeyRequest request{key, {{"EXISTS", key}}};
    // GETRANGE k s s-1 would mean "to the end" for s = 0: an empty range needs only EXISTS.
    if (length > 0) request.commands = {{"MULTI"}, {"EXISTS", key}, {"GETRANGE", key, first, last}, {"EXEC"}};
    KV_ASSIGN_OR_RETURN(std::vector<RedisKeyReplies> replies, router_->Run({&request, 1}));
    RedisKeyReplies& r = replies[0];
    std::string label = Label("GETRANGE", key);
    KV_RETURN_IF_ERROR(FirstError(r, label));
    RedisReply& answer = r.replies.back();
    const RedisReply* exists = &answer;
    RedisReply* range = nullptr;
    if (length > 0) {
      // A key of another type: EXEC reports GETRANGE's WRONGTYPE in its array.
      if (answer.type == Type::kArray && answer.elements.size() == 2 && answer.elements[1].is_error()) {
        return ErrorReplyStatus(r.node->name(), label, answer.elements[1].str);
      }
      if (answer.type != Type::kArray || answer.elements.size() != 2 ||
          answer.elements[1].type != Type::kString) {
        return UnexpectedReply(r.node->name(), label, answer);
      }
      exists = &answer.elements[0];
      range = &answer.elements[1];
    }
    if (exists->type != Type::kInteger || exists->integer < 0 || exists->integer > 1) {
      return UnexpectedReply(r.node->name(), label, *exists);
    }
    if (exists->integer == 0) return std::optional<std::string>();
    if (range != nullptr && range->str.size() > static_cast<uint64_t>(length)) {
      return Status::IOError("redis " + r.node->name() + ": " + label + ": more bytes than asked for");
    }
    return std::optional<std::string>(range != nullptr ? std::move(range->str) : std::string());
  }

  Result<std::vector<std::string>> DoScan(std::string_view prefix, size_t limit) {
    const std::string pattern = GlobPrefix(prefix);
    std::vector<std::string> out;
    std::unordered_set<std::string> seen;  // a key being migrated may show up twice
    for (const RedisNodeRef& node : router_->Masters()) {
      std::string cursor = "0";
      for (size_t round = 0;; ++round) {
        if (out.size() >= limit) return out;
        if (round == kMaxScanRounds) {
          return Status::IOError("redis " + node->name() + ": SCAN did not finish in " +
                                 std::to_string(kMaxScanRounds) + " rounds");
        }
        RedisPipeline p;
        p.Add({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
        KV_ASSIGN_OR_RETURN(std::vector<RedisReply> replies, router_->RunOn(*node, std::move(p)));
        RedisReply& r = replies[0];
        if (r.type != Type::kArray || r.elements.size() != 2 || r.elements[0].type != Type::kString ||
            r.elements[1].type != Type::kArray) {
          return UnexpectedReply(node->name(), "SCAN", r);
        }
        for (RedisReply& key : r.elements[1].elements) {
          if (key.type != Type::kString) return UnexpectedReply(node->name(), "SCAN (a key)", key);
          if (!std::string_view(key.str).starts_with(prefix)) {
            return Status::IOError("redis " + node->name() + ": SCAN returned a key outside the prefix");
          }
          if (out.size() < limit && seen.insert(key.str).second) out.push_back(std::move(key.str));
        }
        if (r.elements[0].str == "0") break;
        if (r.elements[0].str == cursor) {
          return Status::IOError("redis " + node->name() + ": SCAN cursor did not advance");
        }
        cursor = std::move(r.elements[0].str);
      }
    }
    return out;
  }

  std::unique_ptr<RedisRouter> router_;
};

}  // namespace

Result<std::unique_ptr<KvBackend>> OpenRedisBackend(const RedisOptions& options) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisRouter> router, RedisRouter::Open(options));
  return std::unique_ptr<KvBackend>(std::make_unique<RedisKvBackend>(std::move(router)));
}

}  // namespace kvstore
