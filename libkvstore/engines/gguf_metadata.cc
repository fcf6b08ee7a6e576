// ParseGgufMetadata: the header key/value pairs of a GGUF file, read as
// hostile bytes (every length is checked against what remains).
#include "libkvstore/engines/gguf_metadata.h"

#include <unordered_set>

#include "libkvstore/engines/byte_cursor.h"

namespace kvstore::engines {
namespace {

constexpr std::string_view kWhat = "GGUF";

enum GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// Bytes of a fixed-size element type; 0 for strings, arrays and unknown types.
uint64_t FixedSize(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

bool IsInteger(uint32_t type) { return type <= kI32 || type == kU64 || type == kI64; }

Result<std::string_view> ReadString(ByteCursor& c, const std::string& field) {
  KV_ASSIGN_OR_RETURN(uint64_t n, c.Read<uint64_t>(field + " length"));
  KV_ASSIGN_OR_RETURN(std::span<const std::byte> s, c.Take(n, field));
  return std::string_view(reinterpret_cast<const char*>(s.data()), s.size());
}

// One fixed-size scalar of `type` into `out`.
Status ReadScalar(ByteCursor& c, uint32_t type, const std::string& field, GgufValue& out) {
  switch (type) {
    case kU8: { KV_ASSIGN_OR_RETURN(uint8_t v, c.Read<uint8_t>(field)); out.i = v; break; }
    case kI8: { KV_ASSIGN_OR_RETURN(int8_t v, c.Read<int8_t>(field)); out.i = v; break; }
    case kU16: { KV_ASSIGN_OR_RETURN(uint16_t v, c.Read<uint16_t>(field)); out.i = v; break; }
    case kI16: { KV_ASSIGN_OR_RETURN(int16_t v, c.Read<int16_t>(field)); out.i = v; break; }
    case kU32: { KV_ASSIGN_OR_RETURN(uint32_t v, c.Read<uint32_t>(field)); out.i = v; break; }
    case kI32: { KV_ASSIGN_OR_RETURN(int32_t v, c.Read<int32_t>(field)); out.i = v; break; }
    case kI64: { KV_ASSIGN_OR_RETURN(out.i, c.Read<int64_t>(field)); break; }
    case kU64: {
      KV_ASSIGN_OR_RETURN(uint64_t v, c.Read<uint64_t>(field));
      if (v > static_cast<uint64_t>(INT64_MAX)) return c.Corrupt(field + " u64 value " + std::to_string(v) + " is out of range");
      out.i = static_cast<int64_t>(v);
      break;
    }
    case kF32: { KV_ASSIGN_OR_RETURN(float v, c.Read<float>(field)); out.kind = GgufValue::Kind::kFloat; out.f = v; break; }
    case kF64: { KV_ASSIGN_OR_RETURN(out.f, c.Read<double>(field)); out.kind = GgufValue::Kind::kFloat; break; }
    case kBool: {
      KV_ASSIGN_OR_RETURN(uint8_t v, c.Read<uint8_t>(field));
      if (v > 1) return c.Corrupt(field + " bool byte " + std::to_string(v) + " is not 0 or 1");
      out.kind = GgufValue::Kind::kBool;
      out.b = v == 1;
      break;
    }
    default: return c.Corrupt(field + " has unknown value type " + std::to_string(type));
  }
  return Status::OK();
}

Status ReadArray(ByteCursor& c, const std::string& field, GgufValue& out) {
  out.kind = GgufValue::Kind::kArray;
  KV_ASSIGN_OR_RETURN(out.array_type, c.Read<uint32_t>(field + " element type"));
  KV_ASSIGN_OR_RETURN(out.array_count, c.Read<uint64_t>(field + " count"));
  if (out.array_type == kArray) return c.Corrupt(field + " is an array of arrays");
  if (out.array_type == kString) {
    // Each string needs at least its 8-byte length.
    if (out.array_count > c.remaining() / 8) {
      return c.Corrupt(field + " count " + std::to_string(out.array_count) + " does not fit the remaining bytes");
    }
    for (uint64_t i = 0; i < out.array_count; ++i) {
      KV_RETURN_IF_ERROR(ReadString(c, field + "[" + std::to_string(i) + "]").status());
    }
    return Status::OK();
  }
  const uint64_t size = FixedSize(out.array_type);
  if (size == 0) return c.Corrupt(field + " has unknown element type " + std::to_string(out.array_type));
  if (out.array_count > c.remaining() / size) {
    return c.Corrupt(field + " count " + std::to_string(out.array_count) + " does not fit the remaining bytes");
  }
  if (!IsInteger(out.array_type) || out.array_count > kMaxKeptArray) {
    return c.Skip(out.array_count * size, field);
  }
  out.ints.reserve(out.array_count);
  for (uint64_t i = 0; i < out.array_count; ++i) {
    GgufValue v;
    KV_RETURN_IF_ERROR(ReadScalar(c, out.array_type, field, v));
    out.ints.push_back(v.i);
  }
  return Status::OK();
}

}  // namespace

const GgufValue* GgufMetadata::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

Result<std::optional<int64_t>> GgufMetadata::Int(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->kind == GgufValue::Kind::kInt) return std::optional<int64_t>(v->i);
  if (v->kind == GgufValue::Kind::kArray && IsInteger(v->array_type) && !v->ints.empty() &&
      v->ints.size() == v->array_count) {
    for (int64_t x : v->ints) {
      if (x != v->ints[0]) return Status::NotSupported("GGUF " + std::string(key) + ": per-layer values differ");
    }
    return std::optional<int64_t>(v->ints[0]);
  }
  return Status::InvalidArgument("GGUF " + std::string(key) + " is not an integer");
}

std::optional<std::string> GgufMetadata::String(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr || v->kind != GgufValue::Kind::kString) return std::nullopt;
  return v->s;
}

Result<GgufMetadata> ParseGgufMetadata(std::span<const std::byte> bytes) {
  ByteCursor c(bytes, kWhat);
  KV_ASSIGN_OR_RETURN(uint32_t magic, c.Read<uint32_t>("magic"));
  if (magic != kGgufMagic) return c.Corrupt("magic is not 'GGUF'");
  GgufMetadata out;
  KV_ASSIGN_OR_RETURN(out.version, c.Read<uint32_t>("version"));
  if (out.version == 1 || (out.version & 0xFFFF) == 0) {
    return c.Unsupported("version " + std::to_string(out.version) + " (GGUF v1 or a big-endian file)");
  }
  if (out.version > 3) return c.Unsupported("version " + std::to_string(out.version) + " (2 and 3 are read)");
  KV_RETURN_IF_ERROR(c.Skip(8, "n_tensors"));
  KV_ASSIGN_OR_RETURN(uint64_t n_kv, c.Read<uint64_t>("n_kv"));
  // Each entry needs at least an 8-byte key length, a 4-byte type and a 1-byte value.
  if (n_kv > c.remaining() / 13) {
    return c.Corrupt("n_kv " + std::to_string(n_kv) + " does not fit the remaining bytes");
  }
  std::unordered_set<std::string> seen;
  for (uint64_t e = 0; e < n_kv; ++e) {
    const std::string entry = "metadata entry " + std::to_string(e);
    KV_ASSIGN_OR_RETURN(uint64_t key_len, c.Read<uint64_t>(entry + " key length"));
    if (key_len == 0 || key_len > kMaxGgufKeyBytes) {
      return c.Corrupt(entry + " key length " + std::to_string(key_len) + " is not in 1.." + std::to_string(kMaxGgufKeyBytes));
    }
    KV_ASSIGN_OR_RETURN(std::span<const std::byte> key_bytes, c.Take(key_len, entry + " key"));
    std::string key(reinterpret_cast<const char*>(key_bytes.data()), key_bytes.size());
    if (!seen.insert(key).second) return c.Corrupt("duplicate key '" + key + "'");
    const std::string field = "key '" + key + "'";
    KV_ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>(field + " type"));
    GgufValue v;
    if (type == kString) {
      KV_ASSIGN_OR_RETURN(std::string_view s, ReadString(c, field));
      v.kind = GgufValue::Kind::kString;
      v.s = std::string(s);
    } else if (type == kArray) {
      KV_RETURN_IF_ERROR(ReadArray(c, field, v));
    } else {
      KV_RETURN_IF_ERROR(ReadScalar(c, type, field, v));
    }
    out.entries.emplace_back(std::move(key), std::move(v));
  }
  return out;
}

}  // namespace kvstore::engines
