#include "tests/trace_replay/replayer.h"

#include <fstream>
#include <sstream>

#include "kvstore/env.h"

namespace kvstore::trace {

// ---- Args ----

Result<const Json*> Args::Get(std::string_view name) const {
  const Json* v = args_.Find(name);
  if (v == nullptr) return Status::InvalidArgument("missing argument '" + std::string(name) + "'");
  return v;
}

bool Args::HasValue(std::string_view name) const {
  const Json* v = args_.Find(name);
  return v != nullptr && !v->is_null();
}

Result<int64_t> Args::Int(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(const Json* v, Get(name));
  if (v->type() != Json::Type::kInt) {
    return Status::InvalidArgument("argument '" + std::string(name) + "' is not an int");
  }
  return v->as_int();
}

Result<int64_t> Args::Int(std::string_view name, int64_t fallback) const {
  if (!HasValue(name)) return fallback;
  return Int(name);
}

Result<std::optional<int64_t>> Args::OptionalInt(std::string_view name) const {
  if (!HasValue(name)) return std::optional<int64_t>();
  KV_ASSIGN_OR_RETURN(int64_t v, Int(name));
  return std::optional<int64_t>(v);
}

Result<bool> Args::Bool(std::string_view name, bool fallback) const {
  if (!HasValue(name)) return fallback;
  const Json* v = args_.Find(name);
  if (v->is_bool()) return v->as_bool();
  if (v->type() == Json::Type::kInt) return v->as_int() != 0;
  return Status::InvalidArgument("argument '" + std::string(name) + "' is not a bool");
}

Result<std::string> Args::String(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(const Json* v, Get(name));
  if (!v->is_string()) {
    return Status::InvalidArgument("argument '" + std::string(name) + "' is not a string");
  }
  return v->as_string();
}

namespace {
Result<std::vector<int32_t>> IntList(const Json& v, std::string_view name) {
  if (!v.is_array()) {
    return Status::InvalidArgument("argument '" + std::string(name) + "' is not a list");
  }
  std::vector<int32_t> out;
  for (const Json& item : v.as_array()) {
    if (item.type() != Json::Type::kInt || item.as_int() < INT32_MIN || item.as_int() > INT32_MAX) {
      return Status::InvalidArgument("argument '" + std::string(name) + "' has a non-int32 item");
    }
    out.push_back(static_cast<int32_t>(item.as_int()));
  }
  return out;
}
}  // namespace

Result<std::vector<int32_t>> Args::Ints(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(const Json* v, Get(name));
  if (v->is_object()) {  // an I32 input tensor
    KV_ASSIGN_OR_RETURN(Array a, Tensor(name));
    if (a.dtype() != DType::kI32 || a.ndim() != 1) {
      return Status::InvalidArgument("argument '" + std::string(name) + "' is not a 1-D I32 array");
    }
    return a.ToVector<int32_t>();
  }
  return IntList(*v, name);
}

Result<std::optional<std::vector<int32_t>>> Args::OptionalInts(std::string_view name) const {
  if (!HasValue(name)) return std::optional<std::vector<int32_t>>();
  KV_ASSIGN_OR_RETURN(auto v, Ints(name));
  return std::optional<std::vector<int32_t>>(std::move(v));
}

Result<Array> Args::Tensor(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(const Json* v, Get(name));
  const Json* input = v->Find("input");
  if (input == nullptr || !input->is_string()) {
    return Status::InvalidArgument("argument '" + std::string(name) + "' is not a tensor");
  }
  return replayer_.Input(input->as_string());
}

Result<std::optional<Array>> Args::OptionalTensor(std::string_view name) const {
  if (!HasValue(name)) return std::optional<Array>();
  KV_ASSIGN_OR_RETURN(Array a, Tensor(name));
  return std::optional<Array>(std::move(a));
}

Result<Object> Args::Ref(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(const Json* v, Get(name));
  const Json* ref = v->Find("cache");
  if (ref == nullptr || !ref->is_string()) {
    return Status::InvalidArgument("argument '" + std::string(name) + "' is not a reference");
  }
  return replayer_.Lookup(ref->as_string());
}

namespace {
Result<std::shared_ptr<Cache>> AsCache(const Object& o) {
  if (auto* c = std::get_if<std::shared_ptr<Cache>>(&o)) return *c;
  return Status::InvalidArgument("reference is not a cache");
}
}  // namespace

Result<std::shared_ptr<Cache>> Args::CacheRef(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(Object o, Ref(name));
  return AsCache(o);
}

Result<std::vector<std::shared_ptr<Cache>>> Args::CacheRefs(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(const Json* v, Get(name));
  if (!v->is_array()) return Status::InvalidArgument("argument '" + std::string(name) + "' is not a list");
  std::vector<std::shared_ptr<Cache>> out;
  for (const Json& item : v->as_array()) {
    const Json* ref = item.Find("cache");
    if (ref == nullptr || !ref->is_string()) {
      return Status::InvalidArgument("argument '" + std::string(name) + "' has a non-reference");
    }
    KV_ASSIGN_OR_RETURN(Object o, replayer_.Lookup(ref->as_string()));
    KV_ASSIGN_OR_RETURN(auto c, AsCache(o));
    out.push_back(std::move(c));
  }
  return out;
}

Result<CacheState> Args::State(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(const Json* v, Get(name));
  return replayer_.DecodeState(*v);
}

namespace {
Result<MetaState> DecodeMeta(const Json& v) {
  if (v.is_string()) return MetaState(v.as_string());
  if (!v.is_array()) return Status::InvalidArgument("meta_state is neither a string nor a list");
  MetaState::List items;
  for (const Json& item : v.as_array()) {
    KV_ASSIGN_OR_RETURN(MetaState m, DecodeMeta(item));
    items.push_back(std::move(m));
  }
  return MetaState(std::move(items));
}
}  // namespace

Result<MetaState> Args::Meta(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(const Json* v, Get(name));
  return DecodeMeta(*v);
}

Status Args::OnlyAllowed(std::initializer_list<std::string_view> names) const {
  for (const auto& [key, value] : args_.as_object()) {
    bool ok = false;
    for (std::string_view n : names) ok = ok || key == n;
    if (!ok) return Status::InvalidArgument("unexpected keyword argument '" + key + "'");
  }
  return Status::OK();
}

// ---- Replayer ----

Result<std::unique_ptr<Replayer>> Replayer::Load(const std::string& dir) {
  std::unique_ptr<Replayer> r(new Replayer());
  std::ifstream in(dir + "/trace.json", std::ios::binary);
  if (!in) return Status::IOError("cannot read " + dir + "/trace.json");
  std::stringstream ss;
  ss << in.rdbuf();
  KV_ASSIGN_OR_RETURN(r->trace_, Json::Parse(ss.str()));
  const Json* format = r->trace_.Find("format");
  if (format == nullptr || !format->is_string() || format->as_string() != "mlx-lm-oracle-trace/1") {
    return Status::NotSupported(dir + ": not an mlx-lm-oracle-trace/1 trace");
  }
  const Json* name = r->trace_.Find("name");
  r->name_ = name && name->is_string() ? name->as_string() : dir;
  std::string inputs_file = "inputs.safetensors";
  if (const Json* f = r->trace_.Find("inputs_file"); f && f->is_string()) inputs_file = f->as_string();
  KV_ASSIGN_OR_RETURN(r->inputs_, SafetensorsFile::Open(Env::Default(), dir + "/" + inputs_file));
  return r;
}

size_t Replayer::num_ops() const {
  const Json* ops = trace_.Find("ops");
  return ops ? ops->size() : 0;
}

Result<Array> Replayer::Input(std::string_view name) const {
  KV_ASSIGN_OR_RETURN(Array a, inputs_->Tensor(name));
  return a.Clone();  // a fresh array, as the format promises
}

Result<Object> Replayer::Lookup(std::string_view name) const {
  auto it = objects_.find(name);
  if (it == objects_.end()) return Status::NotFound("no object named '" + std::string(name) + "'");
  return it->second;
}

Result<CacheState> Replayer::DecodeState(const Json& v) const {
  if (v.is_null()) return CacheState::None();
  if (v.is_object()) {
    const Json* input = v.Find("input");
    if (input == nullptr || !input->is_string()) {
      return Status::InvalidArgument("state leaf is not an input reference");
    }
    KV_ASSIGN_OR_RETURN(Array a, Input(input->as_string()));
    return CacheState(std::move(a));
  }
  if (!v.is_array()) return Status::InvalidArgument("state is not a list");
  CacheState::List items;
  for (const Json& item : v.as_array()) {
    KV_ASSIGN_OR_RETURN(CacheState s, DecodeState(item));
    items.push_back(std::move(s));
  }
  return CacheState(std::move(items));
}

Status Replayer::Construct(const Json& entry) {
  const Json* name = entry.Find("name");
  const Json* cls = entry.Find("class");
  if (name == nullptr || cls == nullptr || !name->is_string() || !cls->is_string()) {
    return Status::InvalidArgument("caches entry lacks name/class");
  }
  static const Json kNoArgs = Json::MakeObject();
  const Json* raw_args = entry.Find("args");
  Args args(raw_args ? *raw_args : kNoArgs, *this);
  KV_ASSIGN_OR_RETURN(Object o, ConstructObject(cls->as_string(), args));
  objects_.emplace(name->as_string(), std::move(o));
  return Status::OK();
}

Result<OpOutput> Replayer::Call(const Json& op) {
  const Json* method = op.Find("method");
  const Json* target = op.Find("target");
  const Json* cls = op.Find("class");
  static const Json kNoArgs = Json::MakeObject();
  const Json* raw_args = op.Find("args");
  Args args(raw_args && raw_args->is_object() ? *raw_args : kNoArgs, *this);
  if (method == nullptr || !method->is_string()) return Status::InvalidArgument("op lacks method");
  const std::string& m = method->as_string();
  if (target != nullptr && target->is_string()) {
    KV_ASSIGN_OR_RETURN(Object obj, Lookup(target->as_string()));
    if (auto* cache = std::get_if<std::shared_ptr<Cache>>(&obj)) {
      return CallCacheMethod(*cache, m, args);
    }
    return CallReuseMethod(obj, m, args);
  }
  if (cls != nullptr && cls->is_string()) return CallClassMethod(cls->as_string(), m, args);
  return CallModuleFunction(m, args);
}

void Replayer::Bind(const Json& result, const OpOutput& out, std::vector<std::string>& diffs,
                    const std::string& where) {
  std::vector<std::string> names;
  if (result.is_string()) {
    names.push_back(result.as_string());
  } else if (result.is_array()) {
    for (const Json& n : result.as_array()) {
      if (n.is_string()) names.push_back(n.as_string());
    }
  }
  if (names.size() != out.bound.size()) {
    diffs.push_back(where + ": result binds " + std::to_string(names.size()) + " names, op gave " +
                    std::to_string(out.bound.size()) + " objects");
    return;
  }
  for (size_t i = 0; i < names.size(); ++i) objects_.emplace(names[i], out.bound[i]);
}

void Replayer::CheckSnapshot(const std::string& name, const Json& expected,
                             std::vector<std::string>& diffs, const std::string& where) {
  Result<Object> obj = Lookup(name);
  if (!obj.ok()) {
    diffs.push_back(where + ": " + obj.status().ToString());
    return;
  }
  Compare(expected, Snapshot(*obj, expected), where + " after(" + name + ")", diffs);
}

std::vector<std::string> Replayer::Run() {
  std::vector<std::string> diffs;
  if (const Json* caches = trace_.Find("caches"); caches && caches->is_array()) {
    for (const Json& entry : caches->as_array()) {
      Status s = Construct(entry);
      if (!s.ok()) {
        diffs.push_back("construct: " + s.ToString());
        return diffs;
      }
    }
  }
  const Json* ops = trace_.Find("ops");
  if (ops == nullptr || !ops->is_array()) return {"trace has no ops"};
  for (const Json& op : ops->as_array()) {
    const Json* i = op.Find("i");
    const Json* method = op.Find("method");
    std::string where = "op " + (i ? i->Dump() : std::string("?")) + " " +
                        (method ? method->Dump() : std::string("?"));
    const Json* expect = op.Find("expect");
    if (expect == nullptr) {
      diffs.push_back(where + ": no expect");
      continue;
    }
    const Json* returns = expect->Find("returns");
    const Json* raises = expect->Find("raises");
    Result<OpOutput> out = Call(op);
    if (raises != nullptr) {
      if (out.ok()) {
        diffs.push_back(where + ": expected raise " + raises->Dump() + ", returned " +
                        out->value.Dump().substr(0, 300));
      }
      // A partly-updated object need not be reproduced (FORMAT.md §5.3).
      const Json* mutated = expect->Find("mutated_before_raise");
      if (mutated && mutated->is_bool() && mutated->as_bool()) continue;
    } else {
      if (!out.ok()) {
        diffs.push_back(where + ": raised " + out.status().ToString());
        continue;
      }
      if (returns != nullptr) Compare(*returns, out->value, where + " returns", diffs);
      if (const Json* result = op.Find("result")) Bind(*result, *out, diffs, where);
    }
    const Json* target = op.Find("target");
    if (const Json* after = op.Find("after"); after && target && target->is_string()) {
      CheckSnapshot(target->as_string(), *after, diffs, where);
    }
    if (const Json* others = op.Find("after_others"); others && others->is_object()) {
      for (const auto& [name, snap] : others->as_object()) CheckSnapshot(name, snap, diffs, where);
    }
  }
  return diffs;
}

}  // namespace kvstore::trace
