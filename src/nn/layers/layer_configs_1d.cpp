// Factories from Keras layer configs for the 1D layers of lockstep/nn/layers_1d.h (registered
// with lockstep/nn/config.h's registry when the library loads, beside layer_configs.cpp's).
// Every key Keras writes is read; a value Lockstep cannot represent is an error naming the
// layer and the key.
#include "lockstep/nn/config.h"
#include "lockstep/nn/layers_1d.h"
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

const json kChannelsLast = "channels_last";

// One int from an int or a one-element list (Keras writes kernel_size (3,) as [3]).
int64_t one_int(KerasConfigReader& r, const std::string& key, int64_t fallback) {
  const std::vector<int64_t> v = r.ints(key, {fallback});
  if (v.size() != 1) r.fail(key, "must be one int for a 1D layer, got " + json(v).dump());
  return v[0];
}

std::string activation(KerasConfigReader& r) {
  const json& a = r.get("activation");
  if (a.is_null()) return "linear";
  std::string s;
  if (a.is_string()) {
    s = a.get<std::string>();
  } else if (a.is_object() && a.contains("config") && a["config"].is_object() &&
             a["config"].contains("name") && a["config"]["name"].is_string()) {
    s = a["config"]["name"].get<std::string>();
  }
  if (!layer_util::is_activation(s))
    r.fail("activation", "is " + a.dump() + "; Lockstep knows " + layer_util::activation_names());
  return s;
}

LayerPtr conv1d(const json& c) {
  KerasConfigReader r("Conv1D", c);
  layers::Conv1DOptions o{.name = r.name()};
  const int64_t filters = r.get<int64_t>("filters", 0);
  const int64_t k = one_int(r, "kernel_size", 0);
  o.strides = one_int(r, "strides", 1);
  o.padding = r.get<std::string>("padding", "valid");
  r.expect("data_format", {kChannelsLast});
  o.dilation_rate = one_int(r, "dilation_rate", 1);
  o.groups = r.get<int64_t>("groups", 1);
  o.activation = activation(r);
  o.use_bias = r.get<bool>("use_bias", true);
  o.kernel_initializer = r.initializer("kernel_initializer", "glorot_uniform");
  o.bias_initializer = r.initializer("bias_initializer", "zeros");
  o.kernel_regularizer_l2 = r.l2_regularizer("kernel_regularizer");
  o.bias_regularizer_l2 = r.l2_regularizer("bias_regularizer");
  for (const char* key :
       {"activity_regularizer", "kernel_constraint", "bias_constraint", "lora_rank", "lora_alpha"})
    r.expect(key, {});
  r.finish();
  return layers::Conv1D(filters, k, o);
}

LayerPtr pooling1d(const std::string& cls, const json& c) {
  KerasConfigReader r(cls, c);
  r.expect("data_format", {kChannelsLast});
  if (cls.rfind("Global", 0) == 0) {
    const bool keepdims = r.get<bool>("keepdims", false);
    r.finish();
    return cls == "GlobalAveragePooling1D" ? layers::GlobalAveragePooling1D(keepdims, r.name())
                                           : layers::GlobalMaxPooling1D(keepdims, r.name());
  }
  layers::Pool1DOptions o{.name = r.name()};
  const int64_t pool = one_int(r, "pool_size", 2);
  o.strides = r.get("strides").is_null() ? 0 : one_int(r, "strides", 0);
  o.padding = r.get<std::string>("padding", "valid");
  r.finish();
  return cls == "MaxPooling1D" ? layers::MaxPooling1D(pool, o) : layers::AveragePooling1D(pool, o);
}

// The wrapped layer of a TimeDistributed: {"class_name", "config", ...} as Keras serialises it.
LayerPtr wrapped_layer(KerasConfigReader& r) {
  const json& l = r.get("layer");
  if (!l.is_object() || !l.contains("class_name") || !l.contains("config"))
    r.fail("layer",
           "must be a serialised layer {\"class_name\": ..., \"config\": {...}}, got " + l.dump());
  return layer_from_config(l);
}

LayerPtr sequence_layer(const std::string& cls, const json& c) {
  KerasConfigReader r(cls, c);
  LayerPtr l;
  if (cls == "UpSampling1D") {
    l = layers::UpSampling1D(r.get<int64_t>("size", 2), r.name());
  } else if (cls == "ZeroPadding1D") {
    r.expect("data_format", {kChannelsLast});
    l = layers::ZeroPadding1D(r.ints("padding", {1}), r.name());
  } else if (cls == "Cropping1D") {
    l = layers::Cropping1D(r.ints("cropping", {1, 1}), r.name());
  } else if (cls == "SpatialDropout1D") {
    l = layers::SpatialDropout1D(r.get<double>("rate", 0.0), r.get<uint64_t>("seed", 0), r.name());
  } else if (cls == "RepeatVector") {
    l = layers::RepeatVector(r.get<int64_t>("n", 0), r.name());
  } else if (cls == "Permute") {
    l = layers::Permute(r.ints("dims", {}), r.name());
  } else {
    l = layers::TimeDistributed(wrapped_layer(r), r.name());
  }
  r.finish();
  return l;
}

bool register_1d_layers() {
  register_layer("Conv1D", conv1d);
  for (std::string cls :
       {"MaxPooling1D", "AveragePooling1D", "GlobalAveragePooling1D", "GlobalMaxPooling1D"})
    register_layer(cls, [cls](const json& c) { return pooling1d(cls, c); });
  for (std::string cls : {"UpSampling1D", "ZeroPadding1D", "Cropping1D", "SpatialDropout1D",
                          "RepeatVector", "Permute", "TimeDistributed"})
    register_layer(cls, [cls](const json& c) { return sequence_layer(cls, c); });
  return true;
}

const bool registered = register_1d_layers();

}  // namespace
}  // namespace lockstep
