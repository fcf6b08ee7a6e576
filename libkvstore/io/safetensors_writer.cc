// Streaming safetensors writing: plan the header, then append each tensor's
// elements run by run (strided views included) without building the file
// in memory.
#include <algorithm>
#include <map>
#include <set>

#include "kvstore/json.h"
#include "kvstore/safetensors.h"
#include "libkvstore/util/json_text.h"

namespace kvstore {

Result<SafetensorsLayout> PlanSafetensors(std::span<const NamedArray> tensors,
                                          const Metadata& metadata,
                                          const SafetensorsWriteOptions& options) {
  std::vector<TensorInfo> specs;
  for (const NamedArray& t : tensors) {
    if (!t.array.defined()) {
      return Status::InvalidArgument("PlanSafetensors: tensor \"" + t.name + "\" is undefined");
    }
    specs.push_back(TensorInfo{t.name, t.array.dtype(), t.array.shape(), 0, 0});
  }
  return PlanSafetensors(std::span<const TensorInfo>(specs), metadata, options);
}

Result<SafetensorsLayout> PlanSafetensors(std::span<const TensorInfo> tensors, const Metadata& metadata,
                                          const SafetensorsWriteOptions& options) {
  const size_t align = options.alignment;
  if (align == 0 || (align & (align - 1)) != 0 || align > (1u << 20)) {
    return Status::InvalidArgument("PlanSafetensors: alignment " + std::to_string(align) +
                                   " is not a power of two up to 1 MiB");
  }
  std::set<std::string_view> names;
  for (const TensorInfo& t : tensors) {
    if (t.name.empty()) return Status::InvalidArgument("PlanSafetensors: empty tensor name");
    if (t.name == "__metadata__") {
      return Status::InvalidArgument("PlanSafetensors: \"__metadata__\" is not a tensor name");
    }
    if (!IsValidUtf8(t.name)) {
      return Status::InvalidArgument("PlanSafetensors: tensor name is not valid UTF-8");
    }
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("PlanSafetensors: duplicate tensor name \"" + t.name + "\"");
    }
  }
  std::set<std::string_view> keys;
  for (const auto& [k, v] : metadata) {
    if (!IsValidUtf8(k) || !IsValidUtf8(v)) {
      return Status::InvalidArgument("PlanSafetensors: metadata is not valid UTF-8");
    }
    if (!keys.insert(k).second) {
      return Status::InvalidArgument("PlanSafetensors: duplicate metadata key \"" + k + "\"");
    }
  }

  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [&](const TensorInfo* a, const TensorInfo* b) {
    if (options.data_order == SafetensorsWriteOptions::DataOrder::kAlignedBySize &&
        DTypeSize(a->dtype) != DTypeSize(b->dtype)) {
      return DTypeSize(a->dtype) > DTypeSize(b->dtype);
    }
    return a->name < b->name;
  });

  SafetensorsLayout layout;
  Json header = Json::MakeObject();
  uint64_t pos = 0;
  for (const TensorInfo* t : order) {
    TensorInfo info;
    info.name = t->name;
    info.dtype = t->dtype;
    info.shape = t->shape;
    info.begin = pos;
    info.end = pos + static_cast<uint64_t>(ShapeNumel(t->shape)) * DTypeSize(t->dtype);
    pos = info.end;
    Json entry = Json::MakeObject();
    entry["dtype"] = Json(std::string(DTypeName(info.dtype)));
    Json shape = Json::MakeArray();
    for (int64_t d : info.shape) shape.Push(Json(d));
    entry["shape"] = std::move(shape);
    Json offsets = Json::MakeArray();
    offsets.Push(Json(info.begin));
    offsets.Push(Json(info.end));
    entry["data_offsets"] = std::move(offsets);
    header.as_object().emplace_back(info.name, std::move(entry));
    layout.tensors.push_back(std::move(info));
  }
  layout.data_size = pos;
  if (!metadata.empty()) {
    Json meta = Json::MakeObject();
    for (const auto& [k, v] : metadata) meta.as_object().emplace_back(k, Json(v));
    header.as_object().emplace_back("__metadata__", std::move(meta));
  } else if (options.null_metadata_when_empty) {
    header.as_object().emplace_back("__metadata__", Json());
  }
  Json::DumpOptions dump;
  dump.sort_keys = true;
  std::string json = header.Dump(dump);
  const size_t unpadded = 8 + json.size();
  json.append((align - unpadded % align) % align, ' ');
  const uint64_t n = json.size();
  layout.header_bytes.resize(8);
  for (int i = 0; i < 8; ++i) layout.header_bytes[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  layout.header_bytes += json;
  return layout;
}

Status AppendArrayBytes(WritableFile& out, const Array& array) {
  Status status;
  array.ForEachRun([&](std::span<const std::byte> run) {
    if (status.ok()) status = out.Append(run);
  });
  return status;
}

Status WriteSafetensors(WritableFile& out, std::span<const NamedArray> tensors,
                        const Metadata& metadata, const SafetensorsWriteOptions& options) {
  KV_ASSIGN_OR_RETURN(SafetensorsLayout layout, PlanSafetensors(tensors, metadata, options));
  KV_RETURN_IF_ERROR(out.Append(std::as_bytes(std::span(layout.header_bytes))));
  std::map<std::string_view, const NamedArray*> by_name;
  for (const NamedArray& t : tensors) by_name[t.name] = &t;
  for (const TensorInfo& info : layout.tensors) {
    KV_RETURN_IF_ERROR(AppendArrayBytes(out, by_name.at(info.name)->array));
  }
  return Status::OK();
}

}  // namespace kvstore
