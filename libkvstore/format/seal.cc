#include "libkvstore/format/seal.h"

#include "libkvstore/integrity/sha256.h"
#include "libkvstore/format/digests.h"

namespace kvstore {

std::string SealDigests(std::string_view secret, std::string_view context, std::string_view header_digest_hex,
                        std::string_view tensor_digests_json) {
  return HmacSha256(secret, {"kvstore-hmac/1\n", context, "\n", header_digest_hex, "\n", tensor_digests_json})
      .ToHex();
}

Status CheckSeal(const SafetensorsHeader& header, std::string_view secret, std::string_view context) {
  DigestKeys keys;
  KV_RETURN_IF_ERROR(DeclaredDigestAlgorithm(header.metadata, &keys).status());
  auto seal = header.FindMetadata(keys.hmac);
  auto header_hex = header.FindMetadata(keys.header);
  auto tensors_json = header.FindMetadata(keys.tensors);
  if (!seal) return Status::Corruption("integrity: no HMAC seal (1.kvstore_hmac_sha256)");
  if (!header_hex || !tensors_json) return Status::Corruption("integrity: sealed without digests");
  std::optional<Sha256Digest> got = Sha256Digest::FromHex(*seal);
  std::optional<Sha256Digest> want = Sha256Digest::FromHex(SealDigests(secret, context, *header_hex, *tensors_json));
  if (!got || !want || !ConstantTimeEqual(*got, *want)) {
    return Status::Corruption("integrity: the HMAC seal does not match (another secret, edited content, or copied "
                              "from elsewhere)");
  }
  return Status::OK();
}

}  // namespace kvstore
