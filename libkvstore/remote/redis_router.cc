// RedisRouter: opening (cluster or not) and the rounds of a call: requests
// grouped by node, sent, and their replies handed out or redirected.
#include "libkvstore/remote/redis_router.h"

namespace kvstore {

// One node's part of a round: its exchange and which requests it carries.
struct RedisRouter::NodeBatch {
  RedisNodeRef node;  // keeps the node alive while the round uses it
  std::unique_ptr<RedisConnection> connection;
  RedisExchange exchange;
  std::vector<size_t> requests;
  std::vector<bool> asking;  // per entry of `requests`: preceded by ASKING
};

namespace {

using Clock = std::chrono::steady_clock;

Status ValidateOptions(const RedisOptions& o) {
  using std::chrono::milliseconds;
  if (o.connect_timeout <= milliseconds(0) || o.command_timeout <= milliseconds(0)) {
    return Status::InvalidArgument("redis options: timeouts must be positive");
  }
  if (o.backoff_initial <= milliseconds(0) || o.backoff_max < o.backoff_initial) {
    return Status::InvalidArgument("redis options: need 0 < backoff_initial <= backoff_max");
  }
  if (o.max_redirects < 0 || o.max_reply_bytes == 0) {
    return Status::InvalidArgument("redis options: max_redirects >= 0 and max_reply_bytes > 0");
  }
  return Status::OK();
}

}  // namespace

RedisRouter::RedisRouter(std::unique_ptr<RedisNodeContext> context)
    : context_(std::move(context)), slots_(kRedisClusterSlots, nullptr) {}

Result<std::unique_ptr<RedisRouter>> RedisRouter::Open(const RedisOptions& options) {
  KV_RETURN_IF_ERROR(ValidateOptions(options));
  auto context = std::make_unique<RedisNodeContext>();
  context->options = options;
  KV_ASSIGN_OR_RETURN(context->url, ParseRedisUrl(options.url));
  std::unique_ptr<RedisRouter> router(new RedisRouter(std::move(context)));
  const RedisUrl& url = router->context_->url;
  router->seed_ = std::make_shared<RedisNode>(url.host, url.port, router->context_.get());
  router->nodes_[router->seed_->name()] = router->seed_;

  // Opening is no request: the first connection (connect and AUTH) and
  // each CLUSTER SLOTS get a deadline of their own.
  RedisDeadline connecting = router->NewDeadline();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> first, router->seed_->Acquire(connecting));
  RedisPipeline probe;
  probe.Add({"CLUSTER", "SLOTS"});
  RedisDeadline probing = router->NewDeadline();
  KV_ASSIGN_OR_RETURN(std::vector<RedisReply> replies,
                      RunOnNode(*router->seed_, std::move(probe), probing, *router->context_,
                                std::move(first)));
  const RedisReply& r = replies[0];
  if (r.is_error() && r.str.find("cluster support disabled") != std::string::npos) return router;
  const RedisUrl& u = router->context_->url;
  if (r.error_code() == "NOAUTH") {
    const std::string hint = u.password.empty() ? " (the URL gives no password: add USER:PASSWORD@ before the host)" : "";
    return AccessDenied("authentication failed", router->seed_->name(), u.user, r.str + hint);
  }
  if (r.error_code() == "NOPERM") {
    return AccessDenied("permission denied", router->seed_->name(), u.user,
                        "it may not run CLUSTER SLOTS, which recognises a cluster: grant +cluster|slots");
  }
  if (r.is_error()) return ErrorReplyStatus(router->seed_->name(), "CLUSTER SLOTS", r.str);
  router->cluster_ = true;
  RedisDeadline deadline = router->NewDeadline();
  KV_RETURN_IF_ERROR(router->LoadSlotMap(deadline));
  return router;
}

RedisDeadline RedisRouter::NewDeadline() const {
  const RedisOptions& o = context_->options;
  return RedisDeadline{Clock::now(), o.command_timeout, o.min_transfer_bytes_per_second};
}

Result<std::vector<RedisReply>> RedisRouter::RunOn(RedisNode& node, RedisPipeline pipeline) {
  RedisDeadline deadline = NewDeadline();
  return RunOnNode(node, std::move(pipeline), deadline, *context_);
}

std::string RedisRouter::Describe() const {
  if (!cluster_) return "redis " + seed_->name();
  return "redis cluster " + seed_->name() + " (" + std::to_string(Masters().size()) + " masters)";
}

// The pending requests of one round, grouped by node, each node's pipeline
// built and a connection acquired for it.
Status RedisRouter::PrepareRound(std::span<const RedisKeyRequest> requests,
                                 const std::vector<size_t>& pending, const AskTargets& ask,
                                 Round& round, RedisDeadline& deadline) {
  for (size_t i : pending) {
    RedisNodeRef node;
    auto it = ask.find(i);
    if (it != ask.end()) {
      node = it->second;
    } else {
      Result<RedisNodeRef> owner = NodeForKey(requests[i].key);
      if (!owner.ok()) {  // a slot without a master: the map may be stale
        MaybeReloadSlotMap(deadline);
        owner = NodeForKey(requests[i].key);
      }
      KV_ASSIGN_OR_RETURN(node, std::move(owner));
    }
    NodeBatch& b = round[node.get()];
    b.node = node;
    b.requests.push_back(i);
    b.asking.push_back(it != ask.end());
    if (it != ask.end()) b.exchange.pipeline.Add({"ASKING"});
    for (const auto& command : requests[i].commands) b.exchange.pipeline.Add(command);
  }
  // A node in its backoff window fails the call before anything is sent.
  for (auto& [node, b] : round) {
    Result<std::unique_ptr<RedisConnection>> c = node->Acquire(deadline);
    if (!c.ok()) {
      for (auto& [other, ob] : round) {
        if (ob.connection != nullptr) other->Release(std::move(ob.connection));
      }
      // A master that is down (or backing off) may have failed over.
      if (cluster_ && c.status().IsIOError()) MaybeReloadSlotMap(deadline);
      return c.status();
    }
    b.connection = std::move(*c);
    b.exchange.connection = b.connection.get();
  }
  return Status::OK();
}

// Runs a prepared round; connections go back to their pools, or their nodes
// are marked failed. The first failure, if any.
Status RedisRouter::RunRound(Round& round, RedisDeadline& deadline) {
  std::vector<RedisExchange*> exchanges;
  for (auto& [node, b] : round) exchanges.push_back(&b.exchange);
  RedisTraffic traffic;
  std::chrono::milliseconds left = deadline.Remaining(Clock::now());
  RunExchanges(exchanges, deadline, traffic);
  context_->counters.Add(traffic);
  Status failure;
  for (auto& [node, b] : round) {
    if (b.exchange.status.ok()) {
      node->Release(std::move(b.connection));
      continue;
    }
    if (b.exchange.timed_out) ++context_->counters.timeouts;
    if (NodeToBlame(b.exchange.timed_out, left, context_->options.command_timeout)) {
      node->MarkFailed(b.exchange.status);
    }
    if (failure.ok()) failure = b.exchange.status;
  }
  if (!failure.ok() && cluster_) MaybeReloadSlotMap(deadline);  // a failover may have moved slots
  return failure;
}

// Hands each request its replies; returns the requests redirected elsewhere.
Result<std::vector<size_t>> RedisRouter::TakeReplies(std::span<const RedisKeyRequest> requests,
                                                     Round& round, std::vector<RedisKeyReplies>& out,
                                                     AskTargets& ask, RedisDeadline& deadline) {
  std::vector<size_t> redirected;
  bool moved = false;
  for (auto& [node, b] : round) {
    auto next = b.exchange.replies.begin();
    for (size_t k = 0; k < b.requests.size(); ++k) {
      size_t i = b.requests[k];
      if (b.asking[k]) ++next;  // ASKING's +OK
      std::vector<RedisReply> replies(std::make_move_iterator(next),
                                      std::make_move_iterator(next + requests[i].commands.size()));
      next += static_cast<ptrdiff_t>(requests[i].commands.size());
      std::optional<RedisRedirect> redirect;
      for (const RedisReply& r : replies) {
        if (cluster_ && (redirect = ParseRedirect(r, node->host()))) break;
      }
      if (!redirect) {
        out[i] = RedisKeyReplies{std::move(replies), b.node};
        ask.erase(i);
        continue;
      }
      KV_ASSIGN_OR_RETURN(RedisNodeRef target, RedirectTarget(*redirect, deadline));
      if (redirect->ask) {
        ++context_->counters.asked;
        ask[i] = target;
      } else {
        ++context_->counters.moved;
        ask.erase(i);
        moved = true;
        std::unique_lock<std::shared_mutex> l(mu_);
        slots_[redirect->slot] = target;
      }
      redirected.push_back(i);
    }
  }
  if (moved) MaybeReloadSlotMap(deadline);
  return redirected;
}

Result<std::vector<RedisKeyReplies>> RedisRouter::Run(std::span<const RedisKeyRequest> requests) {
  std::vector<RedisKeyReplies> out(requests.size());
  std::vector<size_t> pending(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) pending[i] = i;
  AskTargets ask;
  RedisDeadline deadline = NewDeadline();  // one for the whole call, every round
  for (int round = 0; !pending.empty(); ++round) {
    if (round > context_->options.max_redirects) {
      return Status::IOError("redis cluster: key '" +
                             std::string(requests[pending[0]].key.substr(0, 100)) +
                             "' still redirected after " + std::to_string(round - 1) +
                             " redirections");
    }
    Round batches;
    KV_RETURN_IF_ERROR(PrepareRound(requests, pending, ask, batches, deadline));
    KV_RETURN_IF_ERROR(RunRound(batches, deadline));
    KV_ASSIGN_OR_RETURN(pending, TakeReplies(requests, batches, out, ask, deadline));
  }
  return out;
}

}  // namespace kvstore
