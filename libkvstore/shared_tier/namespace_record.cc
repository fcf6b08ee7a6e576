#include "libkvstore/shared_tier/namespace_record.h"

#include "kvstore/json.h"
#include "libkvstore/fingerprint/fingerprint_internal.h"
#include "libkvstore/shared_tier/sealed_value.h"

namespace kvstore {
namespace {

constexpr std::string_view kRecordFormat = "kvstore-namespace/2";

}  // namespace

Result<std::string> EncodeNamespaceRecord(const ChunkSealing& sealing, std::string_view key,
                                          const ModelFingerprint& fingerprint, int64_t chunk_tokens) {
  const std::string json = "{\"chunk_tokens\":" + std::to_string(chunk_tokens) +
                           ",\"fingerprint\":" + fingerprint.json() + ",\"format\":\"" + std::string(kRecordFormat) +
                           "\"}";
  std::string value = json;
  if (!sealing.secret.empty()) KV_RETURN_IF_ERROR(SealInPlace(value, RecordValueKey(sealing), key, {}));
  return value;
}

Result<NamespaceRecord> DecodeNamespaceRecord(const ChunkSealing& sealing, std::string_view key,
                                              std::string_view value, bool* forged) {
  std::string plain;
  if (!sealing.secret.empty()) {
    plain = std::string(value);
    SealedTrailer trailer;
    Status opened = OpenInPlace(plain, RecordValueKey(sealing), key, {}, trailer);
    if (!opened.ok()) {
      if (forged != nullptr) *forged = true;
      return opened.WithPrefix("shared tier: " + std::string(key));
    }
    value = plain;
  }
  auto refuse = [&](std::string_view why) {
    return Status::Corruption("shared tier: " + std::string(key) + ": " + std::string(why));
  };
  Result<Json> j = Json::Parse(value);
  if (!j.ok() || !j->is_object()) return refuse("not a namespace record");
  const Json* format = j->Find("format");
  const Json* fp = j->Find("fingerprint");
  const Json* c = j->Find("chunk_tokens");
  if (format == nullptr || !format->is_string() || format->as_string() != kRecordFormat) {
    return refuse("not a kvstore-namespace/2 record");
  }
  const std::optional<int64_t> chunk_tokens = c != nullptr ? AsInt64(*c) : std::nullopt;
  if (fp == nullptr || !chunk_tokens || *chunk_tokens < 1) return refuse("malformed namespace record");
  Json::DumpOptions sorted;
  sorted.sort_keys = true;
  Result<ModelFingerprint> parsed = ModelFingerprint::FromJson(fp->Dump(sorted));
  if (!parsed.ok()) return parsed.status().WithPrefix("shared tier: " + std::string(key));
  return NamespaceRecord{std::move(parsed).value(), *chunk_tokens};
}

}  // namespace kvstore
