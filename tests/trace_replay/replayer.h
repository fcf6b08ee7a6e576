// Replays an mlx-lm oracle trace (fixtures/traces/FORMAT.md) against
// libkvstore and reports every difference.
#ifndef KVSTORE_TESTS_TRACE_REPLAY_REPLAYER_H_
#define KVSTORE_TESTS_TRACE_REPLAY_REPLAYER_H_

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/json.h"
#include "kvstore/lru_prompt_cache.h"
#include "kvstore/prompt_trie.h"
#include "kvstore/safetensors.h"
#include "kvstore/status.h"
#include "kvstore/token_buffer.h"

namespace kvstore::trace {

using TrieOfJson = PromptTrie<Json>;

// An object of the trace's registry. References are shared, as in Python.
using Object = std::variant<std::shared_ptr<Cache>, std::shared_ptr<TokenBuffer>,
                            std::shared_ptr<TrieOfJson>, std::shared_ptr<LRUPromptCache>>;

// What one op produced: its encoded return value (FORMAT.md §5.1) and the
// objects its `result` field binds, in order.
struct OpOutput {
  Json value;
  std::vector<Object> bound;
};

class Replayer;

// Decoded view of an op's arguments.
class Args {
 public:
  Args(const Json& args, Replayer& replayer) : args_(args), replayer_(replayer) {}
  bool Has(std::string_view name) const { return args_.Find(name) != nullptr; }
  // Present and not null.
  bool HasValue(std::string_view name) const;
  Result<int64_t> Int(std::string_view name) const;
  Result<int64_t> Int(std::string_view name, int64_t fallback) const;
  Result<std::optional<int64_t>> OptionalInt(std::string_view name) const;
  Result<bool> Bool(std::string_view name, bool fallback) const;
  Result<std::string> String(std::string_view name) const;
  Result<std::vector<int32_t>> Ints(std::string_view name) const;
  Result<std::optional<std::vector<int32_t>>> OptionalInts(std::string_view name) const;
  Result<Array> Tensor(std::string_view name) const;
  Result<std::optional<Array>> OptionalTensor(std::string_view name) const;
  Result<Object> Ref(std::string_view name) const;
  Result<std::shared_ptr<Cache>> CacheRef(std::string_view name) const;
  Result<std::vector<std::shared_ptr<Cache>>> CacheRefs(std::string_view name) const;
  Result<CacheState> State(std::string_view name) const;
  Result<MetaState> Meta(std::string_view name) const;
  const Json* Raw(std::string_view name) const { return args_.Find(name); }
  // TypeError analogue: an argument this signature does not take.
  Status OnlyAllowed(std::initializer_list<std::string_view> names) const;

 private:
  Result<const Json*> Get(std::string_view name) const;
  const Json& args_;
  Replayer& replayer_;
};

class Replayer {
 public:
  // Loads <dir>/trace.json and <dir>/inputs.safetensors.
  static Result<std::unique_ptr<Replayer>> Load(const std::string& dir);

  // Runs every op; returns the differences found (empty = pass).
  std::vector<std::string> Run();
  size_t num_ops() const;
  const std::string& name() const { return name_; }

  // ---- Used by the op handlers ----
  Result<Array> Input(std::string_view name) const;
  Result<Object> Lookup(std::string_view name) const;
  Result<CacheState> DecodeState(const Json& json) const;

 private:
  Replayer() = default;
  Status Construct(const Json& entry);
  Result<OpOutput> Call(const Json& op);
  void Bind(const Json& result, const OpOutput& out, std::vector<std::string>& diffs,
            const std::string& where);
  void CheckSnapshot(const std::string& name, const Json& expected, std::vector<std::string>& diffs,
                     const std::string& where);

  std::string name_;
  Json trace_;
  std::shared_ptr<const SafetensorsFile> inputs_;
  std::map<std::string, Object, std::less<>> objects_;
};

// ---- Op handlers (ops_*.cc) ----
Result<OpOutput> CallCacheMethod(const std::shared_ptr<Cache>& cache, std::string_view method,
                                 const Args& args);
Result<OpOutput> CallClassMethod(std::string_view cls, std::string_view method, const Args& args);
Result<OpOutput> CallModuleFunction(std::string_view method, const Args& args);
Result<OpOutput> CallReuseMethod(const Object& target, std::string_view method, const Args& args);
Result<Object> ConstructObject(std::string_view cls, const Args& args);

// ---- Encoding (encode.cc) ----
Json EncodeArray(const Array& array);
Json EncodeMask(const Mask& mask);
Json EncodeState(const CacheState& state);
Json EncodeMeta(const MetaState& meta);
Json EncodeInts(std::span<const int32_t> values);
Json Raises(const Status& status);
Json LruStats(const LRUPromptCache& lru);
// The snapshot of `object` (FORMAT.md §6), computing only the keys `expected` has
// (all keys when expected is null).
Json Snapshot(const Object& object, const Json& expected);
// Compares an expected encoding with ours; appends differences to `diffs`.
void Compare(const Json& expected, const Json& actual, const std::string& path,
             std::vector<std::string>& diffs);

}  // namespace kvstore::trace

#endif  // KVSTORE_TESTS_TRACE_REPLAY_REPLAYER_H_
