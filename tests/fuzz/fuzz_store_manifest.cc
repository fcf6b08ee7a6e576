// A PromptCacheStore's MANIFEST, token lists and a delta entry's base come
// from disk (and from the other processes sharing the directory):
// ParseManifestChanges, ReadManifest, ParseTokens and StoreBaseFromMetadata
// must never crash, and what they accept must write back (ManifestAddLine,
// TokensText, StoreBaseText) to text that reads back the same.
#include <cstddef>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "libkvstore/io/temp_file_name.h"
#include "libkvstore/tiers/store_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (std::optional<std::vector<int32_t>> tokens = kvstore::ParseTokens(text)) {
    if (kvstore::ParseTokens(kvstore::TokensText(*tokens)) != tokens) std::abort();
  }
  const kvstore::Metadata metadata = {{std::string(kvstore::kStoreBaseKey), std::string(text)}};
  if (auto base = kvstore::StoreBaseFromMetadata(metadata); base.ok() && base->has_value()) {
    const kvstore::Metadata again = {{std::string(kvstore::kStoreBaseKey), kvstore::StoreBaseText(**base)}};
    auto back = kvstore::StoreBaseFromMetadata(again);
    if (!back.ok() || !back->has_value() || (*back)->file != (*base)->file || (*back)->tokens != (*base)->tokens) {
      std::abort();
    }
  }
  // A follower reads whole lines only: what it consumed ends a line, and
  // reading the rest later gives the same changes as reading it all now.
  size_t used = 0;
  const auto changes = kvstore::ParseManifestChanges(std::as_bytes(std::span(data, size)), &used);
  if (used > size || (used > 0 && data[used - 1] != '\n') || text.find('\n', used) != std::string_view::npos) {
    std::abort();
  }
  const size_t half = text.find('\n', size / 2);
  if (half != std::string_view::npos) {
    size_t first = 0, second = 0;
    auto a = kvstore::ParseManifestChanges(std::as_bytes(std::span(data, half + 1)), &first);
    const auto b = kvstore::ParseManifestChanges(std::as_bytes(std::span(data + first, size - first)), &second);
    if (first != half + 1 || first + second != used || a.size() + b.size() != changes.size()) std::abort();
  }
  // A directory's file names are read as temp files of some pid.
  std::string_view rest;
  const int64_t pid = kvstore::TempFileWriterPid(text, &rest);
  if (pid >= 0 && (rest.empty() || text.find(kvstore::kTempMarker) == std::string_view::npos)) std::abort();
  const auto entries = kvstore::ReadManifest(std::as_bytes(std::span(data, size)));
  for (const auto& [file, entry] : entries) {
    const std::string line =
        kvstore::ManifestAddLine(file, entry.bytes, entry.key.model, entry.key.tokens, entry.fingerprint, entry.base);
    const auto again = kvstore::ReadManifest(std::as_bytes(std::span(line.data(), line.size())));
    auto it = again.find(file);
    if (again.size() != 1 || it == again.end() || it->second.key.model != entry.key.model ||
        it->second.key.tokens != entry.key.tokens || it->second.bytes != entry.bytes ||
        it->second.fingerprint != entry.fingerprint || it->second.base != entry.base) {
      std::abort();
    }
  }
  return 0;
}
