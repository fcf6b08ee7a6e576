// WriteLlamaState / SaveLlamaState: a ggsq v2 file byte for byte as
// llama.cpp's llama_state_seq_save_file lays it out.
#include <cstring>
#include <string>

#include "kvstore/llama_state.h"

namespace kvstore {
namespace {

// Small fields are gathered here and appended before each data block.
class FieldBuffer {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  Status FlushTo(WritableFile& out) {
    Status s = out.Append(std::as_bytes(std::span<const char>(bytes_.data(), bytes_.size())));
    bytes_.clear();
    return s;
  }

 private:
  std::string bytes_;
};

Status CheckShape(const LlamaState& state) {
  if (state.streams.empty()) return Status::InvalidArgument("llama.cpp state: no streams (n_stream must be >= 1)");
  if (state.streams.size() > kLlamaStateMaxStreams || state.tokens.size() > UINT32_MAX) {
    return Status::InvalidArgument("llama.cpp state: too many streams or tokens");
  }
  for (size_t s = 0; s < state.streams.size(); ++s) {
    const LlamaStateStream& st = state.streams[s];
    const std::string where = "llama.cpp state: stream " + std::to_string(s);
    if (st.positions.size() != st.seq_ids.size()) return Status::InvalidArgument(where + ": positions and seq_ids differ in length");
    if (st.cell_count() > UINT32_MAX) return Status::InvalidArgument(where + ": more than 2^32-1 cells");
    if (st.cell_count() > 0 && st.layers.empty()) return Status::InvalidArgument(where + ": cells without layers");
    for (const LlamaStateLayer& l : st.layers) {
      if (l.n_embd_k == 0 || l.n_embd_v == 0) return Status::InvalidArgument(where + ": a layer with an empty row");
    }
  }
  return Status::OK();
}

Status AppendData(WritableFile& out, const LlamaStateDataFn& data, size_t s, size_t l, bool value, uint64_t expect) {
  KV_ASSIGN_OR_RETURN(std::span<const std::byte> bytes, data(s, l, value));
  if (bytes.size() != expect) {
    return Status::InvalidArgument("llama.cpp state: stream " + std::to_string(s) + " layer " + std::to_string(l) +
                                   (value ? " V" : " K") + " data has " + std::to_string(bytes.size()) +
                                   " bytes, expected " + std::to_string(expect));
  }
  return out.Append(bytes);
}

Status WriteStream(WritableFile& out, FieldBuffer& f, const LlamaStateStream& st, size_t s,
                   const LlamaStateDataFn& data) {
  f.Put(static_cast<uint32_t>(st.cell_count()));
  if (st.cell_count() == 0) return Status::OK();
  for (size_t i = 0; i < st.cell_count(); ++i) {
    f.Put(st.positions[i]);
    f.Put(uint32_t{1});
    f.Put(st.seq_ids[i]);
  }
  f.Put(uint32_t{st.v_trans ? 1u : 0u});
  f.Put(static_cast<uint32_t>(st.layers.size()));
  for (size_t l = 0; l < st.layers.size(); ++l) {
    const LlamaStateLayer& layer = st.layers[l];
    f.Put(static_cast<int32_t>(layer.k_type));
    f.Put(uint64_t{layer.n_embd_k} * DTypeSize(GgmlTypeToDType(layer.k_type)));
    KV_RETURN_IF_ERROR(f.FlushTo(out));
    KV_RETURN_IF_ERROR(AppendData(out, data, s, l, false, LlamaState::KBytes(st, layer)));
  }
  for (size_t l = 0; l < st.layers.size(); ++l) {
    const LlamaStateLayer& layer = st.layers[l];
    const uint32_t es = static_cast<uint32_t>(DTypeSize(GgmlTypeToDType(layer.v_type)));
    f.Put(static_cast<int32_t>(layer.v_type));
    if (st.v_trans) {
      f.Put(es);
      f.Put(layer.n_embd_v);
    } else {
      f.Put(uint64_t{layer.n_embd_v} * es);
    }
    KV_RETURN_IF_ERROR(f.FlushTo(out));
    KV_RETURN_IF_ERROR(AppendData(out, data, s, l, true, LlamaState::VBytes(st, layer)));
  }
  return Status::OK();
}

}  // namespace

Status WriteLlamaState(WritableFile& out, const LlamaState& state, const LlamaStateDataFn& data) {
  KV_RETURN_IF_ERROR(CheckShape(state));
  FieldBuffer f;
  f.Put(kLlamaStateMagic);
  f.Put(kLlamaStateVersion);
  f.Put(static_cast<uint32_t>(state.tokens.size()));
  for (int32_t t : state.tokens) f.Put(t);
  f.Put(static_cast<uint32_t>(state.streams.size()));
  for (size_t s = 0; s < state.streams.size(); ++s) {
    KV_RETURN_IF_ERROR(WriteStream(out, f, state.streams[s], s, data));
  }
  return f.FlushTo(out);
}

Status SaveLlamaState(Env* env, const std::string& path, const LlamaState& state, const LlamaStateDataFn& data) {
  KV_RETURN_IF_ERROR(CheckShape(state));
  return WriteFileAtomic(env, path, [&](WritableFile& out) { return WriteLlamaState(out, state, data); });
}

}  // namespace kvstore
