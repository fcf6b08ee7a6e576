// ParseRedisUrl must never crash; what it accepts must redact and parse back
// to the same host and port.
#include <cstdlib>
#include <string_view>

#include "kvstore/redis_backend.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kvstore::Result<kvstore::RedisUrl> url = kvstore::ParseRedisUrl(text);
  if (!url.ok()) return 0;
  if (url->port == 0 || url->host.empty()) std::abort();
  kvstore::Result<kvstore::RedisUrl> again = kvstore::ParseRedisUrl(kvstore::RedactedRedisUrl(*url));
  if (!again.ok() || again->host != url->host || again->port != url->port) std::abort();
  return 0;
}
