#include "libkvstore/tiers/store_format.h"

#include <charconv>

#include "libkvstore/integrity/sha256.h"
#include "libkvstore/util/hex.h"
#include "libkvstore/util/parse_int.h"

namespace kvstore {

namespace {
constexpr std::string_view kModelKey = "kvstore_model";
constexpr std::string_view kTokensKey = "kvstore_tokens";

}  // namespace

namespace {

// Fields of a manifest field that may be empty are written as "-".
std::string_view Dash(std::string_view field) { return field == "-" ? std::string_view() : field; }

std::vector<std::string_view> SplitSpaces(std::string_view line) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t sp = line.find(' ');
    parts.push_back(line.substr(0, sp));
    if (sp == std::string_view::npos) return parts;
    line.remove_prefix(sp + 1);
  }
}
}  // namespace

std::string StoreFileName(std::string_view model, std::span<const int32_t> tokens) {
  const std::string key = std::string(model) + '\n' + TokensText(tokens);
  return Sha256(std::string_view(key)).ToHex().substr(0, 16) + std::string(kStoreFileSuffix);
}

std::vector<std::string> StoreFileNamesOfPrefixes(std::string_view model, std::span<const int32_t> tokens) {
  // The hashed text of each prefix extends the previous one: "<model>\n1", "<model>\n1,2", ...
  Sha256Hasher h;
  h.Update(model);
  h.Update(std::string_view("\n"));
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) h.Update(std::string_view(","));
    h.Update(std::string_view(std::to_string(tokens[i])));
    out.push_back(h.Peek().ToHex().substr(0, 16) + std::string(kStoreFileSuffix));
  }
  return out;
}

bool IsStoreEntryFileName(std::string_view name) {
  constexpr size_t kHexDigits = 16;
  return name.size() == kHexDigits + kStoreFileSuffix.size() && name.ends_with(kStoreFileSuffix) &&
         name.substr(0, kHexDigits).find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string StoreBaseText(const StoreBase& base) {
  return base.file + " " + std::to_string(base.tokens);
}

Result<std::optional<StoreBase>> StoreBaseFromMetadata(const Metadata& metadata) {
  for (const auto& [k, v] : metadata) {
    if (k != kStoreBaseKey) continue;
    const std::vector<std::string_view> parts = SplitSpaces(v);
    Result<int64_t> n = parts.size() == 2 ? ParseInt64(parts[1]) : Status::Corruption("");
    if (parts.size() != 2 || !IsStoreEntryFileName(parts[0]) || !n.ok() || *n < 1) {
      return Status::Corruption("malformed " + std::string(kStoreBaseKey) + " \"" + v.substr(0, 120) + "\"");
    }
    return std::optional<StoreBase>(StoreBase{std::string(parts[0]), *n});
  }
  return std::optional<StoreBase>();
}

bool IsStoreTempFileName(std::string_view name) {
  constexpr std::string_view kTemp = ".kvtmp-";
  const size_t at = name.find(kTemp);
  if (at == std::string_view::npos || at + kTemp.size() == name.size()) return false;
  const std::string_view base = name.substr(0, at);
  if (base == "kvstore-models.json" || base == "MANIFEST") return true;
  return IsStoreEntryFileName(base);
}

std::optional<std::string_view> FindUserKey(const Metadata& metadata, std::string_view key) {
  for (const auto& [k, v] : metadata) {
    if (k == key) return v;
  }
  return std::nullopt;
}

Metadata StoreKeyMetadata(std::string_view model, std::span<const int32_t> tokens) {
  return {{std::string(kModelKey), std::string(model)}, {std::string(kTokensKey), TokensText(tokens)}};
}

std::optional<StoreKey> StoreKeyFromMetadata(const Metadata& metadata) {
  std::optional<std::string> model;
  std::optional<std::vector<int32_t>> tokens;
  for (const auto& [k, v] : metadata) {
    if (k == kModelKey) model = v;
    if (k == kTokensKey) tokens = ParseTokens(v);
  }
  if (!model || !tokens) return std::nullopt;
  return StoreKey{std::move(*model), std::move(*tokens)};
}

std::string ManifestAddLine(std::string_view file, int64_t bytes, std::string_view model,
                            std::span<const int32_t> tokens, std::string_view fingerprint,
                            std::string_view base) {
  const std::string model_hex = model.empty() ? "-" : HexEncode(model);
  const std::string tokens_text = tokens.empty() ? "-" : TokensText(tokens);
  const std::string fp = fingerprint.empty() ? "-" : std::string(fingerprint);
  const std::string base_field = base.empty() ? "" : " " + std::string(base);
  return "+ " + std::string(file) + " " + std::to_string(bytes) + " " + model_hex + " " + tokens_text + " " + fp +
         base_field + "\n";
}

std::string ManifestRemoveLine(std::string_view file) { return "- " + std::string(file) + "\n"; }

std::vector<ManifestChange> ParseManifestChanges(std::span<const std::byte> data, size_t* used) {
  std::vector<ManifestChange> out;
  const std::string_view all(reinterpret_cast<const char*>(data.data()), data.size());
  std::string_view text = all;
  while (true) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) break;  // the end, or a torn last line
    const std::vector<std::string_view> parts = SplitSpaces(text.substr(0, nl));
    text.remove_prefix(nl + 1);
    if (parts.size() == 2 && parts[0] == "-") {
      out.push_back({std::string(parts[1]), std::nullopt});
    } else if (parts.size() >= 5 && parts.size() <= 7 && parts[0] == "+") {
      int64_t bytes = 0;
      auto [p, ec] = std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), bytes);
      std::optional<std::string> model = HexDecode(Dash(parts[3]));
      std::optional<std::vector<int32_t>> tokens = ParseTokens(Dash(parts[4]));
      if (ec != std::errc() || p != parts[2].data() + parts[2].size() || bytes < 0 || !model || !tokens) continue;
      const std::string fingerprint(parts.size() >= 6 ? Dash(parts[5]) : std::string_view());
      const std::string base(parts.size() == 7 ? parts[6] : std::string_view());
      if (!base.empty() && !IsStoreEntryFileName(base)) continue;
      out.push_back({std::string(parts[1]),
                     ManifestEntry{StoreKey{std::move(*model), std::move(*tokens)}, bytes, fingerprint, base}});
    }
  }
  if (used != nullptr) *used = all.size() - text.size();
  return out;
}

std::unordered_map<std::string, ManifestEntry> ReadManifest(std::span<const std::byte> data, size_t* used) {
  std::unordered_map<std::string, ManifestEntry> out;
  for (ManifestChange& change : ParseManifestChanges(data, used)) {
    if (change.entry) {
      out[change.file] = std::move(*change.entry);
    } else {
      out.erase(change.file);
    }
  }
  return out;
}

}  // namespace kvstore
