// Server bytes through the reply parser (hiredis's reader with our reply
// objects and the large-bulk path), then through everything that interprets
// a reply: CLUSTER SLOTS, MOVED/ASK and error mapping. Never a crash; every
// accepted slot range is within 0..16383.
#include <cstdlib>
#include <string_view>

#include "libkvstore/remote/redis_connection.h"
#include "libkvstore/remote/redis_slots.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto replies = kvstore::ParseRedisReplies(bytes, 1 << 20);
  if (!replies.ok()) return 0;
  for (const kvstore::RedisReply& r : *replies) {
    auto ranges = kvstore::ParseClusterSlots(r, "seed");
    if (ranges.ok()) {
      for (const auto& range : *ranges) {
        if (range.first < 0 || range.last >= kvstore::kRedisClusterSlots || range.first > range.last) {
          std::abort();
        }
      }
    }
    auto redirect = kvstore::ParseRedirect(r, "seed");
    if (redirect && (redirect->slot < 0 || redirect->slot >= kvstore::kRedisClusterSlots)) std::abort();
    if (r.is_error()) (void)kvstore::ErrorReplyStatus("seed:1", "GET", r.str);
  }
  return 0;
}
