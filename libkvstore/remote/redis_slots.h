// Redis Cluster key slots: CRC16 hash slots with {hash tags}, the parsing of
// CLUSTER SLOTS replies (hostile input: every field checked) and of MOVED /
// ASK redirections. Pure functions, no I/O.
#ifndef KVSTORE_LIBKVSTORE_REMOTE_REDIS_SLOTS_H_
#define KVSTORE_LIBKVSTORE_REMOTE_REDIS_SLOTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/status.h"
#include "libkvstore/remote/redis_reply.h"

namespace kvstore {

constexpr int kRedisClusterSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster
// uses it. Crc16("123456789") == 0x31C3.
uint16_t Crc16(std::string_view bytes);

// The hash slot of `key`: CRC16 mod 16384 of the key, or of the part between
// the first '{' and the next '}' when that part is not empty.
int KeyHashSlot(std::string_view key);

struct RedisSlotRange {
  int first = 0;  // inclusive
  int last = 0;   // inclusive
  std::string host;
  uint16_t port = 0;
};

// The master of each slot range in a CLUSTER SLOTS reply. An empty host
// means "the node you asked" and becomes `asked_host`. A range whose master
// endpoint is unknown ("?") is left out. Corruption names the bad field:
// "CLUSTER SLOTS[3]: slot range 9000..8000 is reversed".
Result<std::vector<RedisSlotRange>> ParseClusterSlots(const RedisReply& reply,
                                                      std::string_view asked_host);

// A redirection error reply: "MOVED 3999 127.0.0.1:6381" or "ASK 3999 ...".
struct RedisRedirect {
  bool ask = false;  // false: MOVED
  int slot = 0;
  std::string host;
  uint16_t port = 0;
};

// The redirection in `reply`, or nullopt when it is none (or malformed).
// An empty host ("MOVED 1 :6380") becomes `asked_host`.
std::optional<RedisRedirect> ParseRedirect(const RedisReply& reply, std::string_view asked_host);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_REMOTE_REDIS_SLOTS_H_
