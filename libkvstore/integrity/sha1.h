// SHA-1, only to name a value to a Redis script (redis.sha1hex is the one
// digest Redis's Lua offers), never as an integrity check of our own.
#ifndef KVSTORE_LIBKVSTORE_INTEGRITY_SHA1_H_
#define KVSTORE_LIBKVSTORE_INTEGRITY_SHA1_H_

#include <string>
#include <string_view>

namespace kvstore {

// 40 lower-case hex digits, as redis.sha1hex gives them.
std::string Sha1Hex(std::string_view data);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_INTEGRITY_SHA1_H_
