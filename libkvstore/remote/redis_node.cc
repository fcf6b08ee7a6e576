#include "libkvstore/remote/redis_node.h"

#include <algorithm>

namespace kvstore {

using Clock = std::chrono::steady_clock;

RedisNode::RedisNode(std::string host, uint16_t port, RedisNodeContext* context)
    : host_(std::move(host)),
      port_(port),
      name_(RedisNodeName(host_, port_)),
      context_(context) {}

bool NodeToBlame(bool timed_out, std::chrono::milliseconds left_at_start,
                 std::chrono::milliseconds own) {
  return !timed_out || left_at_start * 2 >= own;
}

Result<std::unique_ptr<RedisConnection>> RedisNode::Acquire(RedisDeadline& deadline) {
  bool probe = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (failures_ > 0) {
      // Backing off, or past the window: then one caller (the probe) tries
      // to connect and the others fail fast until it has succeeded.
      if (Clock::now() < retry_after_ || probing_) {
        ++context_->counters.fast_failures;
        return Unavailable();
      }
      probing_ = probe = true;
    }
    while (!probe && !idle_.empty()) {
      std::unique_ptr<RedisConnection> c = std::move(idle_.back());
      idle_.pop_back();
      if (c->IdleAndOpen()) return c;
    }
  }
  bool blame = true;
  Result<std::unique_ptr<RedisConnection>> c = Connect(deadline, blame);
  if (c.status().IsIOError() && blame) MarkFailed(c.status());
  std::lock_guard<std::mutex> l(mu_);
  if (probe) probing_ = false;
  if (c.ok()) failures_ = 0;
  return c;
}

Status RedisNode::Unavailable() const {
  std::string why = "redis " + name_ + ": unavailable ";
  if (Clock::now() < retry_after_) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(retry_after_ - Clock::now());
    why += "for " + std::to_string(left.count()) + " ms more";
  } else {
    why += "while another call reconnects";
  }
  return Status::IOError(why + " after: " + std::string(last_failure_.message()));
}

Result<std::unique_ptr<RedisConnection>> RedisNode::Connect(RedisDeadline& deadline, bool& blame) {
  const RedisOptions& o = context_->options;
  std::chrono::milliseconds left = deadline.Remaining(Clock::now());
  if (left.count() == 0) {
    blame = false;
    ++context_->counters.timeouts;
    return Status::IOError("redis " + name_ + ": timeout: no time left to connect");
  }
  bool timed_out = false;
  Result<std::unique_ptr<RedisConnection>> connected = RedisConnection::Connect(
      host_, port_, std::min(o.connect_timeout, left), o.max_reply_bytes, timed_out);
  if (!connected.ok()) {
    if (timed_out) ++context_->counters.timeouts;
    blame = NodeToBlame(timed_out, left, o.connect_timeout);
    return connected.status();
  }
  std::unique_ptr<RedisConnection> c = std::move(*connected);
  ++context_->counters.connects;
  const RedisUrl& url = context_->url;
  if (url.password.empty()) return c;

  RedisExchange auth;
  auth.connection = c.get();
  if (url.user.empty()) {
    auth.pipeline.Add({"AUTH", url.password});
  } else {
    auth.pipeline.Add({"AUTH", url.user, url.password});
  }
  RedisExchange* one[] = {&auth};
  RedisTraffic traffic;
  left = deadline.Remaining(Clock::now());
  RunExchanges(one, deadline, traffic);
  context_->counters.Add(traffic);
  if (auth.timed_out) ++context_->counters.timeouts;
  blame = NodeToBlame(auth.timed_out, left, o.command_timeout);
  KV_RETURN_IF_ERROR(auth.status);
  blame = true;
  const RedisReply& r = auth.replies[0];
  // The password never appears in a message, only the server's refusal.
  if (r.is_error()) return AccessDenied("authentication failed", name_, url.user, r.str);
  if (r.type != RedisReply::Type::kStatus) return UnexpectedReply(name_, "AUTH", r);
  return c;
}

void RedisNode::Release(std::unique_ptr<RedisConnection> connection) {
  if (!connection->IdleAndOpen()) return;  // closed, or bytes nobody asked for
  std::lock_guard<std::mutex> l(mu_);
  if (idle_.size() < context_->options.max_idle_connections_per_node) {
    idle_.push_back(std::move(connection));
  }
}

void RedisNode::MarkFailed(const Status& why) {
  std::vector<std::unique_ptr<RedisConnection>> dropped;
  std::lock_guard<std::mutex> l(mu_);
  dropped.swap(idle_);
  const RedisOptions& o = context_->options;
  failures_ = std::min(failures_ + 1, 30);
  auto backoff = o.backoff_initial * (int64_t{1} << std::min(failures_ - 1, 20));
  retry_after_ = Clock::now() + std::min<std::chrono::milliseconds>(backoff, o.backoff_max);
  last_failure_ = why;
}

bool RedisNode::BackingOff() const {
  std::lock_guard<std::mutex> l(mu_);
  return failures_ > 0 && Clock::now() < retry_after_;
}

Result<std::vector<RedisReply>> RunOnNode(RedisNode& node, RedisPipeline pipeline,
                                          RedisDeadline& deadline, RedisNodeContext& context,
                                          std::unique_ptr<RedisConnection> c) {
  if (c == nullptr) {
    KV_ASSIGN_OR_RETURN(c, node.Acquire(deadline));
  }
  RedisExchange e;
  e.connection = c.get();
  e.pipeline = std::move(pipeline);
  RedisExchange* one[] = {&e};
  RedisTraffic traffic;
  std::chrono::milliseconds left = deadline.Remaining(Clock::now());
  RunExchanges(one, deadline, traffic);
  context.counters.Add(traffic);
  if (!e.status.ok()) {
    if (e.timed_out) ++context.counters.timeouts;
    if (NodeToBlame(e.timed_out, left, context.options.command_timeout)) node.MarkFailed(e.status);
    return e.status;
  }
  node.Release(std::move(c));
  return std::move(e.replies);
}

}  // namespace kvstore
