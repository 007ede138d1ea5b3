// Element types. f32 and bf16 (mixed precision) are computed; the others are carried through
// shapes and storage (labels, images).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);

// bfloat16: the top half of an IEEE f32 (8-bit exponent, 7-bit mantissa). Conversions round
// to nearest even and keep NaN a NaN.
struct bf16 {
  uint16_t bits = 0;
};
inline float bf16_to_f32(bf16 v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}
// Bulk conversions (vectorised with AVX512-BF16 where the build targets it; OpenMP over n).
void bf16_to_f32(const bf16* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, bf16* dst, int64_t n);
inline bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

// Where a tensor lives. CPU today; CUDA devices are named the same way (cuda:0).
enum class DeviceType : uint8_t { cpu, cuda };
struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;
  static Device cpu() { return {}; }
};

}  // namespace lockstep
