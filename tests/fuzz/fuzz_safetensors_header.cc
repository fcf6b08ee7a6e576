// ParseSafetensors must never crash on any bytes; a header it accepts must
// describe tensors that lie inside the file and can be viewed.
#include <cstdlib>
#include <memory>

#include "kvstore/safetensors.h"

namespace {
class BytesFile : public kvstore::ReadableFile {
 public:
  BytesFile(const uint8_t* data, size_t size)
      : ReadableFile("fuzz"), data_(reinterpret_cast<const std::byte*>(data), size) {}
  std::span<const std::byte> data() const override { return data_; }

 private:
  std::span<const std::byte> data_;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = std::make_shared<BytesFile>(data, size);
  auto parsed = kvstore::SafetensorsFile::FromReadable(file);
  if (!parsed.ok()) return 0;
  const kvstore::SafetensorsHeader& h = (*parsed)->header();
  for (const kvstore::TensorInfo& t : h.tensors) {
    if (h.data_offset() + t.end > size) std::abort();
    auto a = (*parsed)->Tensor(t);
    if (!a.ok() || a->nbytes() != t.nbytes()) std::abort();
    (void)a->ToBytes();
  }
  return 0;
}
