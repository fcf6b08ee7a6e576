// The DLPack exchange structures (the stable C ABI of the DLPack
// specification: the legacy 0.8 structures and the versioned 1.0 ones with
// their flags), declared here because Debian ships no dlpack header. Only
// what the bindings use: CPU tensors, "dltensor" and "dltensor_versioned"
// capsules.
#ifndef KVSTORE_PYTHON_DLPACK_H_
#define KVSTORE_PYTHON_DLPACK_H_

#include <cstdint>

namespace kvstore::python::dlpack {

inline constexpr int32_t kDLCPU = 1;
inline constexpr int32_t kDLCUDAHost = 3;  // pinned host memory, readable by the CPU

enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kComplex = 5, kBool = 6 };

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means row-major
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

inline constexpr const char* kCapsuleName = "dltensor";
inline constexpr const char* kUsedCapsuleName = "used_dltensor";

// DLPack >= 1.0: a versioned tensor whose flags can say "read-only".
struct PackVersion {
  uint32_t major;
  uint32_t minor;
};

struct ManagedTensorVersioned {
  PackVersion version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  Tensor dl_tensor;
};

inline constexpr uint64_t kFlagReadOnly = uint64_t{1} << 0;
inline constexpr uint64_t kFlagIsCopied = uint64_t{1} << 1;
inline constexpr PackVersion kVersion = {1, 0};
inline constexpr const char* kVersionedCapsuleName = "dltensor_versioned";

}  // namespace kvstore::python::dlpack

#endif  // KVSTORE_PYTHON_DLPACK_H_
