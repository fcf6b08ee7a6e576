// The HMAC seal of a prompt-cache file (docs/format.md §5.4): metadata key
// 1.kvstore_hmac_sha256 = hex HMAC-SHA256 under a shared secret of
//   "kvstore-hmac/1\n" context "\n" header-digest-hex "\n" tensor-digests-json
// where the two digests are the file's own entries, as stored, whichever
// algorithm computed them (the algorithm's name is covered by the header
// digest). Through them
// it covers every tensor byte and every header entry; `context` binds the
// file to where it is kept (the shared tier passes the key name).
#ifndef KVSTORE_LIBKVSTORE_FORMAT_SEAL_H_
#define KVSTORE_LIBKVSTORE_FORMAT_SEAL_H_

#include <string>
#include <string_view>

#include "kvstore/safetensors.h"
#include "kvstore/status.h"

namespace kvstore {

// 64 hex digits.
std::string SealDigests(std::string_view secret, std::string_view context, std::string_view header_digest_hex,
                        std::string_view tensor_digests_json);

// OK when the header carries both digests and a seal that matches them
// under (secret, context); Corruption saying which is missing or wrong.
// Checks the seal only: the digests themselves are verified by the reader.
Status CheckSeal(const SafetensorsHeader& header, std::string_view secret, std::string_view context);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_SEAL_H_
