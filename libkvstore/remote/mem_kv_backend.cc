// NewMemKvBackend: a std::map behind one mutex, with Redis's semantics for
// each call (GETRANGE clamps, SET NX keeps the old value, DEL ignores absent
// keys, a conditional delete compares the whole value).
#include <algorithm>
#include <map>
#include <mutex>

#include "kvstore/kv_backend.h"

namespace kvstore {
namespace {

class MemKvBackend final : public KvBackend {
 public:
  Result<std::vector<std::optional<std::string>>> Get(std::span<const std::string> keys) override {
    std::lock_guard<std::mutex> l(mu_);
    ++calls_;
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (const std::string& k : keys) {
      auto it = map_.find(k);
      out.push_back(it == map_.end() ? std::nullopt : std::optional<std::string>(it->second));
    }
    return out;
  }

  Result<std::optional<std::string>> GetRange(std::string_view key, int64_t start,
                                              int64_t length) override {
    std::lock_guard<std::mutex> l(mu_);
    ++calls_;
    auto it = map_.find(key);
    if (it == map_.end()) return std::optional<std::string>();
    const std::string& v = it->second;
    size_t begin = std::min(static_cast<size_t>(start), v.size());
    size_t n = std::min(static_cast<size_t>(length), v.size() - begin);
    return std::optional<std::string>(v.substr(begin, n));
  }

  Result<std::vector<bool>> Exists(std::span<const std::string> keys) override {
    std::lock_guard<std::mutex> l(mu_);
    ++calls_;
    std::vector<bool> out;
    out.reserve(keys.size());
    for (const std::string& k : keys) out.push_back(map_.count(k) != 0);
    return out;
  }

  Result<std::vector<bool>> PutIfAbsent(std::span<const KvPut> items) override {
    std::lock_guard<std::mutex> l(mu_);
    ++calls_;
    std::vector<bool> out;
    out.reserve(items.size());
    for (const KvPut& p : items) {
      out.push_back(map_.emplace(std::string(p.key), std::string(p.value)).second);
    }
    return out;
  }

  Status Delete(std::span<const std::string> keys) override {
    std::lock_guard<std::mutex> l(mu_);
    ++calls_;
    for (const std::string& k : keys) map_.erase(k);
    return Status::OK();
  }

  Result<bool> DeleteIfEquals(std::string_view key, std::string_view expected) override {
    std::lock_guard<std::mutex> l(mu_);
    ++calls_;
    auto it = map_.find(key);
    if (it == map_.end() || it->second != expected) return false;
    map_.erase(it);
    return true;
  }

  Result<std::vector<std::string>> Scan(std::string_view prefix, size_t limit) override {
    std::lock_guard<std::mutex> l(mu_);
    ++calls_;
    std::vector<std::string> out;
    for (auto it = map_.lower_bound(prefix); it != map_.end() && out.size() < limit; ++it) {
      if (!std::string_view(it->first).starts_with(prefix)) break;
      out.push_back(it->first);
    }
    return out;
  }

  std::string Describe() const override { return "memory"; }

  KvBackendStats Stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    return KvBackendStats{.calls = calls_};
  }

 private:
  mutable std::mutex mu_;
  uint64_t calls_ = 0;
  std::map<std::string, std::string, std::less<>> map_;
};

}  // namespace

std::unique_ptr<KvBackend> NewMemKvBackend() { return std::make_unique<MemKvBackend>(); }

}  // namespace kvstore
