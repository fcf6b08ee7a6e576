// Strict safetensors parsing: every rule of docs/format.md §3 has its own
// check and message, numbered like the document (H = header framing,
// J = header JSON, M = metadata, T = tensor entries, D = data section).
#include <algorithm>
#include <cstring>

#include "kvstore/json.h"
#include "kvstore/safetensors.h"
#include "libkvstore/util/json_text.h"

namespace kvstore {
namespace {

Status Rule(std::string_view rule, std::string_view message) {
  return Status::Corruption("safetensors " + std::string(rule) + ": " + std::string(message));
}

std::string Quoted(std::string_view name) {
  std::string out;
  AppendJsonString(out, name);
  return out;
}

uint64_t ReadU64LE(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

Result<uint64_t> NonNegativeInt(const Json& j) {
  if (j.type() == Json::Type::kInt && j.as_int() >= 0) return static_cast<uint64_t>(j.as_int());
  if (j.type() == Json::Type::kUint) return j.as_uint();
  return Status::InvalidArgument("not a non-negative integer");
}

Status ParseMetadata(const Json& value, SafetensorsHeader& header) {
  if (value.is_null()) {
    header.metadata_form = SafetensorsHeader::MetadataForm::kNull;
    return Status::OK();
  }
  if (!value.is_object()) return Rule("M1", "__metadata__ is neither an object nor null");
  header.metadata_form = SafetensorsHeader::MetadataForm::kObject;
  for (const auto& [key, v] : value.as_object()) {
    if (!v.is_string()) {
      return Rule("M2", "__metadata__ value of " + Quoted(key) + " is not a string");
    }
    header.metadata.emplace_back(key, v.as_string());
  }
  return Status::OK();
}

Status ParseTensor(const std::string& name, const Json& entry, const ParseLimits& limits,
                   TensorInfo& info) {
  info.name = name;
  const std::string who = "tensor " + Quoted(name);
  if (!entry.is_object()) return Rule("T1", who + " is not an object");
  const Json* dtype = entry.Find("dtype");
  const Json* shape = entry.Find("shape");
  const Json* offsets = entry.Find("data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr || entry.size() != 3) {
    return Rule("T1", who + " must have exactly the keys dtype, shape and data_offsets");
  }
  if (!dtype->is_string()) return Rule("T2", who + " dtype is not a string");
  std::optional<DType> parsed = ParseDType(dtype->as_string());
  if (!parsed) return Rule("T2", who + " has unknown dtype " + Quoted(dtype->as_string()));
  info.dtype = *parsed;
  if (!shape->is_array()) return Rule("T3", who + " shape is not a list");
  if (shape->size() > limits.max_rank) {
    return Rule("T3", who + " has rank " + std::to_string(shape->size()) + " above the limit " +
                          std::to_string(limits.max_rank));
  }
  uint64_t numel = 1;
  for (const Json& d : shape->as_array()) {
    Result<uint64_t> dim = NonNegativeInt(d);
    if (!dim.ok() || *dim > static_cast<uint64_t>(INT64_MAX)) {
      return Rule("T3", who + " shape has a dimension that is not a non-negative integer");
    }
    info.shape.push_back(static_cast<int64_t>(*dim));
    if (__builtin_mul_overflow(numel, *dim, &numel)) {
      return Rule("T4", who + " shape " + ShapeToString(info.shape) + " overflows");
    }
  }
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, DTypeSize(info.dtype), &nbytes) ||
      numel > static_cast<uint64_t>(INT64_MAX)) {
    return Rule("T4", who + " byte size overflows");
  }
  if (!offsets->is_array() || offsets->size() != 2) {
    return Rule("T5", who + " data_offsets is not a list of two integers");
  }
  Result<uint64_t> begin = NonNegativeInt(offsets->as_array()[0]);
  Result<uint64_t> end = NonNegativeInt(offsets->as_array()[1]);
  if (!begin.ok() || !end.ok()) {
    return Rule("T5", who + " data_offsets is not a list of two non-negative integers");
  }
  if (*end < *begin) return Rule("T5", who + " data_offsets end is before begin");
  info.begin = *begin;
  info.end = *end;
  if (*end - *begin != nbytes) {
    return Rule("T6", who + " covers " + std::to_string(*end - *begin) + " bytes but " +
                          std::string(DTypeName(info.dtype)) + ShapeToString(info.shape) +
                          " needs " + std::to_string(nbytes));
  }
  return Status::OK();
}

// D1-D3: sorted by offset, the tensors tile [0, data_size) exactly.
Status CheckTiling(const SafetensorsHeader& header) {
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : header.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  for (const TensorInfo* t : order) {
    if (t->begin < pos) {
      return Rule("D1", "tensor " + Quoted(t->name) + " overlaps the previous tensor (begins at " +
                            std::to_string(t->begin) + ", previous ends at " +
                            std::to_string(pos) + ")");
    }
    if (t->begin > pos) {
      return Rule("D2", "gap of " + std::to_string(t->begin - pos) + " bytes before tensor " +
                            Quoted(t->name));
    }
    pos = t->end;
  }
  if (pos > header.data_size) {
    return Rule("D3", "tensors need " + std::to_string(pos) + " data bytes but the file has " +
                          std::to_string(header.data_size));
  }
  if (pos < header.data_size) {
    return Rule("D3", std::to_string(header.data_size - pos) +
                          " trailing bytes after the last tensor");
  }
  return Status::OK();
}

}  // namespace

Result<uint64_t> ParseSafetensorsHeaderSize(std::span<const std::byte> prefix, uint64_t file_size,
                                            const ParseLimits& limits) {
  if (file_size < 8 || prefix.size() < 8) {
    return Rule("H1", "file of " + std::to_string(file_size) +
                          " bytes is too short for the 8-byte header length");
  }
  const uint64_t n = ReadU64LE(prefix.data());
  if (n > limits.max_header_size) {
    return Status::ResourceExhausted("safetensors H2: header length " + std::to_string(n) +
                                     " exceeds the limit of " +
                                     std::to_string(limits.max_header_size) + " bytes");
  }
  if (n > file_size - 8) {
    return Rule("H3", "header length " + std::to_string(n) + " runs past the end of the " +
                          std::to_string(file_size) + "-byte file");
  }
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> prefix,
                                                 uint64_t file_size, const ParseLimits& limits) {
  KV_ASSIGN_OR_RETURN(uint64_t n, ParseSafetensorsHeaderSize(prefix, file_size, limits));
  if (prefix.size() < 8 + n) {
    return Status::InvalidArgument("ParseSafetensorsHeader: prefix holds fewer than 8 + N bytes");
  }
  SafetensorsHeader header;
  header.header_size = n;
  header.data_size = file_size - 8 - n;
  std::string_view text(reinterpret_cast<const char*>(prefix.data() + 8), n);
  if (text.empty() || text.front() != '{') return Rule("J1", "header does not start with '{'");
  Result<Json> json = Json::Parse(text);
  if (!json.ok()) return Rule("J2", "header is not valid JSON: " + std::string(json.status().message()));
  if (!json->is_object()) return Rule("J1", "header is not a JSON object");
  bool seen_metadata = false;
  for (const auto& [key, value] : json->as_object()) {
    if (key == "__metadata__") {
      seen_metadata = true;
      KV_RETURN_IF_ERROR(ParseMetadata(value, header));
      continue;
    }
    TensorInfo info;
    KV_RETURN_IF_ERROR(ParseTensor(key, value, limits, info));
    header.tensors.push_back(std::move(info));
  }
  if (!seen_metadata) header.metadata_form = SafetensorsHeader::MetadataForm::kAbsent;
  KV_RETURN_IF_ERROR(CheckTiling(header));
  return header;
}

const TensorInfo* SafetensorsHeader::FindTensor(std::string_view name) const {
  for (const TensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<std::string_view> SafetensorsHeader::FindMetadata(std::string_view key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return std::string_view(v);
  }
  return std::nullopt;
}

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(std::shared_ptr<const ReadableFile> file, SafetensorsHeader header)
    : file_(std::move(file)), storage_(file_->AsStorage()), header_(std::move(header)) {}

Result<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(Env* env,
                                                                     const std::string& path,
                                                                     const ParseLimits& limits) {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<const ReadableFile> file, env->OpenReadable(path));
  Result<std::shared_ptr<const SafetensorsFile>> r = FromReadable(std::move(file), limits);
  if (!r.ok()) return r.status().WithPrefix(path);
  return r;
}

Result<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::FromReadable(
    std::shared_ptr<const ReadableFile> file, const ParseLimits& limits) {
  KV_ASSIGN_OR_RETURN(SafetensorsHeader header,
                      ParseSafetensorsHeader(file->data(), file->size(), limits));
  return std::shared_ptr<const SafetensorsFile>(
      new SafetensorsFile(std::move(file), std::move(header)));
}

std::span<const std::byte> SafetensorsFile::TensorBytes(const TensorInfo& info) const {
  return file_->data().subspan(header_.data_offset() + info.begin, info.nbytes());
}

Result<Array> SafetensorsFile::Tensor(std::string_view name) const {
  const TensorInfo* info = header_.FindTensor(name);
  if (info == nullptr) return Status::NotFound("no tensor " + Quoted(name) + " in " + file_->path());
  return Tensor(*info);
}

Result<Array> SafetensorsFile::Tensor(const TensorInfo& info) const {
  const uint64_t offset = header_.data_offset() + info.begin;
  const std::byte* p = file_->data().data() + offset;
  if (reinterpret_cast<uintptr_t>(p) % DTypeSize(info.dtype) == 0) {
    return Array::FromStorage(info.dtype, info.shape, storage_, offset);
  }
  // Unaligned in the file (possible with MLX's unpadded layout): copy once.
  return Array::FromBytes(info.dtype, info.shape, TensorBytes(info));
}

}  // namespace kvstore
