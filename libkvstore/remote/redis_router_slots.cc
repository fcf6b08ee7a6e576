// RedisRouter's slot map: loading it from CLUSTER SLOTS, the node list it
// defines, and the lookups of keys and redirection targets in it.
#include <set>

#include "libkvstore/remote/redis_router.h"

namespace kvstore {

using Clock = std::chrono::steady_clock;

RedisNodeRef RedisRouter::KnownNode(const std::string& host, uint16_t port) const {
  std::shared_lock<std::shared_mutex> l(mu_);
  auto it = nodes_.find(RedisNodeName(host, port));
  return it == nodes_.end() ? nullptr : it->second;
}

Status RedisRouter::LoadSlotMap(RedisDeadline& deadline) {
  std::vector<RedisNodeRef> candidates = Masters();
  candidates.push_back(seed_);
  Status last = Status::IOError("redis: no node to load the cluster slot map from");
  std::set<RedisNode*> tried;
  for (const RedisNodeRef& node : candidates) {
    if (!tried.insert(node.get()).second || node->BackingOff()) continue;
    if (deadline.Remaining(Clock::now()).count() == 0) break;
    RedisPipeline p;
    p.Add({"CLUSTER", "SLOTS"});
    Result<std::vector<RedisReply>> replies = RunOnNode(*node, std::move(p), deadline, *context_);
    if (!replies.ok()) {
      last = replies.status();
      continue;
    }
    const RedisReply& reply = (*replies)[0];
    if (reply.is_error()) {
      last = ErrorReplyStatus(node->name(), "CLUSTER SLOTS", reply.str);
      continue;
    }
    Result<std::vector<RedisSlotRange>> ranges = ParseClusterSlots(reply, node->host());
    if (!ranges.ok()) {
      last = ranges.status().WithPrefix("redis " + node->name());
      continue;
    }
    if (ranges->empty()) {
      last = Status::IOError("redis " + node->name() + ": the cluster serves no slots");
      continue;
    }
    return InstallSlotMap(*ranges, node->name());
  }
  return last;
}

Status RedisRouter::InstallSlotMap(const std::vector<RedisSlotRange>& ranges, const std::string& from) {
  std::map<std::string, RedisNodeRef> nodes = {{seed_->name(), seed_}};
  std::vector<RedisNodeRef> slots(kRedisClusterSlots);
  std::unique_lock<std::shared_mutex> l(mu_);
  for (const RedisSlotRange& range : ranges) {
    std::string name = RedisNodeName(range.host, range.port);
    RedisNodeRef& master = nodes[name];
    if (master == nullptr) {
      auto it = nodes_.find(name);  // the same node keeps its pool
      master = it != nodes_.end() ? it->second
                                  : std::make_shared<RedisNode>(range.host, range.port, context_.get());
    }
    if (nodes.size() > kMaxClusterNodes + 1) {
      return Status::Corruption("redis " + from + ": CLUSTER SLOTS names more than " +
                                std::to_string(kMaxClusterNodes) + " masters");
    }
    for (int s = range.first; s <= range.last; ++s) slots[s] = master;
  }
  nodes_.swap(nodes);
  slots_.swap(slots);
  ++context_->counters.slot_map_loads;
  return Status::OK();
}

void RedisRouter::MaybeReloadSlotMap(RedisDeadline& deadline) {
  std::unique_lock<std::mutex> l(reload_mu_, std::try_to_lock);
  if (!l.owns_lock()) return;  // another thread is reloading
  if (Clock::now() - last_reload_ < context_->options.backoff_initial) return;
  if (deadline.Remaining(Clock::now()).count() == 0) return;  // the next call reloads
  last_reload_ = Clock::now();
  (void)LoadSlotMap(deadline);  // on failure the old map stays; the next MOVED tries again
}

Result<RedisNodeRef> RedisRouter::NodeForKey(std::string_view key) const {
  if (!cluster_) return seed_;
  int slot = KeyHashSlot(key);
  std::shared_lock<std::shared_mutex> l(mu_);
  if (slots_[slot] == nullptr) {
    return Status::IOError("redis cluster: no master serves slot " + std::to_string(slot));
  }
  return slots_[slot];
}

std::vector<RedisNodeRef> RedisRouter::Masters() const {
  if (!cluster_) return {seed_};
  std::shared_lock<std::shared_mutex> l(mu_);
  std::vector<RedisNodeRef> out;
  std::set<RedisNode*> seen;
  for (const RedisNodeRef& n : slots_) {
    if (n != nullptr && seen.insert(n.get()).second) out.push_back(n);
  }
  return out;
}

Result<RedisNodeRef> RedisRouter::RedirectTarget(const RedisRedirect& redirect,
                                                 RedisDeadline& deadline) {
  RedisNodeRef target = KnownNode(redirect.host, redirect.port);
  if (target == nullptr) {
    MaybeReloadSlotMap(deadline);
    target = KnownNode(redirect.host, redirect.port);
  }
  if (target == nullptr) {
    return Status::IOError("redis cluster: " + std::string(redirect.ask ? "ASK" : "MOVED") +
                           " to " + RedisNodeName(redirect.host, redirect.port) +
                           ", a node that CLUSTER SLOTS does not list");
  }
  return target;
}

}  // namespace kvstore
