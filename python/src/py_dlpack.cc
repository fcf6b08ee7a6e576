#include "python/src/py_dlpack.h"

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "python/src/dlpack.h"
#include "python/src/py_errors.h"
#include "python/src/py_strided.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

DType DTypeFromDLPack(const dlpack::DataType& t) {
  if (t.lanes != 1) ThrowStatus(Status::NotSupported("DLPack tensors with vector lanes are not supported"));
  switch (t.code) {
    case dlpack::kBool: return DType::kBool;
    case dlpack::kBfloat:
      if (t.bits == 16) return DType::kBF16;
      break;
    case dlpack::kFloat:
      if (t.bits == 16) return DType::kF16;
      if (t.bits == 32) return DType::kF32;
      if (t.bits == 64) return DType::kF64;
      break;
    case dlpack::kComplex:
      if (t.bits == 64) return DType::kC64;
      break;
    case dlpack::kInt:
    case dlpack::kUInt: {
      const bool u = t.code == dlpack::kUInt;
      if (t.bits == 8) return u ? DType::kU8 : DType::kI8;
      if (t.bits == 16) return u ? DType::kU16 : DType::kI16;
      if (t.bits == 32) return u ? DType::kU32 : DType::kI32;
      if (t.bits == 64) return u ? DType::kU64 : DType::kI64;
      break;
    }
    default: break;
  }
  ThrowInvalid("DLPack dtype code " + std::to_string(t.code) + " with " + std::to_string(t.bits) +
               " bits has no kvstore dtype");
}

dlpack::DataType DLPackType(DType dtype) {
  const uint8_t bits = static_cast<uint8_t>(DTypeSize(dtype) * 8);
  switch (dtype) {
    case DType::kBool: return {dlpack::kBool, 8, 1};
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64: return {dlpack::kInt, bits, 1};
    case DType::kF16:
    case DType::kF32:
    case DType::kF64: return {dlpack::kFloat, bits, 1};
    case DType::kBF16: return {dlpack::kBfloat, 16, 1};
    case DType::kC64: return {dlpack::kComplex, 64, 1};
    default: return {dlpack::kUInt, bits, 1};  // unsigned and the F8 types (as bytes)
  }
}

// What a capsule we export owns. `Managed` is the legacy or the versioned
// DLPack struct.
template <typename Managed>
struct ExportContext {
  Array array;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  Managed managed{};
};

template <typename Managed>
void DeleteExport(Managed* self) {
  delete static_cast<ExportContext<Managed>*>(self->manager_ctx);
}

// A fresh, writable, row-major copy of `array` (one pass over the bytes).
Array WritableCopy(const Array& array) {
  Array copy = Array::FromStorage(array.dtype(), array.shape(), Storage::AllocateUninitialized(array.nbytes()), 0);
  ThrowIfError(copy.CopyFrom(array));
  return copy;
}

template <typename Managed>
constexpr bool kVersioned = std::is_same_v<Managed, dlpack::ManagedTensorVersioned>;

template <typename Managed>
constexpr const char* CapsuleName() {
  return kVersioned<Managed> ? dlpack::kVersionedCapsuleName : dlpack::kCapsuleName;
}

template <typename Managed>
void DestroyCapsule(PyObject* capsule) {
  // Only an unconsumed capsule still owns its tensor (a consumer renames it).
  if (PyCapsule_IsValid(capsule, CapsuleName<Managed>())) {
    auto* m = static_cast<Managed*>(PyCapsule_GetPointer(capsule, CapsuleName<Managed>()));
    m->deleter(m);
  }
}

template <typename Managed>
py::capsule Export(const Array& array, uint64_t flags = 0) {
  auto ctx = std::make_unique<ExportContext<Managed>>();
  ctx->array = array;
  ctx->shape = array.shape();
  ctx->strides = array.strides();
  dlpack::Tensor& t = ctx->managed.dl_tensor;
  t.data = const_cast<std::byte*>(array.data());
  t.device = {dlpack::kDLCPU, 0};
  t.ndim = array.ndim();
  t.dtype = DLPackType(array.dtype());
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  if constexpr (kVersioned<Managed>) {
    ctx->managed.version = dlpack::kVersion;
    ctx->managed.flags = flags;
  }
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = DeleteExport<Managed>;
  Managed* managed = &ctx.release()->managed;
  return py::capsule(managed, CapsuleName<Managed>(), &DestroyCapsule<Managed>);
}

}  // namespace

Array FromDLPack(py::handle obj, std::optional<DType> as) {
  py::object capsule = obj.attr("__dlpack__")();
  auto* managed = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), dlpack::kCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  // The capsule is ours now: mark it used so its destructor does not free it.
  if (PyCapsule_SetName(capsule.ptr(), dlpack::kUsedCapsuleName) != 0) throw py::error_already_set();
  std::shared_ptr<dlpack::ManagedTensor> owner(managed, [](dlpack::ManagedTensor* t) {
    if (t->deleter != nullptr) {
      py::gil_scoped_acquire gil;
      t->deleter(t);
    }
  });
  const dlpack::Tensor& t = managed->dl_tensor;
  if (t.device.device_type != dlpack::kDLCPU && t.device.device_type != dlpack::kDLCUDAHost) {
    ThrowStatus(Status::NotSupported("DLPack tensor on device type " + std::to_string(t.device.device_type) +
                                     ": only CPU memory can be read; copy it to the CPU first"));
  }
  DType dtype = DTypeFromDLPack(t.dtype);
  if (as) {
    if (DTypeSize(*as) != DTypeSize(dtype)) ThrowInvalid("cannot reinterpret DLPack " + std::string(DTypeName(dtype)) + " as " + std::string(DTypeName(*as)));
    dtype = *as;
  }
  if (t.ndim < 0) ThrowInvalid("DLPack tensor with negative ndim");
  Shape shape(t.shape, t.shape + t.ndim);
  std::vector<int64_t> byte_strides(static_cast<size_t>(t.ndim));
  const Strides row_major = RowMajorStrides(shape);
  for (int i = 0; i < t.ndim; ++i) {
    byte_strides[i] = (t.strides != nullptr ? t.strides[i] : row_major[i]) * static_cast<int64_t>(DTypeSize(dtype));
  }
  const auto* data = static_cast<const std::byte*>(t.data) + t.byte_offset;
  return WrapForeign(dtype, shape, data, byte_strides, owner);
}

py::capsule ToDLPack(const Array& array, const DLPackRequest& request) {
  const bool copy = request.copy.value_or(!request.versioned);
  if (!copy && !request.versioned) {
    PyErr_SetString(PyExc_BufferError,
                    "kvstore.Tensor.__dlpack__(copy=False): the tensor is read-only (it may map a file) and a "
                    "consumer without DLPack 1.0 (max_version >= (1, 0)) cannot be told so; pass copy=True or "
                    "read it through the buffer protocol (np.asarray, memoryview), which is read-only");
    throw py::error_already_set();
  }
  if (copy) {
    const Array fresh = WritableCopy(array);
    if (!request.versioned) return Export<dlpack::ManagedTensor>(fresh);
    return Export<dlpack::ManagedTensorVersioned>(fresh, dlpack::kFlagIsCopied);
  }
  return Export<dlpack::ManagedTensorVersioned>(array, dlpack::kFlagReadOnly);
}

py::capsule ToDLPackView(const Array& array) {
  return Export<dlpack::ManagedTensor>(array);
}

}  // namespace kvstore::python
