// The two mlx-lm layouts of ArraysCache (and MambaCache) layers
// (docs/format.md §5.2, docs/compat.md): mlx-lm 0.31.x and earlier store the
// flat slot list ("i.k"); mlx-lm since 2026-08 stores [slots, left_padding,
// lengths] ("i.0.k", "i.1", "i.2"). Read: both become the current shape.
// Write: the layout the caller targets.
#include "kvstore/cache_list.h"
#include "libkvstore/format/layout.h"

namespace kvstore {
namespace {

bool IsArraysClass(std::string_view c) { return c == "ArraysCache" || c == "MambaCache"; }

void Normalize(const std::string& cls, const MetaState& meta, TensorTree& state, ArraysCacheForms& forms) {
  if (IsArraysClass(cls)) {
    if (!state.items.empty() && state.items[0].kind == TensorTree::Kind::kTensor) {
      state = ArraysStateFromSlots(std::move(state));
      forms.release = true;
    } else if (!state.items.empty()) {
      forms.current = true;
    }
    return;
  }
  if (cls != "CacheList" || !meta.is_list() || meta.size() != 2 || !meta[0].is_list() || !meta[1].is_list()) return;
  for (size_t c = 0; c < meta[0].size() && c < meta[1].size() && c < state.items.size(); ++c) {
    if (meta[0][c].is_string()) Normalize(meta[0][c].str(), meta[1][c], state.items[c], forms);
  }
}

// Neither mlx-lm layout knows MambaCache: it is saved as the ArraysCache it is.
std::string MlxLmClassName(const Cache& cache) {
  return cache.class_name() == "MambaCache" ? "ArraysCache" : std::string(cache.class_name());
}

}  // namespace

TensorTree ArraysStateFromSlots(TensorTree slots) {
  // mlx-lm's None padding: an empty F32 array.
  return TensorTree{TensorTree::Kind::kList, 0, Array(),
                    {std::move(slots), TensorTree::Value(Array::Zeros(DType::kF32, {0})),
                     TensorTree::Value(Array::Zeros(DType::kF32, {0}))}};
}

ArraysCacheForms NormalizeArraysCaches(ParsedLayer& layer) {
  ArraysCacheForms forms;
  Normalize(layer.class_name, layer.meta, layer.state, forms);
  return forms;
}

Result<CacheState> MlxLmState(const Cache& cache, PromptCacheLayout layout) {
  if (cache.class_name() == "CacheList") {
    const auto& list = static_cast<const CacheList&>(cache);
    CacheState::List children;
    for (size_t i = 0; i < list.num_children(); ++i) {
      Result<CacheState> child = MlxLmState(*list.child(i), layout);
      if (!child.ok()) return child.status().WithPrefix("CacheList child " + std::to_string(i));
      children.push_back(std::move(child).value());
    }
    return CacheState(std::move(children));
  }
  KV_ASSIGN_OR_RETURN(CacheState state, cache.State());
  if (!IsArraysClass(cache.class_name()) || layout != PromptCacheLayout::kMlxLm031) return state;
  // [slots, left_padding, lengths] -> slots: the release stores nothing else.
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (state[i].array().numel() != 0) {
      return Status::NotSupported(std::string(i == 1 ? "ArraysCache left_padding " : "ArraysCache lengths ") +
                                     state[i].array().Describe() +
                                     " cannot be stored in mlx-lm 0.31's layout, which holds only the slots "
                                     "(save for mlx-lm, the current layout)");
    }
  }
  return state[0];
}

MetaState MlxLmMeta(const Cache& cache) {
  if (cache.class_name() != "CacheList") return cache.meta_state();
  const auto& list = static_cast<const CacheList&>(cache);
  MetaState::List names, metas;
  for (size_t i = 0; i < list.num_children(); ++i) {
    names.emplace_back(MlxLmClassName(*list.child(i)));
    metas.push_back(MlxLmMeta(*list.child(i)));
  }
  return MetaState({MetaState(std::move(names)), MetaState(std::move(metas))});
}

Result<FlatLayer> FlattenLayerMlxLm(const Cache& cache, size_t index, PromptCacheLayout layout) {
  const std::string i = std::to_string(index);
  Result<CacheState> state = MlxLmState(cache, layout);
  if (!state.ok()) {
    // What the layout cannot hold stays NotSupported; a state mlx-lm cannot
    // save at all (an empty KVCache) is the caller's.
    const StatusCode code = state.status().IsNotSupported() ? StatusCode::kNotSupported : StatusCode::kInvalidArgument;
    return Status(code, "layer " + i + " (" + std::string(cache.class_name()) + ") cannot be saved: " +
                            std::string(state.status().message()));
  }
  const MetaState meta = MlxLmMeta(cache);
  if (cache.class_name() == "ChunkedKVCache" && meta.is_list() && meta.size() > 0 && meta[0].is_string() &&
      meta[0].str() == "None") {
    return Status::InvalidArgument("layer " + i + " (ChunkedKVCache) has chunk size None, which mlx-lm cannot load");
  }
  FlatLayer out;
  KV_RETURN_IF_ERROR(FlattenState(*state, i, out.tensors).WithPrefix("layer " + i));
  FlattenMeta(meta, "0." + i, out.metadata);
  out.metadata.emplace_back("2." + i, MlxLmClassName(cache));
  return out;
}

}  // namespace kvstore
