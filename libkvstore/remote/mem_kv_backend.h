// MemKvBackend: NewMemKvBackend's class, for tests that need what only a
// real store can otherwise hold: a key of another type than a byte string.
#ifndef KVSTORE_LIBKVSTORE_REMOTE_MEM_KV_BACKEND_H_
#define KVSTORE_LIBKVSTORE_REMOTE_MEM_KV_BACKEND_H_

#include <map>
#include <mutex>
#include <string>
#include <variant>

#include "kvstore/kv_backend.h"

namespace kvstore {

// A std::map behind one mutex, with Redis's semantics for each call
// (GETRANGE clamps, SET NX keeps the old value, DEL ignores absent keys, a
// conditional delete compares the whole value, a key of another type is
// WRONGTYPE to GET and GETRANGE).
class MemKvBackend final : public KvBackend {
 public:
  using KvBackend::Get;
  Result<std::vector<std::optional<std::string>>> Get(std::span<const std::string> keys,
                                                      std::vector<bool>* other_type) override;
  Result<std::optional<std::string>> GetRange(std::string_view key, int64_t start, int64_t length) override;
  Result<std::vector<bool>> Exists(std::span<const std::string> keys) override;
  Result<std::vector<bool>> PutIfAbsent(std::span<const KvPut> items) override;
  Status Delete(std::span<const std::string> keys) override;
  Result<bool> DeleteIfEquals(std::string_view key, std::string_view expected) override;
  Result<bool> DeleteIfOtherType(std::string_view key) override;
  Result<std::vector<std::string>> Scan(std::string_view prefix, size_t limit) override;
  std::string Describe() const override { return "memory"; }
  KvBackendStats Stats() const override;

  // Makes `key` hold another type than a byte string, replacing what it
  // held (as DEL then RPUSH would in Redis).
  void PutOtherType(std::string_view key);

 private:
  struct OtherType {};
  using Held = std::variant<std::string, OtherType>;

  mutable std::mutex mu_;
  uint64_t calls_ = 0;
  std::map<std::string, Held, std::less<>> map_;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_REMOTE_MEM_KV_BACKEND_H_
