#include "lockstep/nn/mixed_precision.h"

#include "lockstep/core/error.h"

namespace lockstep::mixed_precision {
namespace {
DTypePolicy& global() {
  static DTypePolicy p;
  return p;
}
}  // namespace

bool cpu_has_bf16() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

bool cpu_has_f16() {
#if defined(__x86_64__) && \
    !(defined(__clang__) && __clang_major__ < 16)  // clang 14: no "avx512fp16"
  static const bool has = __builtin_cpu_supports("avx512fp16");
  return has;
#else
  return false;
#endif
}

DTypePolicy make_policy(const std::string& name) {
  if (name == "float32") return {"float32", DType::f32, DType::f32};
  if (name == "mixed_bfloat16") return {"mixed_bfloat16", DType::bf16, DType::f32};
  if (name == "mixed_float16") {
    if (!cpu_has_f16())
      throw Error(
          "dtype policy 'mixed_float16': this CPU has no float16 arithmetic (AVX512-FP16); "
          "f16 would run through f32 conversions at a loss, with loss scaling for nothing. "
          "Use 'mixed_bfloat16' (same speed-up where AVX512-BF16 exists, no loss scaling) "
          "or 'float32'.");
    throw Error(
        "dtype policy 'mixed_float16' is not implemented on the cpu backend yet; use "
        "'mixed_bfloat16' or 'float32'.");
  }
  throw Error("unknown dtype policy '" + name +
              "': expected 'float32', 'mixed_bfloat16' or 'mixed_float16'");
}

void set_global_policy(const std::string& name) { global() = make_policy(name); }
void set_global_policy(const DTypePolicy& policy) { global() = make_policy(policy.name); }
const DTypePolicy& global_policy() { return global(); }

}  // namespace lockstep::mixed_precision
