// MLX affine quantization (mlx `mx.quantize` / `mx.dequantize`, mode "affine";
// `mlx/backend/cpu/quantized.cpp`). All arithmetic is float32, as in MLX's
// CPU kernel; the GPU rounding mode reproduces the Metal/CUDA kernels.
#include "kvstore/quantize.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kvstore/float16.h"
#include "libkvstore/util/parallel.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace kvstore {

bool IsSupportedQuantization(int bits, int group_size) {
  const bool bits_ok = bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
  const bool group_ok = group_size == 32 || group_size == 64 || group_size == 128;
  return bits_ok && group_ok;
}

namespace {

bool IsQuantizableFloat(DType d) { return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32; }

// Loads n elements of a dense F16/BF16/F32 row as float.
void LoadRow(DType dtype, const std::byte* src, float* dst, size_t n) {
  switch (dtype) {
    case DType::kF16: HalfToFloat(reinterpret_cast<const uint16_t*>(src), dst, n); break;
    case DType::kBF16: BFloat16ToFloat(reinterpret_cast<const uint16_t*>(src), dst, n); break;
    default: std::memcpy(dst, src, n * sizeof(float)); break;
  }
}

void StoreScalar(DType dtype, std::byte* dst, float v) {
  switch (dtype) {
    case DType::kF16: {
      uint16_t h = FloatToHalf(v);
      std::memcpy(dst, &h, 2);
      break;
    }
    case DType::kBF16: {
      uint16_t h = FloatToBFloat16(v);
      std::memcpy(dst, &h, 2);
      break;
    }
    default: std::memcpy(dst, &v, 4); break;
  }
}

float LoadScalar(DType dtype, const std::byte* src) {
  float v;
  LoadRow(dtype, src, &v, 1);
  return v;
}

// Rounds a float to the storage dtype and back (a no-op for F32).
float RoundTo(DType dtype, float v) {
  switch (dtype) {
    case DType::kF16: return HalfToFloat(FloatToHalf(v));
    case DType::kBF16: return BFloat16ToFloat(FloatToBFloat16(v));
    default: return v;
  }
}

// Quantizes one group of `gs` floats into codes; returns scale and bias.
template <bool kGpu>
void QuantizeGroup(const float* x, int gs, int bits, uint32_t* codes, float* scale_out,
                   float* bias_out) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  constexpr float kEps = 1e-7f;
  float hi = kGpu ? 0.0f : x[0];
  float lo = kGpu ? std::numeric_limits<float>::max() : x[0];
  for (int i = 0; i < gs; ++i) {
    hi = std::max(hi, x[i]);
    lo = std::min(lo, x[i]);
  }
  const bool neg_edge = std::fabs(lo) > std::fabs(hi);
  float s = std::max((hi - lo) / n_bins, kEps);
  if (!neg_edge) s = -s;
  const float edge = neg_edge ? lo : hi;
  const float q0 = kGpu ? std::round(edge / s) : std::nearbyint(edge / s);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    s = edge / q0;
    bias = edge;
  }
  for (int i = 0; i < gs; ++i) {
    float q = (x[i] - bias) / s;
    q = kGpu ? std::round(q) : std::nearbyint(q);
    q = kGpu ? std::min(q, n_bins) : std::min(std::max(q, 0.0f), n_bins);
    codes[i] = static_cast<uint32_t>(static_cast<int32_t>(q));
  }
  *scale_out = s;
  *bias_out = bias;
}

#if defined(__x86_64__)
// The CPU-rounding group kernel with AVX2: the same float32 operations as
// QuantizeGroup<false> (exact IEEE division, round-half-even), 8 lanes at a
// time, so the codes are bit-identical.
// With bits == 4 and `words` set, the codes are packed straight into words
// (8 codes per word) instead of being stored in `codes`.
__attribute__((target("avx2"))) void QuantizeGroupAvx2(const float* x, int gs, int bits,
                                                        uint32_t* codes, float* scale_out,
                                                        float* bias_out, uint32_t* words) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  __m256 vmax = _mm256_loadu_ps(x), vmin = vmax;
  for (int i = 8; i < gs; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vmax = _mm256_max_ps(vmax, v);
    vmin = _mm256_min_ps(vmin, v);
  }
  alignas(32) float hi8[8], lo8[8];
  _mm256_store_ps(hi8, vmax);
  _mm256_store_ps(lo8, vmin);
  float hi = hi8[0], lo = lo8[0];
  for (int i = 1; i < 8; ++i) {
    hi = std::max(hi, hi8[i]);
    lo = std::min(lo, lo8[i]);
  }
  const bool neg_edge = std::fabs(lo) > std::fabs(hi);
  float s = std::max((hi - lo) / n_bins, 1e-7f);
  if (!neg_edge) s = -s;
  const float edge = neg_edge ? lo : hi;
  const float q0 = std::nearbyint(edge / s);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    s = edge / q0;
    bias = edge;
  }
  const __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(bias);
  const __m256 vzero = _mm256_setzero_ps(), vn = _mm256_set1_ps(n_bins);
  const __m256i nibble_shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (int i = 0; i < gs; i += 8) {
    __m256 q = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vb), vs);
    q = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_min_ps(_mm256_max_ps(q, vzero), vn);
    const __m256i c = _mm256_cvtps_epi32(q);
    if (words != nullptr) {
      // OR the 8 shifted nibbles together: one little-endian word.
      const __m256i shifted = _mm256_sllv_epi32(c, nibble_shifts);
      __m128i w = _mm_or_si128(_mm256_castsi256_si128(shifted), _mm256_extracti128_si256(shifted, 1));
      w = _mm_or_si128(w, _mm_shuffle_epi32(w, 0x4E));
      w = _mm_or_si128(w, _mm_shuffle_epi32(w, 0xB1));
      words[i / 8] = static_cast<uint32_t>(_mm_cvtsi128_si32(w));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), c);
    }
  }
  *scale_out = s;
  *bias_out = bias;
}

__attribute__((target("avx2,f16c"))) void HalfRowAvx2(const std::byte* src, float* dst, size_t n) {
  const auto* h = reinterpret_cast<const uint16_t*>(src);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
  }
  for (; i < n; ++i) dst[i] = HalfToFloat(h[i]);
}

bool HasAvx2F16c() {
  // F16C is CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports lacks it).
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    return __builtin_cpu_supports("avx2") && (ecx & (1u << 29)) != 0;
  }();
  return has;
}
#else
bool HasAvx2F16c() { return false; }
#endif

// Packs `n` codes of `bits` bits into a little-endian bit stream of words.
void PackCodes(const uint32_t* codes, int n, int bits, uint32_t* words) {
  const uint32_t mask = (1u << bits) - 1;
  if (32 % bits == 0) {
    const int per_word = 32 / bits;
    for (int w = 0; w < n / per_word; ++w) {
      uint32_t word = 0;
      for (int k = 0; k < per_word; ++k) word |= (codes[w * per_word + k] & mask) << (k * bits);
      words[w] = word;
    }
    return;
  }
  uint64_t acc = 0;
  int filled = 0, out = 0;
  for (int k = 0; k < n; ++k) {
    acc |= static_cast<uint64_t>(codes[k] & mask) << filled;
    filled += bits;
    if (filled >= 32) {
      words[out++] = static_cast<uint32_t>(acc);
      acc >>= 32;
      filled -= 32;
    }
  }
  if (filled > 0) words[out] = static_cast<uint32_t>(acc);
}

void UnpackCodes(const uint32_t* words, int n, int bits, uint32_t* codes) {
  const uint32_t mask = (1u << bits) - 1;
  for (int k = 0; k < n; ++k) {
    const int bit = k * bits;
    const int w = bit / 32, shift = bit % 32;
    uint64_t v = words[w] >> shift;
    if (shift + bits > 32) v |= static_cast<uint64_t>(words[w + 1]) << (32 - shift);
    codes[k] = static_cast<uint32_t>(v) & mask;
  }
}

}  // namespace

Result<QuantizedArray> Quantize(const Array& w, const QuantizeOptions& options) {
  const int gs = options.group_size, bits = options.bits;
  if (!IsQuantizableFloat(w.dtype())) {
    return Status::InvalidArgument("quantize: only F16, BF16 and F32 can be quantized, got " +
                                   w.Describe());
  }
  if (w.ndim() < 2) {
    return Status::InvalidArgument("quantize: the input must have rank >= 2, got " + w.Describe());
  }
  if (gs <= 0 || w.dim(-1) % gs != 0) {
    return Status::InvalidArgument("quantize: the last dimension of " + w.Describe() +
                                   " is not divisible by group size " + std::to_string(gs));
  }
  if (!IsSupportedQuantization(bits, gs)) {
    return Status::InvalidArgument("quantize: unsupported bits " + std::to_string(bits) +
                                   " / group size " + std::to_string(gs) +
                                   " (bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128)");
  }
  const Array x = w.Contiguous();
  const int64_t d = x.dim(-1);
  const int64_t rows = x.numel() / std::max<int64_t>(d, 1);
  const int64_t groups_per_row = d / gs;
  const int64_t words_per_group = gs * bits / 32;
  Shape packed_shape = x.shape(), param_shape = x.shape();
  packed_shape.back() = groups_per_row * words_per_group;
  param_shape.back() = groups_per_row;
  QuantizedArray q{Array::Zeros(DType::kU32, packed_shape), Array::Zeros(x.dtype(), param_shape),
                   Array::Zeros(x.dtype(), param_shape)};
  const size_t item = x.itemsize();
  const int64_t total_groups = rows * groups_per_row;
  auto* packed = reinterpret_cast<uint32_t*>(q.packed.storage()->mutable_data());
  std::byte* scales = q.scales.storage()->mutable_data();
  std::byte* biases = q.biases.storage()->mutable_data();
  const bool gpu = options.rounding == QuantizeOptions::Rounding::kGpu;
  const bool fast = HasAvx2F16c();  // groups are multiples of 8 floats
  // Chunks of groups; each worker converts and quantizes independently.
  constexpr int64_t kGroupsPerChunk = 4096;
  const int64_t chunks = (total_groups + kGroupsPerChunk - 1) / kGroupsPerChunk;
  const int threads = total_groups * gs * static_cast<int64_t>(item) > (int64_t{4} << 20) ? 0 : 1;
  Status s = ParallelFor(static_cast<size_t>(chunks), threads, [&](size_t c) {
    std::vector<float> buf(static_cast<size_t>(gs));
    std::vector<uint32_t> codes(static_cast<size_t>(gs));
    const int64_t first = static_cast<int64_t>(c) * kGroupsPerChunk;
    const int64_t last = std::min(total_groups, first + kGroupsPerChunk);
    for (int64_t g = first; g < last; ++g) {
      const std::byte* row = x.data() + g * gs * item;
#if defined(__x86_64__)
      if (fast && x.dtype() == DType::kF16) {
        HalfRowAvx2(row, buf.data(), static_cast<size_t>(gs));
      } else {
        LoadRow(x.dtype(), row, buf.data(), static_cast<size_t>(gs));
      }
#else
      LoadRow(x.dtype(), row, buf.data(), static_cast<size_t>(gs));
#endif
      float scale, bias;
      if (gpu) {
        QuantizeGroup<true>(buf.data(), gs, bits, codes.data(), &scale, &bias);
      } else {
#if defined(__x86_64__)
        if (fast && bits == 4) {
          QuantizeGroupAvx2(buf.data(), gs, bits, codes.data(), &scale, &bias, packed + g * words_per_group);
          StoreScalar(x.dtype(), scales + g * item, scale);
          StoreScalar(x.dtype(), biases + g * item, bias);
          continue;
        }
        if (fast) {
          QuantizeGroupAvx2(buf.data(), gs, bits, codes.data(), &scale, &bias, nullptr);
        } else {
          QuantizeGroup<false>(buf.data(), gs, bits, codes.data(), &scale, &bias);
        }
#else
        QuantizeGroup<false>(buf.data(), gs, bits, codes.data(), &scale, &bias);
#endif
      }
      PackCodes(codes.data(), gs, bits, packed + g * words_per_group);
      StoreScalar(x.dtype(), scales + g * item, scale);
      StoreScalar(x.dtype(), biases + g * item, bias);
    }
    return Status::OK();
  });
  KV_RETURN_IF_ERROR(s);
  return q;
}

Result<Array> Dequantize(const QuantizedArray& q, int group_size, int bits,
                         std::optional<DType> dtype) {
  if (!q.packed.defined() || !q.scales.defined() || !q.biases.defined()) {
    return Status::InvalidArgument("dequantize: packed, scales and biases must be arrays");
  }
  if (q.packed.dtype() != DType::kU32) {
    return Status::InvalidArgument("dequantize: the packed matrix must be U32, got " +
                                   q.packed.Describe());
  }
  if (!IsSupportedQuantization(bits, group_size)) {
    return Status::InvalidArgument("dequantize: unsupported bits " + std::to_string(bits) +
                                   " / group size " + std::to_string(group_size));
  }
  if (q.packed.ndim() < 2 || q.scales.shape() != q.biases.shape() ||
      q.scales.ndim() != q.packed.ndim()) {
    return Status::InvalidArgument("dequantize: packed " + q.packed.Describe() + ", scales " +
                                   q.scales.Describe() + " and biases " + q.biases.Describe() +
                                   " do not match");
  }
  for (int a = 0; a + 1 < q.packed.ndim(); ++a) {
    if (q.packed.dim(a) != q.scales.dim(a)) {
      return Status::InvalidArgument("dequantize: leading dimensions of " + q.packed.Describe() +
                                     " and " + q.scales.Describe() + " differ");
    }
  }
  if (q.packed.dim(-1) * 32 / bits != q.scales.dim(-1) * group_size ||
      (q.packed.dim(-1) * 32) % bits != 0) {
    return Status::InvalidArgument("dequantize: shape of scales and biases " + q.scales.Describe() +
                                   " does not match " + q.packed.Describe() + " for group size " +
                                   std::to_string(group_size) + " and " + std::to_string(bits) +
                                   " bits");
  }
  const DType st = q.scales.dtype();
  if (!IsQuantizableFloat(st) || q.biases.dtype() != st) {
    return Status::InvalidArgument("dequantize: scales and biases must share a float dtype");
  }
  const DType out_dtype = dtype.value_or(st);
  if (!IsQuantizableFloat(out_dtype)) {
    return Status::InvalidArgument("dequantize: output dtype must be F16, BF16 or F32");
  }
  const Array packed = q.packed.Contiguous(), scales = q.scales.Contiguous(),
              biases = q.biases.Contiguous();
  Shape out_shape = packed.shape();
  out_shape.back() = scales.dim(-1) * group_size;
  Array out = Array::Zeros(out_dtype, out_shape);
  const int64_t total_groups = scales.numel();
  const int64_t words_per_group = group_size * bits / 32;
  const auto* words = packed.data_as<uint32_t>();
  std::byte* dst = out.storage()->mutable_data();
  const size_t st_size = DTypeSize(st), out_size = DTypeSize(out_dtype);
  std::vector<uint32_t> codes(static_cast<size_t>(group_size));
  for (int64_t g = 0; g < total_groups; ++g) {
    UnpackCodes(words + g * words_per_group, group_size, bits, codes.data());
    const float scale = LoadScalar(st, scales.data() + g * st_size);
    const float bias = LoadScalar(st, biases.data() + g * st_size);
    for (int i = 0; i < group_size; ++i) {
      // Two rounded ops in the scales' dtype, as MLX's fallback graph does.
      const float product = RoundTo(st, static_cast<float>(codes[i]) * scale);
      const float value = RoundTo(st, product + bias);
      StoreScalar(out_dtype, dst + (g * group_size + i) * out_size, value);
    }
  }
  return out;
}

}  // namespace kvstore
