// The Redis implementation of KvBackend: a single node or a Redis Cluster,
// addressed by a URL of the form redis://[USER:PASSWORD@]HOST:PORT.
//
// What it does for the caller (see docs/design.md, "Shared tier (Redis)"):
//   * A pool of connections per node; each new connection authenticates
//     (AUTH user password, the ACL form) before it is used.
//   * Every call is bounded: a node that stops answering turns it into
//     IOError `command_timeout` after the last byte moved, and no call runs
//     longer than `command_timeout` plus its bytes at
//     `min_transfer_bytes_per_second`. Everything a call does counts against
//     that one deadline: new connections (connect, at most connect_timeout,
//     and AUTH), redirections, and slot map reloads in a cluster. The one
//     exception is name resolution: hiredis resolves a host name with
//     getaddrinfo, which no timeout bounds, and the connect timeout applies
//     to each address the name resolves to. Use IP addresses (in the URL,
//     and as the cluster's announced endpoints, Redis's default), or resolve
//     the name once yourself and pass the address. OpenRedisBackend has its
//     own deadlines: its first connection (connect and AUTH) and each of its
//     CLUSTER SLOTS commands (two in a cluster) get command_timeout each.
//   * A node that failed is not contacted again until its backoff window
//     (exponential, `backoff_initial` doubling up to `backoff_max`) has
//     passed: calls that need it fail fast with IOError meanwhile. After
//     the window one call reconnects while the others still fail fast.
//   * A cluster is recognised from any of its nodes (CLUSTER SLOTS). Keys
//     go to the master of their CRC16 hash slot ({hash tags} honoured);
//     MOVED updates the slot map and retries there, ASK retries once on the
//     importing node after ASKING. Redirections go only to nodes the slot
//     map lists (reloaded once for an unknown target), never to a host a
//     reply names. A batch is pipelined, one round trip per
//     node, all nodes at once; results keep the order of the arguments.
//
// Errors: IOError for anything transport-like (refused, reset, timeout,
// protocol violation, backoff, CLUSTERDOWN, too many redirections);
// PermissionDenied when Redis refuses the credentials or the ACL forbids
// a key or command (WRONGPASS, NOAUTH, NOPERM), which retrying cannot fix
// ("redis: authentication failed for user default at 10.0.0.5:6379: ...");
// FailedPrecondition for a key of the wrong type (WRONGTYPE);
// ResourceExhausted for OOM replies (maxmemory with a noeviction policy).
// No message holds the password, and none quotes the URL.
//
// Thread safety: the backend may be used from many threads at once.
#ifndef KVSTORE_REDIS_BACKEND_H_
#define KVSTORE_REDIS_BACKEND_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kvstore/kv_backend.h"
#include "kvstore/status.h"

namespace kvstore {

// The parts of redis://[USER:PASSWORD@]HOST:PORT. HOST is a name, an IPv4
// address or a bracketed IPv6 address ([::1]); USER and PASSWORD may be
// percent-encoded. An empty USER with a password (redis://:pw@host:port)
// authenticates as the default user.
struct RedisUrl {
  std::string host;
  uint16_t port = 0;
  std::string user;      // empty: AUTH with the password only
  std::string password;  // empty: no AUTH
};

// Parses `url`. Input is treated as hostile: InvalidArgument names the part
// that is wrong without quoting it ("redis url: the port is not a number in
// 1..65535": a malformed URL may hold its password anywhere). The scheme is
// case-insensitive; rediss:// (TLS) is NotSupported. A path, query or
// database number is refused rather than ignored.
Result<RedisUrl> ParseRedisUrl(std::string_view url);

// True when `text` starts with redis:// or rediss://, in any case: what a
// tool should treat as a Redis URL (and hand to ParseRedisUrl, which refuses
// TLS) rather than as a file name.
bool HasRedisScheme(std::string_view text);

// The URL again, with the password replaced by "***" (for logs). An IPv6
// host is in brackets.
std::string RedactedRedisUrl(const RedisUrl& url);

// `text` (a message, a log line) with the credentials of every URL in it
// replaced: "scheme://USER:PASSWORD@HOST" becomes "scheme://USER:***@HOST",
// and anything else before an '@' of a URL's authority becomes "***".
std::string RedactCredentials(std::string_view text);

struct RedisOptions {
  std::string url;  // redis://[USER:PASSWORD@]HOST:PORT; any node of a cluster
  std::chrono::milliseconds connect_timeout{100};
  // A call fails when no byte has moved for command_timeout (a stopped or
  // dead server), and in any case once it has run for command_timeout plus
  // its bytes so far at min_transfer_bytes_per_second (a server that
  // dribbles). So a 32 MiB value that keeps flowing is never cut off.
  std::chrono::milliseconds command_timeout{100};
  uint64_t min_transfer_bytes_per_second = 8ull << 20;
  size_t max_idle_connections_per_node = 8;
  std::chrono::milliseconds backoff_initial{50};
  std::chrono::milliseconds backoff_max{2000};
  // MOVED/ASK rounds one call may follow before it gives up.
  int max_redirects = 5;
  // A reply larger than this fails the call (and closes the connection)
  // instead of growing a buffer without bound. Memory follows the bytes
  // that arrive, never a length the server announces, so this bounds what a
  // server must actually send to make one call hold that much. 256 MiB
  // holds a 256-token fp16 chunk of a 405B-class model (about 126 MiB) with
  // room to spare; raise it for larger values (Redis allows 512 MiB).
  size_t max_reply_bytes = size_t{256} << 20;
};

// Connects to the node in `options.url`, authenticates, and recognises a
// cluster (then loads its slot map). Errors: InvalidArgument for a bad URL
// or option, NotSupported for rediss://, IOError when the node cannot be
// reached in time, PermissionDenied when AUTH is refused, the URL gives no
// password to a server that needs one (NOAUTH), or the ACL forbids
// CLUSTER SLOTS.
Result<std::unique_ptr<KvBackend>> OpenRedisBackend(const RedisOptions& options);

}  // namespace kvstore

#endif  // KVSTORE_REDIS_BACKEND_H_
