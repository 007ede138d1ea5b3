// Keras configs of EinsumDense, RMSNormalization, UnitNormalization, Softmax and
// AdditiveAttention -> layers (registered at load time, as layer_configs_1d.cpp does).
#include "lockstep/nn/config.h"
#include "lockstep/nn/layers.h"

namespace lockstep {
namespace {

void no_constraints(KerasConfigReader& r, std::initializer_list<const char*> keys) {
  for (const char* k : keys) r.expect(k, {nullptr});
}

// An int, or a list of ints and nulls (Keras's None: -1).
std::vector<int64_t> dims_or_nulls(KerasConfigReader& r, const std::string& key) {
  const json& v = r.get(key);
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (!v.is_array()) r.fail(key, "must be an int or a list of ints and nulls, got " + v.dump());
  std::vector<int64_t> out;
  for (const json& d : v) {
    if (!d.is_null() && !d.is_number_integer())
      r.fail(key, "must be an int or a list of ints and nulls, got " + v.dump());
    out.push_back(d.is_null() ? -1 : d.get<int64_t>());
  }
  return out;
}

// An int axis or a list of them.
std::vector<int64_t> axes(KerasConfigReader& r, const std::string& key, int64_t fallback) {
  const json& v = r.get(key);
  if (v.is_null()) return {fallback};
  if (v.is_number_integer()) return {v.get<int64_t>()};
  std::vector<int64_t> out;
  if (v.is_array())
    for (const json& a : v) {
      if (!a.is_number_integer()) r.fail(key, "must be an int or a list of ints, got " + v.dump());
      out.push_back(a.get<int64_t>());
    }
  if (out.empty()) r.fail(key, "must be an int or a non-empty list of ints, got " + v.dump());
  return out;
}

LayerPtr einsum_dense(const json& c) {
  KerasConfigReader r("EinsumDense", c);
  layers::EinsumDenseOptions o{.name = r.name()};
  const std::string eq = r.get<std::string>("equation", "");
  if (eq.empty()) r.fail("equation", "is missing");
  const std::vector<int64_t> out = dims_or_nulls(r, "output_shape");
  o.activation = r.get<std::string>("activation", "linear");
  o.bias_axes = r.get<std::string>("bias_axes", "");
  o.kernel_initializer = r.initializer("kernel_initializer", "glorot_uniform");
  o.bias_initializer = r.initializer("bias_initializer", "zeros");
  o.kernel_regularizer_l2 = r.l2_regularizer("kernel_regularizer");
  o.bias_regularizer_l2 = r.l2_regularizer("bias_regularizer");
  no_constraints(r, {"activity_regularizer", "kernel_constraint", "bias_constraint",
                     "quantization_config", "lora_rank", "lora_alpha"});
  r.finish();
  return layers::EinsumDense(eq, out, o);
}

LayerPtr rms_norm(const json& c) {
  KerasConfigReader r("RMSNormalization", c);
  layers::RMSNormOptions o{.name = r.name()};
  const std::vector<int64_t> a = axes(r, "axis", -1);
  if (a.size() != 1) r.fail("axis", "lists several axes; Lockstep normalises the last one");
  o.axis = a[0];
  o.epsilon = r.get<double>("epsilon", 1e-6);
  r.finish();
  return layers::RMSNormalization(o);
}

LayerPtr unit_norm(const json& c) {
  KerasConfigReader r("UnitNormalization", c);
  const std::vector<int64_t> a = axes(r, "axis", -1);
  r.finish();
  return layers::UnitNormalization(a, r.name());
}

LayerPtr softmax(const json& c) {
  KerasConfigReader r("Softmax", c);
  const std::vector<int64_t> a = axes(r, "axis", -1);
  r.finish();
  return layers::Softmax(a, r.name());
}

LayerPtr additive_attention(const json& c) {
  KerasConfigReader r("AdditiveAttention", c);
  layers::AdditiveAttentionOptions o{.name = r.name()};
  o.use_scale = r.get<bool>("use_scale", true);
  o.dropout = r.get<double>("dropout", 0.0);
  o.seed = r.get<uint64_t>("seed", 0);
  r.expect("score_mode", {nullptr, "additive"});
  r.finish();
  return layers::AdditiveAttention(o);
}

bool register_einsum_layers() {
  register_layer("EinsumDense", einsum_dense);
  register_layer("RMSNormalization", rms_norm);
  register_layer("UnitNormalization", unit_norm);
  register_layer("Softmax", softmax);
  register_layer("AdditiveAttention", additive_attention);
  return true;
}

const bool registered = register_einsum_layers();

}  // namespace
}  // namespace lockstep
