// RedisRouter: sends keyed requests to the node that serves each key.
//
// A single node serves every key. In a cluster, the slot map (slot -> master)
// comes from CLUSTER SLOTS of any reachable node; a MOVED reply updates the
// slot at once and reloads the map (at most once per backoff_initial); an ASK
// reply sends that one request again to the importing node, after ASKING.
// Redirections are followed only to nodes the last CLUSTER SLOTS listed (after
// one reload when the target is unknown): a reply cannot send our credentials
// to a host of its choosing. The router knows the seed and the current
// masters only (at most kMaxClusterNodes); nodes that left the map are freed
// once no call uses them.
// A round groups requests by node and runs all nodes' pipelines at once.
//
// Thread safety: all members may be called from many threads at once; the
// slot map is read under a shared lock.
#ifndef KVSTORE_LIBKVSTORE_REMOTE_REDIS_ROUTER_H_
#define KVSTORE_LIBKVSTORE_REMOTE_REDIS_ROUTER_H_

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvstore/redis_backend.h"
#include "libkvstore/remote/redis_node.h"
#include "libkvstore/remote/redis_slots.h"

namespace kvstore {

// The commands of one key, sent together (in one pipeline) to its node.
struct RedisKeyRequest {
  std::string_view key;
  std::vector<std::vector<std::string_view>> commands;
};

using RedisNodeRef = std::shared_ptr<RedisNode>;

// The replies to a request's commands, in order, and the node that gave them.
struct RedisKeyReplies {
  std::vector<RedisReply> replies;
  std::shared_ptr<const RedisNode> node;
};

class RedisRouter {
 public:
  // Masters one slot map may name; Redis Cluster's own ceiling is about 1000.
  static constexpr size_t kMaxClusterNodes = 1000;

  // Connects to the URL's node, authenticates, and loads the slot map when
  // the node is part of a cluster.
  static Result<std::unique_ptr<RedisRouter>> Open(const RedisOptions& options);

  // Runs every request on its key's node and returns their replies in the
  // order of `requests`. MOVED and ASK are followed (up to max_redirects
  // rounds); every other error reply is left for the caller to interpret.
  // A node that cannot be reached or times out fails the call (IOError).
  Result<std::vector<RedisKeyReplies>> Run(std::span<const RedisKeyRequest> requests);

  // Runs `pipeline` on one node (for SCAN, which is per node).
  Result<std::vector<RedisReply>> RunOn(RedisNode& node, RedisPipeline pipeline);

  // Every master (the one node when not a cluster).
  std::vector<RedisNodeRef> Masters() const;

  bool cluster() const { return cluster_; }
  RedisCounters& counters() { return context_->counters; }
  const RedisCounters& counters() const { return context_->counters; }
  std::string Describe() const;

  // The deadline of a call starting now.
  RedisDeadline NewDeadline() const;

 private:
  explicit RedisRouter(std::unique_ptr<RedisNodeContext> context);

  // Reloads the slot map from the first master (or the seed) that answers,
  // within `deadline` (the calling request's: a reload never extends it);
  // the node list becomes the seed and the map's masters.
  Status LoadSlotMap(RedisDeadline& deadline);
  // Installs `ranges` as the slot map. Corruption past kMaxClusterNodes.
  Status InstallSlotMap(const std::vector<RedisSlotRange>& ranges, const std::string& from);
  // LoadSlotMap, unless another thread is at it, it ran very recently or
  // the call has no time left.
  void MaybeReloadSlotMap(RedisDeadline& deadline);
  Result<RedisNodeRef> NodeForKey(std::string_view key) const;
  // The known node `host:port`, or nullptr.
  RedisNodeRef KnownNode(const std::string& host, uint16_t port) const;
  // The node a redirection names, reloading the slot map once when it is
  // unknown; IOError when the map still does not list it.
  Result<RedisNodeRef> RedirectTarget(const RedisRedirect& redirect, RedisDeadline& deadline);

  // The rounds of Run: requests grouped by node, sent, and their replies
  // handed out (or the requests sent on after MOVED / ASK).
  struct NodeBatch;
  using Round = std::map<RedisNode*, NodeBatch>;
  using AskTargets = std::unordered_map<size_t, RedisNodeRef>;  // request -> importing node
  Status PrepareRound(std::span<const RedisKeyRequest> requests, const std::vector<size_t>& pending,
                      const AskTargets& ask, Round& round, RedisDeadline& deadline);
  Status RunRound(Round& round, RedisDeadline& deadline);
  Result<std::vector<size_t>> TakeReplies(std::span<const RedisKeyRequest> requests, Round& round,
                                          std::vector<RedisKeyReplies>& out, AskTargets& ask,
                                          RedisDeadline& deadline);

  std::unique_ptr<RedisNodeContext> context_;
  RedisNodeRef seed_;
  bool cluster_ = false;

  mutable std::shared_mutex mu_;
  std::map<std::string, RedisNodeRef> nodes_;  // "host:port" -> the seed and the masters
  std::vector<RedisNodeRef> slots_;            // slot -> master, or nullptr

  std::mutex reload_mu_;
  std::chrono::steady_clock::time_point last_reload_{};
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_REMOTE_REDIS_ROUTER_H_
