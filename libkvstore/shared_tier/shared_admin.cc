// Tools' view of a shared tier: namespaces, chains and single chunks.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "kvstore/json.h"
#include "kvstore/prompt_cache_bytes.h"
#include "kvstore/shared_tier_admin.h"
#include "kvstore/user_path.h"
#include "libkvstore/shared_tier/chunk_codec.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "libkvstore/shared_tier/namespace_record.h"
#include "libkvstore/shared_tier/sealed_value.h"
#include "libkvstore/fingerprint/fingerprint_internal.h"

namespace kvstore {
namespace {

constexpr std::string_view kZstdMagic = "\x28\xb5\x2f\xfd";

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

// The data-section size a header declares: the largest data_offsets end.
Result<uint64_t> DeclaredDataSize(std::string_view header_json) {
  Result<Json> j = Json::Parse(header_json);
  if (!j.ok() || !j->is_object()) return Status::Corruption("shared tier: the value's header is not a JSON object");
  uint64_t end = 0;
  for (const auto& [name, t] : j->as_object()) {
    const Json* offsets = t.is_object() ? t.Find("data_offsets") : nullptr;
    if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2) continue;
    const std::optional<int64_t> e = AsInt64(offsets->as_array()[1]);
    if (e && *e > 0) end = std::max(end, static_cast<uint64_t>(*e));
  }
  return end;
}

Result<SafetensorsHeader> HeaderOnly(KvBackend& backend, std::string_view key, const std::string& first8) {
  const uint64_t huge = std::numeric_limits<uint64_t>::max() / 2;
  KV_ASSIGN_OR_RETURN(uint64_t n, ParseSafetensorsHeaderSize(Bytes(first8), huge));
  KV_ASSIGN_OR_RETURN(std::optional<std::string> prefix, backend.GetRange(key, 0, static_cast<int64_t>(8 + n)));
  if (!prefix) return Status::NotFound("shared tier: " + std::string(key) + " vanished");
  if (prefix->size() != 8 + n) return Status::Corruption("shared tier: " + std::string(key) + ": truncated header");
  KV_ASSIGN_OR_RETURN(uint64_t data, DeclaredDataSize(std::string_view(*prefix).substr(8)));
  if (data > huge) return Status::Corruption("shared tier: declared data size out of range");
  return ParseSafetensorsHeader(Bytes(*prefix), 8 + n + data);
}

Status FillFromHeader(const SafetensorsHeader& header, SharedChunkInfo& out) {
  Metadata user;
  for (const auto& [k, v] : header.metadata) {
    if (k.starts_with("1.")) user.emplace_back(k.substr(2), v);
  }
  KV_ASSIGN_OR_RETURN(ChunkHeader h, ChunkHeaderFromMetadata(user));
  out.snapshot = h.kind == ChunkKind::kSnapshot;
  out.index = h.index;
  out.chunk_tokens = h.chunk_tokens;
  out.ns_digest = h.ns_digest;
  out.chain = h.chain;
  out.parent = h.parent;
  out.writer = h.writer;
  out.layers = h.layers;
  for (size_t j = 0; j < h.layers.size(); ++j) {
    std::optional<std::string_view> cls = header.FindMetadata("2." + std::to_string(j));
    out.classes.emplace_back(cls ? *cls : "?");
  }
  out.tensors = header.tensors;
  return Status::OK();
}

// A header field for a message: the value is hostile, so at most a hash's length.
std::string Clipped(std::string_view field) {
  return field.size() <= 64 ? std::string(field) : std::string(field.substr(0, 64)) + "...";
}

// The value against the key it is stored under. The key names the chunk's
// kind, namespace and chain hash H_i, and H_i follows from the header's
// namespace, parent and tokens; without a seal this is what gives away a
// valid value copied under another key.
Status CheckChunkAgainstKey(const ChunkHeader& h, std::string_view key, std::string_view secret) {
  const std::optional<ChunkKeyParts> parts = ParseChunkKey(key);
  if (!parts) {
    return Status::Corruption("holds the chunk of chain hash " + Clipped(h.chain) +
                              ", but is not a chunk key (<prefix>v2/<namespace>/c/<chain hash>)");
  }
  if (h.chain != parts->hash) {
    return Status::Corruption("the value's chain hash " + Clipped(h.chain) + " is not the key's " + parts->hash +
                              " (a value copied under another key)");
  }
  if (h.kind != parts->kind) {
    return Status::Corruption(h.kind == ChunkKind::kRows ? "a rows value under a snapshot key"
                                                         : "a snapshot value under a rows key");
  }
  const std::optional<Sha256Digest> ns_digest = Sha256Digest::FromHex(h.ns_digest);
  const std::optional<Sha256Digest> parent = Sha256Digest::FromHex(h.parent);
  if (!ns_digest || (h.index > 0) != parent.has_value()) {
    return Status::Corruption("malformed namespace digest or parent for chain position " + std::to_string(h.index));
  }
  if (static_cast<int64_t>(h.tokens.size()) != h.chunk_tokens) {
    return Status::Corruption("holds " + std::to_string(h.tokens.size()) + " tokens in a chunk of " +
                              std::to_string(h.chunk_tokens));
  }
  const ChunkNamespace ns = DeriveChunkNamespace(*ns_digest, h.chunk_tokens, {secret, ChunkKeyPrefixOf(key)});
  if (ns.id != parts->ns_id) {
    return Status::Corruption("the value's namespace " + Clipped(h.ns_digest) + " is not the key's " + parts->ns_id);
  }
  const std::string follows = NextChainHash(ns, parent ? &*parent : nullptr, h.tokens).ToHex();
  if (follows != h.chain) {
    return Status::Corruption("the value's chain hash " + h.chain + " does not follow from its parent and tokens (" +
                              follows + ")");
  }
  return Status::OK();
}

Status HoldsAnotherType(std::string_view key) {
  return Status::Corruption("shared tier: " + std::string(key) + ": holds another type than a byte string");
}

// The whole value of `key`: NotFound when absent, Corruption when it holds another type.
Result<std::string> WholeValue(KvBackend& backend, std::string_view key) {
  const std::string keys[] = {std::string(key)};
  std::vector<bool> other_type;
  KV_ASSIGN_OR_RETURN(auto values, backend.Get(keys, &other_type));
  if (values.size() != 1) return Status::IOError("shared tier: the backend answered no value for " + keys[0]);
  if (!other_type.empty() && other_type[0]) return HoldsAnotherType(key);
  if (!values[0]) return Status::NotFound("shared tier: no key " + keys[0]);
  return std::move(*values[0]);
}

// The plain value of a sealed chunk: its namespace's descriptor gives the
// fingerprint, from which the secret derives the namespace's keys.
Status UnsealChunk(KvBackend& backend, std::string_view key, std::string& value, std::string_view secret) {
  const std::optional<ChunkKeyParts> parts = ParseChunkKey(key);
  if (!parts) return Status::Corruption("a sealed value under a key that is not a chunk key");
  const ChunkSealing sealing{secret, ChunkKeyPrefixOf(key)};
  const std::string ns_key = NamespaceKey(sealing.key_prefix, parts->ns_id);
  KV_ASSIGN_OR_RETURN(std::string descriptor, WholeValue(backend, ns_key));
  KV_ASSIGN_OR_RETURN(NamespaceRecord record, DecodeNamespaceRecord(sealing, ns_key, descriptor));
  const ChunkNamespace ns = MakeChunkNamespace(record.fingerprint, record.chunk_tokens, sealing);
  if (ns.id != parts->ns_id) return Status::Corruption("the descriptor " + ns_key + " names another namespace");
  return OpenChunkValue(value, std::string(key), ns);
}

// What a sealed value read without the secret shows: its size and what its key names.
SharedChunkInfo SealedInfo(std::string_view key, uint64_t bytes) {
  SharedChunkInfo out;
  out.key = std::string(key);
  out.sealed = true;
  out.opened = false;
  out.value_bytes = bytes;
  out.index = -1;
  if (const std::optional<ChunkKeyParts> parts = ParseChunkKey(key)) {
    out.snapshot = parts->kind == ChunkKind::kSnapshot;
    out.chain = parts->hash;
  }
  return out;
}

}  // namespace

Result<SharedChunkInfo> ReadSharedChunkInfo(KvBackend& backend, std::string_view key, std::string_view secret) {
  SharedChunkInfo out;
  out.key = std::string(key);
  Result<std::optional<std::string>> range = backend.GetRange(key, 0, 8);
  // GETRANGE's FailedPrecondition may be a key of another type (or a permission).
  if (!range.ok() && range.status().code() == StatusCode::kFailedPrecondition) {
    KV_RETURN_IF_ERROR(WholeValue(backend, key).status());
  }
  KV_ASSIGN_OR_RETURN(std::optional<std::string> first8, std::move(range));
  if (!first8) return Status::NotFound("shared tier: no key " + std::string(key));
  Status plain_header;
  if (!std::string_view(*first8).starts_with(kZstdMagic)) {
    Result<SafetensorsHeader> header = HeaderOnly(backend, key, *first8);
    if (header.ok()) {
      KV_RETURN_IF_ERROR(FillFromHeader(*header, out).WithPrefix(std::string(key)));
      return out;
    }
    plain_header = header.status().WithPrefix(std::string(key));
  }
  // Compressed, sealed (its trailer says so), or not a chunk.
  KV_ASSIGN_OR_RETURN(std::string whole, WholeValue(backend, key));
  auto value = std::make_shared<std::string>(std::move(whole));
  if (!plain_header.ok() && !LooksSealed(*value)) return plain_header;
  out.value_bytes = value->size();
  if (LooksSealed(*value)) {
    if (secret.empty()) return SealedInfo(key, value->size());
    out.sealed = true;
    KV_RETURN_IF_ERROR(UnsealChunk(backend, key, *value, secret).WithPrefix(std::string(key)));
  }
  out.compressed = std::string_view(*value).starts_with(kZstdMagic);
  Result<std::unique_ptr<PromptCacheReader>> reader = OpenPromptCacheReader(std::move(value));
  if (!reader.ok()) return reader.status().WithPrefix(std::string(key));
  KV_RETURN_IF_ERROR(FillFromHeader((*reader)->info().header, out).WithPrefix(std::string(key)));
  return out;
}

Status VerifySharedChunk(KvBackend& backend, std::string_view key, std::string_view secret) {
  KV_ASSIGN_OR_RETURN(std::string whole, WholeValue(backend, key));
  auto value = std::make_shared<std::string>(std::move(whole));
  const bool sealed = LooksSealed(*value);
  if (sealed && secret.empty()) {
    return Status::Corruption(std::string(key) + ": the value is sealed; its check needs the secret");
  }
  if (!sealed && !secret.empty()) return Status::Corruption(std::string(key) + ": the value is not sealed");
  if (sealed) KV_RETURN_IF_ERROR(UnsealChunk(backend, key, *value, secret).WithPrefix(std::string(key)));
  Result<std::unique_ptr<PromptCacheReader>> reader = OpenPromptCacheReader(std::move(value));
  if (!reader.ok()) return reader.status().WithPrefix(std::string(key));
  const PromptCacheInfo& info = (*reader)->info();
  Result<ChunkHeader> header = ChunkHeaderFromMetadata(info.user_metadata);
  if (!header.ok()) return header.status().WithPrefix(std::string(key));
  KV_RETURN_IF_ERROR(CheckChunkAgainstKey(*header, key, secret).WithPrefix(std::string(key)));
  if (sealed) return Status::OK();  // the tag covered every byte
  KV_ASSIGN_OR_RETURN(VerifyReport report, (*reader)->Verify(1));
  if (!report.has_digests) return Status::Corruption(std::string(key) + ": the value carries no digests");
  KV_RETURN_IF_ERROR(report.ToStatus(key));
  return Status::OK();
}

Result<std::vector<SharedNamespaceInfo>> ListSharedNamespaces(KvBackend& backend, std::string_view key_prefix,
                                                              size_t limit, std::string_view secret) {
  KV_ASSIGN_OR_RETURN(std::vector<std::string> keys, backend.Scan(NamespaceKeyPrefix(key_prefix), limit));
  std::sort(keys.begin(), keys.end());
  std::vector<SharedNamespaceInfo> out;
  for (const std::string& key : keys) {
    SharedNamespaceInfo ns;
    ns.key = key;
    ns.id = key.substr(NamespaceKeyPrefix(key_prefix).size());
    Result<std::string> value = WholeValue(backend, key);
    Result<NamespaceRecord> record =
        !value.ok()                                ? Result<NamespaceRecord>(value.status())
        : LooksSealed(*value) && secret.empty() ? Result<NamespaceRecord>(Status::FailedPrecondition("sealed: give the secret to read it"))
                                                  : DecodeNamespaceRecord({secret, key_prefix}, key, *value);
    if (record.ok()) {
      ns.fingerprint = record->fingerprint;
      ns.chunk_tokens = record->chunk_tokens;
    } else {
      ns.error = std::string(record.status().message());
    }
    KV_ASSIGN_OR_RETURN(auto rows, backend.Scan(ChunkKeyPrefix(key_prefix, ns.id, ChunkKind::kRows), limit));
    KV_ASSIGN_OR_RETURN(auto snaps, backend.Scan(ChunkKeyPrefix(key_prefix, ns.id, ChunkKind::kSnapshot), limit));
    ns.chunks = static_cast<int64_t>(rows.size());
    ns.snapshots = static_cast<int64_t>(snaps.size());
    out.push_back(std::move(ns));
  }
  return out;
}

Result<std::vector<SharedChainInfo>> ListSharedChains(KvBackend& backend, std::string_view key_prefix,
                                                      std::string_view ns_id, size_t limit, std::string_view secret) {
  KV_ASSIGN_OR_RETURN(auto rows, backend.Scan(ChunkKeyPrefix(key_prefix, ns_id, ChunkKind::kRows), limit));
  KV_ASSIGN_OR_RETURN(auto snaps, backend.Scan(ChunkKeyPrefix(key_prefix, ns_id, ChunkKind::kSnapshot), limit));
  std::map<std::string, SharedChunkInfo> by_chain;
  for (const std::string& key : rows) {
    Result<SharedChunkInfo> info = ReadSharedChunkInfo(backend, key, secret);
    if (info.ok()) by_chain.emplace(info->chain, std::move(info).value());  // unreadable or vanished: skipped
  }
  std::map<std::string, std::vector<const SharedChunkInfo*>> children;
  std::vector<const SharedChunkInfo*> roots;
  for (const auto& [chain, info] : by_chain) {
    if (info.index > 0 && by_chain.count(info.parent) > 0) {
      children[info.parent].push_back(&info);
    } else {
      roots.push_back(&info);
    }
  }
  std::set<std::string> snapshot_chains;
  const size_t hash_at = ChunkKeyPrefix(key_prefix, ns_id, ChunkKind::kSnapshot).size();
  for (const std::string& key : snaps) snapshot_chains.insert(key.substr(hash_at));
  std::vector<SharedChainInfo> out;
  for (const SharedChunkInfo* root : roots) {
    SharedChainInfo chain;
    chain.root = root->key;
    std::set<std::string> writers;
    // Depth-first without recursion: chains can be as deep as a prompt is long.
    std::vector<std::pair<const SharedChunkInfo*, int64_t>> todo = {{root, 1}};
    while (!todo.empty()) {
      auto [c, depth] = todo.back();
      todo.pop_back();
      ++chain.chunks;
      chain.longest = std::max(chain.longest, depth);
      writers.insert(c->writer);
      chain.snapshots += static_cast<int64_t>(snapshot_chains.count(c->chain));
      auto it = children.find(c->chain);
      if (it == children.end()) {
        ++chain.leaves;
        continue;
      }
      for (const SharedChunkInfo* child : it->second) todo.emplace_back(child, depth + 1);
    }
    chain.writers.assign(writers.begin(), writers.end());
    out.push_back(std::move(chain));
  }
  std::sort(out.begin(), out.end(), [](const SharedChainInfo& a, const SharedChainInfo& b) {
    return a.longest != b.longest ? a.longest > b.longest : a.root < b.root;
  });
  return out;
}

}  // namespace kvstore
