// kvtool ls / inspect on a shared tier in Redis.
#include "apps/kvtool/shared.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "apps/common/secret.h"
#include "apps/kvtool/kvtool.h"
#include "kvstore/redis_backend.h"
#include "kvstore/shared_tier_admin.h"

namespace kvtool {
namespace {

using kvstore::Json;

kvstore::Result<std::unique_ptr<kvstore::KvBackend>> Connect(const std::string& url) {
  // A tool may wait longer than a request thread: values can be large.
  return kvstore::OpenRedisBackend({.url = url, .command_timeout = std::chrono::milliseconds(5000)});
}

std::string Describe(const kvstore::SharedNamespaceInfo& ns) {
  if (!ns.fingerprint) return "(" + TerminalText(ns.error) + ")";
  return TerminalText(ns.fingerprint->model_id());
}

// The URL as it may be shown: its password redacted (a URL that does not
// parse is not shown at all).
std::string ShownUrl(const std::string& url) {
  auto parsed = kvstore::ParseRedisUrl(url);
  return parsed.ok() ? kvstore::RedactedRedisUrl(*parsed) : "URL";
}

kvstore::Result<std::string> SecretOf(const SharedArgs& a) {
  return kvapps::ResolveSharedSecret(a.secret, a.secret_file);
}

// "tokens 512-768" for a rows chunk, "at 768 tokens" for a snapshot; the
// index and size come from the value (hostile), so a product past int64
// is said so instead of overflowing.
std::string TokenSpan(const kvstore::SharedChunkInfo& info) {
  int64_t first = 0, end = 0;
  if (__builtin_mul_overflow(info.index, info.chunk_tokens, &first) ||
      __builtin_add_overflow(first, info.chunk_tokens, &end)) {
    return info.snapshot ? "beyond int64 tokens" : "tokens beyond int64";
  }
  return info.snapshot ? "at " + std::to_string(end) + " tokens"
                       : "tokens " + std::to_string(first) + "-" + std::to_string(end);
}

// The secret options, shared by ls and inspect.
void AddSecretOptions(CLI::App* app, SharedArgs& a) {
  app->add_option("--secret", a.secret,
                  "redis://: the seal's secret, which opens sealed values (visible in ps: prefer "
                  "--secret-file or $KVSTORE_SHARED_SECRET)");
  app->add_option("--secret-file", a.secret_file,
                  "redis://: the seal's secret from this file (one trailing newline dropped)");
}

int LsNamespaces(kvstore::KvBackend& backend, const std::string& url, const SharedArgs& a, bool json) {
  auto secret = SecretOf(a);
  if (!secret.ok()) return Fail(secret.status());
  auto namespaces = kvstore::ListSharedNamespaces(backend, a.prefix, 1000000, *secret);
  if (!namespaces.ok()) return Fail(namespaces.status());
  if (json) {
    Json list = Json::MakeArray();
    for (const auto& ns : *namespaces) {
      Json j = Json::MakeObject();
      j["namespace"] = Json(ns.id);
      j["model"] = ns.fingerprint ? Json(ns.fingerprint->model_id()) : Json();
      j["layers"] = ns.fingerprint ? Json(static_cast<int64_t>(ns.fingerprint->spec().layers.size())) : Json();
      j["chunk_tokens"] = Json(ns.chunk_tokens);
      j["chunks"] = Json(ns.chunks);
      j["snapshots"] = Json(ns.snapshots);
      if (!ns.error.empty()) j["error"] = Json(ns.error);
      list.Push(std::move(j));
    }
    Json out = Json::MakeObject();
    out["store"] = Json(backend.Describe());
    out["prefix"] = Json(a.prefix);
    out["namespaces"] = std::move(list);
    PrintJson(out);
    return kExitOk;
  }
  std::printf("%-32s  %-24s %6s %6s %8s %9s\n", "namespace", "model", "layers", "chunk", "chunks", "snapshots");
  for (const auto& ns : *namespaces) {
    std::printf("%-32s  %-24s %6s %6lld %8lld %9lld\n", TerminalText(ns.id).c_str(), Describe(ns).c_str(),
                ns.fingerprint ? std::to_string(ns.fingerprint->spec().layers.size()).c_str() : "-",
                static_cast<long long>(ns.chunk_tokens), static_cast<long long>(ns.chunks),
                static_cast<long long>(ns.snapshots));
  }
  std::printf("%zu namespaces under \"%s\" on %s\n", namespaces->size(), TerminalText(a.prefix).c_str(),
              TerminalText(backend.Describe()).c_str());
  if (!namespaces->empty()) {
    std::printf("chains of a namespace: kvtool ls %s%s --namespace NAMESPACE\n", ShownUrl(url).c_str(),
                a.prefix == "kvstore:" ? "" : (" --prefix '" + TerminalText(a.prefix) + "'").c_str());
  }
  return kExitOk;
}

int LsChains(kvstore::KvBackend& backend, const std::string& url, const SharedArgs& a, bool json) {
  auto secret = SecretOf(a);
  if (!secret.ok()) return Fail(secret.status());
  auto chains = kvstore::ListSharedChains(backend, a.prefix, a.ns, 100000, *secret);
  if (!chains.ok()) return Fail(chains.status());
  if (json) {
    Json list = Json::MakeArray();
    for (const auto& c : *chains) {
      Json j = Json::MakeObject();
      j["root"] = Json(c.root);
      j["chunks"] = Json(c.chunks);
      j["longest"] = Json(c.longest);
      j["leaves"] = Json(c.leaves);
      j["snapshots"] = Json(c.snapshots);
      Json writers = Json::MakeArray();
      for (const auto& w : c.writers) writers.Push(Json(w));
      j["writers"] = std::move(writers);
      list.Push(std::move(j));
    }
    Json out = Json::MakeObject();
    out["namespace"] = Json(a.ns);
    out["chains"] = std::move(list);
    PrintJson(out);
    return kExitOk;
  }
  // The first chunk's whole key: what inspect --key takes.
  std::vector<std::string> writers;
  size_t writers_width = 7;
  for (const auto& c : *chains) {
    std::string w;
    for (const auto& writer : c.writers) w += (w.empty() ? "" : ",") + TerminalText(writer);
    writers_width = std::max(writers_width, w.size());
    writers.push_back(std::move(w));
  }
  const int width = static_cast<int>(writers_width);
  std::printf("%7s %8s %7s %9s  %-*s  %s\n", "chunks", "longest", "leaves", "snapshots", width, "writers",
              "first chunk (inspect --key)");
  for (size_t i = 0; i < chains->size(); ++i) {
    const auto& c = (*chains)[i];
    std::printf("%7lld %8lld %7lld %9lld  %-*s  %s\n", static_cast<long long>(c.chunks),
                static_cast<long long>(c.longest), static_cast<long long>(c.leaves),
                static_cast<long long>(c.snapshots), width, writers[i].c_str(), TerminalText(c.root).c_str());
  }
  std::printf("%zu chains in namespace %s (longest and chunks count chunks; leaves are distinct continuations)\n",
              chains->size(), TerminalText(a.ns).c_str());
  if (!chains->empty()) {
    std::printf("inspect a chunk: kvtool inspect %s --key '%s'\n", ShownUrl(url).c_str(),
                TerminalText(chains->front().root).c_str());
  }
  return kExitOk;
}

}  // namespace

bool IsSharedTierUrl(const std::string& arg) { return kvstore::HasRedisScheme(arg); }

std::shared_ptr<SharedArgs> AddSharedLsOptions(CLI::App* ls) {
  auto a = std::make_shared<SharedArgs>();
  CLI::Option* key_prefix =
      ls->add_option("--key-prefix", a->prefix, "redis://: the shared tier's key prefix")->capture_default_str();
  // The old spelling still works: "prefix" alone also names a prompt's first tokens.
  ls->add_option("--prefix", a->prefix, "deprecated spelling of --key-prefix")
      ->excludes(key_prefix)
      ->each([](const std::string&) { std::fputs("kvtool: note: --prefix is deprecated: use --key-prefix\n", stderr); });
  ls->add_option("--namespace", a->ns, "redis://: list the chains of chunks of this namespace")->check(NonEmpty());
  AddSecretOptions(ls, *a);
  return a;
}

std::shared_ptr<SharedArgs> AddSharedInspectOptions(CLI::App* inspect) {
  auto a = std::make_shared<SharedArgs>();
  inspect->add_option("--key", a->key, "redis://: the key of the chunk to inspect (ls URL --namespace NS shows them)")
      ->check(NonEmpty());
  AddSecretOptions(inspect, *a);
  return a;
}

int LsShared(const std::string& url, const SharedArgs& a, bool json) {
  auto backend = Connect(url);
  if (!backend.ok()) return Fail(backend.status());
  return a.ns.empty() ? LsNamespaces(**backend, url, a, json) : LsChains(**backend, url, a, json);
}

int InspectShared(const std::string& url, const SharedArgs& a, bool json, bool verify) {
  if (a.key.empty()) {
    return Fail(kExitUsage, "inspect " + ShownUrl(url) + " needs --key KEY (kvtool ls " + ShownUrl(url) +
                                " --namespace NAMESPACE lists the first chunk of each chain)");
  }
  auto backend = Connect(url);
  if (!backend.ok()) return Fail(backend.status());
  auto secret = SecretOf(a);
  if (!secret.ok()) return Fail(secret.status());
  auto info = kvstore::ReadSharedChunkInfo(**backend, a.key, *secret);
  if (!info.ok()) return Fail(info.status());
  kvstore::Status verified = verify ? kvstore::VerifySharedChunk(**backend, a.key, *secret) : kvstore::Status::OK();
  if (json) {
    Json j = Json::MakeObject();
    j["key"] = Json(info->key);
    j["kind"] = Json(info->snapshot ? "snapshot" : "rows");
    j["index"] = Json(info->index);
    j["chunk_tokens"] = Json(info->chunk_tokens);
    j["namespace"] = Json(info->ns_digest);
    j["chain"] = Json(info->chain);
    j["parent"] = Json(info->parent);
    j["writer"] = Json(info->writer);
    j["sealed"] = Json(info->sealed);
    j["opened"] = Json(info->opened);
    j["value_bytes"] = Json(static_cast<int64_t>(info->value_bytes));
    j["compressed"] = Json(info->compressed);
    Json layers = Json::MakeArray();
    for (size_t i = 0; i < info->layers.size(); ++i) {
      Json l = Json::MakeObject();
      l["path"] = Json(info->layers[i]);
      l["class"] = Json(info->classes[i]);
      layers.Push(std::move(l));
    }
    j["layers"] = std::move(layers);
    if (verify) {
      j["verified"] = Json(verified.ok());
      j["seal_checked"] = Json(verified.ok() && info->sealed);
    }
    PrintJson(j);
  } else {
    // Everything but the counts comes from the value: printed escaped.
    std::printf("key: %s\n", TerminalText(info->key).c_str());
    if (!info->opened) {
      std::printf("kind: %s (from the key)\nchain: %s\nsealed: AES-256-GCM, %llu bytes (its contents need the secret: "
                  "give --secret-file F or set KVSTORE_SHARED_SECRET)\n",
                  info->snapshot ? "snapshot" : "rows", TerminalText(info->chain).c_str(),
                  static_cast<unsigned long long>(info->value_bytes));
      return verified.ok() ? kExitOk : Fail(verified);
    }
    if (info->snapshot) {
      std::printf("kind: snapshot %s\n", TokenSpan(*info).c_str());
    } else {
      std::printf("kind: rows, chunk %lld: %s\n", static_cast<long long>(info->index), TokenSpan(*info).c_str());
    }
    std::printf("namespace: %s\nchain: %s\nparent: %s\nwriter: %s\nsealed: %s\ncompressed: %s\n",
                TerminalText(info->ns_digest).c_str(), TerminalText(info->chain).c_str(),
                info->parent.empty() ? "-" : TerminalText(info->parent).c_str(), TerminalText(info->writer).c_str(),
                info->sealed ? ("AES-256-GCM, " + std::to_string(info->value_bytes) + " bytes").c_str() : "no",
                info->compressed ? "zstd" : "no");
    std::printf("%-6s %-8s %-18s %s\n", "layer", "path", "class", "tensors");
    for (size_t i = 0; i < info->layers.size(); ++i) {
      std::string tensors;
      const std::string own = std::to_string(i) + ".";
      for (const auto& t : info->tensors) {
        if (!t.name.starts_with(own)) continue;
        tensors += (tensors.empty() ? "" : " ") + std::string(kvstore::DTypeName(t.dtype)) + kvstore::ShapeToString(t.shape);
      }
      std::printf("%-6zu %-8s %-18s %s\n", i, TerminalText(info->layers[i]).c_str(),
                  TerminalText(info->classes[i]).c_str(), tensors.c_str());
    }
    if (verify && verified.ok()) {
      // Digests alone prove nothing against a writer who recomputes them.
      std::printf("verified: %s\n", info->sealed ? "the seal opens (AES-256-GCM tag) and the chunk is its key's"
                                                  : "digests match; the value carries no seal");
    }
  }
  return verified.ok() ? kExitOk : Fail(verified);
}

}  // namespace kvtool
