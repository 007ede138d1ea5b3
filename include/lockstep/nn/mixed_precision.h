// Dtype policies, Keras's way (keras.mixed_precision): a policy names the dtype a layer
// computes in and the dtype its variables are stored in. "float32" (the default) computes and
// stores in f32; "mixed_bfloat16" computes in bf16 (convolution, matmul, pooling, elementwise)
// and keeps variables, optimizer state, batch-norm statistics, softmax and the loss in f32.
// Layers read the global policy when they are created; a layer's own `dtype` overrides it.
#pragma once
#include <string>

#include "lockstep/core/dtype.h"

namespace lockstep::mixed_precision {

struct DTypePolicy {
  std::string name = "float32";
  DType compute = DType::f32;
  DType variable = DType::f32;
  bool mixed() const { return compute != variable; }
  bool operator==(const DTypePolicy&) const = default;
};

// "float32", "mixed_bfloat16" or "mixed_float16" (the last needs a CPU with f16 arithmetic;
// otherwise an error saying so). Throws lockstep::Error naming the valid policies.
DTypePolicy make_policy(const std::string& name);
void set_global_policy(const std::string& name);
void set_global_policy(const DTypePolicy& policy);
const DTypePolicy& global_policy();

// Whether this CPU computes bf16 natively (AVX512-BF16 / AMX); otherwise bf16 still works,
// through f32 arithmetic on bf16 storage.
bool cpu_has_bf16();
bool cpu_has_f16();

}  // namespace lockstep::mixed_precision
