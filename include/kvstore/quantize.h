// MLX affine quantization (mx.quantize / mx.dequantize, mode "affine").
//
// For w of shape [..., D] with D % group_size == 0, Quantize returns
//   packed [..., D*bits/32] U32   (little-endian bit stream of the codes)
//   scales [..., D/group_size]    (w's dtype)
//   biases [..., D/group_size]    (w's dtype)
// and Dequantize computes (code * scale) + bias in the scales' dtype.
// Supported: bits 2, 3, 4, 5, 6, 8; group_size 32, 64, 128; F32/F16/BF16.
//
// Rounding::kCpu is bit-exact with MLX's CPU backend (per-group min/max,
// round half to even). Rounding::kGpu reproduces the Metal/CUDA kernels
// (running max starts at 0, round half away from zero, clamp above only),
// which is what files quantized on a Mac contain. See docs/compat.md.
//
// Thread safety: pure functions. Both use all cores for large inputs.
#ifndef KVSTORE_QUANTIZE_H_
#define KVSTORE_QUANTIZE_H_

#include <optional>

#include "kvstore/array.h"
#include "kvstore/dtype.h"
#include "kvstore/status.h"

namespace kvstore {

struct QuantizedArray {
  Array packed;  // U32
  Array scales;
  Array biases;
};

struct QuantizeOptions {
  int group_size = 64;
  int bits = 4;
  enum class Rounding { kCpu, kGpu };
  Rounding rounding = Rounding::kCpu;
};

// InvalidArgument for an unsupported bits/group size/dtype, rank < 1 (MLX
// requires rank >= 2; so do we), or a last dimension not divisible by
// group_size.
Result<QuantizedArray> Quantize(const Array& w, const QuantizeOptions& options);

// InvalidArgument when packed is not U32, ranks/leading dims disagree, or
// packed.dim(-1)*32/bits != scales.dim(-1)*group_size. `dtype` defaults to
// the scales' dtype.
Result<Array> Dequantize(const QuantizedArray& q, int group_size, int bits,
                         std::optional<DType> dtype = std::nullopt);

// True for the (bits, group_size) pairs MLX's affine mode accepts.
bool IsSupportedQuantization(int bits, int group_size);

}  // namespace kvstore

#endif  // KVSTORE_QUANTIZE_H_
