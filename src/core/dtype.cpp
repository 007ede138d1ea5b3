// DType and Device names.
#include "lockstep/core/dtype.h"

#include "lockstep/core/error.h"

namespace lockstep {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8})
    if (n == dtype_name(t)) return t;
  LS_FAIL("unknown dtype '", n, "' (expected float32, bfloat16, float16, int32, int64, uint8)");
}

std::string Device::str() const {
  return std::string(type == DeviceType::cpu ? "cpu:" : "cuda:") + std::to_string(index);
}

}  // namespace lockstep
