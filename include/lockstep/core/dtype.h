// Element types. f32 is computed today; the others are carried through shapes and storage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

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
