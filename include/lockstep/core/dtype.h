// Element types. f32 and bf16 (mixed precision) are computed; the others are carried through
// shapes and storage (labels, images).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

/// A tensor's element type: float32, bfloat16, float16, int32, int64, uint8.
enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8 };

/// Bytes per element (4, 2, 2, 4, 8, 1).
size_t dtype_size(DType t);
/// Keras's name of the dtype: "float32", "bfloat16", "float16", "int32", "int64", "uint8".
const char* dtype_name(DType t);
/// The dtype named `name` (Keras's names, as dtype_name writes them); throws for another.
DType dtype_from_name(const std::string& name);

/// bfloat16: the top half of an IEEE f32 (8-bit exponent, 7-bit mantissa). Conversions round
/// to nearest even and keep NaN a NaN.
struct bf16 {
  uint16_t bits = 0;  ///< the value's bits: sign, 8 exponent bits, 7 mantissa bits
};
/// The float32 with the same value (exact).
inline float bf16_to_f32(bf16 v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
/// The nearest bfloat16 (ties to even; a NaN stays a quiet NaN).
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}
/// Bulk conversions (vectorised with AVX512-BF16 where the build targets it; OpenMP over n).
///@{
/// Bulk conversions (vectorised with AVX512-BF16 where the build targets it; OpenMP over n).
void bf16_to_f32(const bf16* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, bf16* dst, int64_t n);
///@}
/// Whether `t` is a floating-point type (f32, bf16, f16).
inline bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

/// The DType of the C++ element type T (float, bf16, int32_t, int64_t, uint8_t).
template <typename T>
constexpr DType dtype_of();
/// DType::f32.
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
/// DType::bf16.
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
/// DType::i32.
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
/// DType::i64.
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
/// DType::u8.
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

/// Where a tensor lives. CPU today; CUDA devices are named the same way (cuda:0).
enum class DeviceType : uint8_t { cpu, cuda };
/// A device: its type and index, e.g. cpu:0 (a group of cores, see MirroredStrategy) or cuda:1.
struct Device {
  DeviceType type = DeviceType::cpu;               ///< cpu or cuda
  int index = 0;                                   ///< K in "cpu:K"
  bool operator==(const Device&) const = default;  ///< same type and index
  std::string str() const;                         ///< "cpu:0", "cuda:1"
  static Device cpu() { return {}; }               ///< cpu:0
};

}  // namespace lockstep
