#include "libkvstore/remote/mem_kv_backend.h"

#include <algorithm>

namespace kvstore {
namespace {

Status WrongType(std::string_view command, std::string_view key) {
  return Status::FailedPrecondition("memory: " + std::string(command) + " '" + std::string(key) +
                                    "': WRONGTYPE the key holds another type than a byte string");
}

}  // namespace

Result<std::vector<std::optional<std::string>>> MemKvBackend::Get(std::span<const std::string> keys,
                                                                  std::vector<bool>* other_type) {
  std::lock_guard<std::mutex> l(mu_);
  ++calls_;
  std::vector<std::optional<std::string>> out(keys.size());
  if (other_type != nullptr) other_type->assign(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = map_.find(keys[i]);
    if (it == map_.end()) continue;
    if (const std::string* bytes = std::get_if<std::string>(&it->second)) {
      out[i] = *bytes;
    } else if (other_type != nullptr) {
      (*other_type)[i] = true;
    } else {
      return WrongType("GET", keys[i]);
    }
  }
  return out;
}

Result<std::optional<std::string>> MemKvBackend::GetRange(std::string_view key, int64_t start, int64_t length) {
  std::lock_guard<std::mutex> l(mu_);
  ++calls_;
  auto it = map_.find(key);
  if (it == map_.end()) return std::optional<std::string>();
  const std::string* v = std::get_if<std::string>(&it->second);
  if (v == nullptr) return WrongType("GETRANGE", key);
  size_t begin = std::min(static_cast<size_t>(start), v->size());
  size_t n = std::min(static_cast<size_t>(length), v->size() - begin);
  return std::optional<std::string>(v->substr(begin, n));
}

Result<std::vector<bool>> MemKvBackend::Exists(std::span<const std::string> keys) {
  std::lock_guard<std::mutex> l(mu_);
  ++calls_;
  std::vector<bool> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(map_.count(k) != 0);
  return out;
}

Result<std::vector<bool>> MemKvBackend::PutIfAbsent(std::span<const KvPut> items) {
  std::lock_guard<std::mutex> l(mu_);
  ++calls_;
  std::vector<bool> out;
  out.reserve(items.size());
  for (const KvPut& p : items) out.push_back(map_.emplace(std::string(p.key), std::string(p.value)).second);
  return out;
}

Status MemKvBackend::Delete(std::span<const std::string> keys) {
  std::lock_guard<std::mutex> l(mu_);
  ++calls_;
  for (const std::string& k : keys) map_.erase(k);
  return Status::OK();
}

Result<bool> MemKvBackend::DeleteIfEquals(std::string_view key, std::string_view expected) {
  std::lock_guard<std::mutex> l(mu_);
  ++calls_;
  auto it = map_.find(key);
  const std::string* v = it == map_.end() ? nullptr : std::get_if<std::string>(&it->second);
  if (v == nullptr || *v != expected) return false;
  map_.erase(it);
  return true;
}

Result<bool> MemKvBackend::DeleteIfOtherType(std::string_view key) {
  std::lock_guard<std::mutex> l(mu_);
  ++calls_;
  auto it = map_.find(key);
  if (it == map_.end() || std::holds_alternative<std::string>(it->second)) return false;
  map_.erase(it);
  return true;
}

Result<std::vector<std::string>> MemKvBackend::Scan(std::string_view prefix, size_t limit) {
  std::lock_guard<std::mutex> l(mu_);
  ++calls_;
  std::vector<std::string> out;
  for (auto it = map_.lower_bound(prefix); it != map_.end() && out.size() < limit; ++it) {
    if (!std::string_view(it->first).starts_with(prefix)) break;
    out.push_back(it->first);
  }
  return out;
}

KvBackendStats MemKvBackend::Stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return KvBackendStats{.calls = calls_};
}

void MemKvBackend::PutOtherType(std::string_view key) {
  std::lock_guard<std::mutex> l(mu_);
  map_.insert_or_assign(std::string(key), OtherType{});
}

std::unique_ptr<KvBackend> NewMemKvBackend() { return std::make_unique<MemKvBackend>(); }

}  // namespace kvstore
