// Dtype policies, Keras's way (keras.mixed_precision): a policy names the dtype a layer
// computes in and the dtype its variables are stored in. "float32" (the default) computes and
// stores in f32; "mixed_bfloat16" computes in bf16 (convolution, matmul, pooling, elementwise)
// and keeps variables, optimizer state, batch-norm statistics, softmax and the loss in f32.
// Layers read the global policy when they are created; a layer's own `dtype` overrides it.
#pragma once
#include <string>

#include "lockstep/core/dtype.h"

namespace lockstep::mixed_precision {

/// A dtype policy (keras.DTypePolicy): the dtype a layer computes in and the one it stores its
/// variables in.
struct DTypePolicy {
  std::string name = "float32";  ///< "float32", "mixed_bfloat16", "mixed_float16"
  DType compute = DType::f32;    ///< the layers' arithmetic
  DType variable = DType::f32;   ///< the weights' storage
  bool mixed() const { return compute != variable; }    ///< a mixed policy
  bool operator==(const DTypePolicy&) const = default;  ///< same name and dtypes
};

/// "float32", "mixed_bfloat16" or "mixed_float16" (the last needs a CPU with f16 arithmetic;
/// otherwise an error saying so). Throws lockstep::Error naming the valid policies.
DTypePolicy make_policy(const std::string& name);
///@{
/// keras.mixed_precision.set_global_policy: layers created from now on take this policy.
void set_global_policy(const std::string& name);
void set_global_policy(const DTypePolicy& policy);
///@}
/// The global policy (float32 unless set).
const DTypePolicy& global_policy();

/// Whether this CPU computes bf16 natively (AVX512-BF16 / AMX); otherwise bf16 still works,
/// through f32 arithmetic on bf16 storage.
bool cpu_has_bf16();
/// Whether this CPU has float16 arithmetic (AVX512-FP16); mixed_float16 needs it.
bool cpu_has_f16();

}  // namespace lockstep::mixed_precision
