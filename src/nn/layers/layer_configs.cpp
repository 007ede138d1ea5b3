// Factories from Keras layer configs for the built-in layers (registered with
// lockstep/nn/config.h's registry when the library loads). Every key Keras writes is read:
// a value Lockstep cannot represent is an error naming the layer and the key.
#include <algorithm>

#include "lockstep/nn/config.h"
#include "lockstep/nn/text_layers.h"
#include "nn/layers/keras_layer_hooks.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/recurrent_slots.h"

namespace lockstep {
namespace {

const json kChannelsLast = "channels_last";

std::string activation(KerasConfigReader& r) {
  const json& a = r.get("activation");
  if (a.is_null()) return "linear";
  // A string, or Keras's serialized function {"class_name": "function", "config": {"name": ...}};
  // an object without config.name is an error (Keras rejects it), not a silent linear.
  const bool named_object = a.is_object() && a.contains("config") && a["config"].is_object() &&
                            a["config"].contains("name") && a["config"]["name"].is_string() &&
                            !a["config"]["name"].get<std::string>().empty();
  if (!a.is_string() && !named_object)
    r.fail("activation", "is " + a.dump() +
                             "; expected a name such as \"relu\" or an object whose config has a "
                             "\"name\"");
  std::string s = a.is_string() ? a.get<std::string>() : a["config"]["name"].get<std::string>();
  if (!layer_util::is_activation(s))
    r.fail("activation", "is " + a.dump() + "; Lockstep knows " + layer_util::activation_names());
  return s;
}

void no_constraints(KerasConfigReader& r, std::initializer_list<const char*> keys) {
  for (auto k : keys) r.expect(k, {});
}

LayerPtr dense(const json& c) {
  KerasConfigReader r("Dense", c);
  layers::DenseOptions o;
  o.name = r.name();
  int64_t units = r.get<int64_t>("units", 0);
  o.activation = activation(r);
  o.use_bias = r.get<bool>("use_bias", true);
  o.kernel_initializer = r.initializer("kernel_initializer", "glorot_uniform");
  o.bias_initializer = r.initializer("bias_initializer", "zeros");
  o.kernel_regularizer_l2 = r.l2_regularizer("kernel_regularizer");
  o.bias_regularizer_l2 = r.l2_regularizer("bias_regularizer");
  no_constraints(r, {"activity_regularizer", "kernel_constraint", "bias_constraint",
                     "quantization_config", "lora_rank"});
  r.expect("lora_alpha", {});
  r.finish();
  return layers::Dense(units, o);
}

// Conv2D, DepthwiseConv2D, SeparableConv2D, Conv2DTranspose.
LayerPtr conv(const std::string& cls, const json& c) {
  KerasConfigReader r(cls, c);
  layers::ConvOptions o;
  o.name = r.name();
  int64_t filters = cls == "DepthwiseConv2D" ? 0 : r.get<int64_t>("filters", 0);
  std::vector<int64_t> k = r.ints("kernel_size", {});
  o.strides = r.ints("strides", {1, 1});
  o.padding = r.get<std::string>("padding", "valid");
  r.expect("data_format", {kChannelsLast});
  o.dilation_rate = r.ints("dilation_rate", {1, 1});
  o.activation = activation(r);
  o.use_bias = r.get<bool>("use_bias", true);
  o.bias_initializer = r.initializer("bias_initializer", "zeros");
  o.bias_regularizer_l2 = r.l2_regularizer("bias_regularizer");
  no_constraints(r, {"activity_regularizer", "bias_constraint"});
  if (cls == "Conv2DTranspose") {
    o.output_padding = r.ints("output_padding", {});  // null: {}
    o.kernel_initializer = r.initializer("kernel_initializer", "glorot_uniform");
    o.kernel_regularizer_l2 = r.l2_regularizer("kernel_regularizer");
    no_constraints(r, {"kernel_constraint"});
    r.finish();
    return layers::Conv2DTranspose(filters, k, o);
  }
  if (cls == "Conv2D") {
    o.groups = r.get<int64_t>("groups", 1);
    o.kernel_initializer = r.initializer("kernel_initializer", "glorot_uniform");
    o.kernel_regularizer_l2 = r.l2_regularizer("kernel_regularizer");
    no_constraints(r, {"kernel_constraint", "lora_rank", "lora_alpha"});
    r.finish();
    return layers::Conv2D(filters, k, o);
  }
  o.depth_multiplier = r.get<int64_t>("depth_multiplier", 1);
  o.depthwise_initializer = r.initializer("depthwise_initializer", "glorot_uniform");
  no_constraints(r, {"depthwise_regularizer", "depthwise_constraint"});
  if (cls == "DepthwiseConv2D") {
    r.finish();
    return layers::DepthwiseConv2D(k, o);
  }
  o.pointwise_initializer = r.initializer("pointwise_initializer", "glorot_uniform");
  no_constraints(r, {"pointwise_regularizer", "pointwise_constraint"});
  r.finish();
  return layers::SeparableConv2D(filters, k, o);
}

LayerPtr pooling(const std::string& cls, const json& c) {
  KerasConfigReader r(cls, c);
  r.expect("data_format", {kChannelsLast});
  if (cls.rfind("Global", 0) == 0) {
    bool keepdims = r.get<bool>("keepdims", false);
    r.finish();
    return cls == "GlobalAveragePooling2D" ? layers::GlobalAveragePooling2D(keepdims, r.name())
                                           : layers::GlobalMaxPooling2D(keepdims, r.name());
  }
  layers::PoolOptions o;
  o.name = r.name();
  std::vector<int64_t> pool = r.ints("pool_size", {2, 2});
  o.strides = r.ints("strides", {});
  o.padding = r.get<std::string>("padding", "valid");
  r.finish();
  return cls == "MaxPooling2D" ? layers::MaxPooling2D(pool, o) : layers::AveragePooling2D(pool, o);
}

LayerPtr batch_norm(const json& c) {
  KerasConfigReader r("BatchNormalization", c);
  layers::BatchNormOptions o;
  o.name = r.name();
  o.axis = r.get<int64_t>("axis", -1);
  o.momentum = r.get<double>("momentum", 0.99);
  o.epsilon = r.get<double>("epsilon", 1e-3);
  o.center = r.get<bool>("center", true);
  o.scale = r.get<bool>("scale", true);
  o.synchronized = r.get<bool>("synchronized", false);
  for (auto [k, d] : {std::pair{"beta_initializer", "zeros"},
                      {"gamma_initializer", "ones"},
                      {"moving_mean_initializer", "zeros"},
                      {"moving_variance_initializer", "ones"}})
    if (r.initializer(k, d) != d) r.fail(k, std::string("must be ") + d + " in Lockstep");
  no_constraints(r, {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint",
                     "renorm_clipping"});
  r.expect("renorm", {false});
  r.get("renorm_momentum");  // unused unless renorm
  r.finish();
  return layers::BatchNormalization(o);
}

LayerPtr layer_norm(const json& c) {
  KerasConfigReader r("LayerNormalization", c);
  layers::LayerNormOptions o;
  o.name = r.name();
  const json& ax = r.get("axis");
  if (ax.is_array()) {
    if (ax.size() != 1) r.fail("axis", "is " + ax.dump() + "; Lockstep normalises one axis");
    o.axis = ax[0].get<int64_t>();
  } else if (!ax.is_null()) {
    o.axis = ax.get<int64_t>();
  }
  o.epsilon = r.get<double>("epsilon", 1e-3);
  o.center = r.get<bool>("center", true);
  o.scale = r.get<bool>("scale", true);
  r.expect("rms_scaling", {false});
  for (auto [k, d] : {std::pair{"beta_initializer", "zeros"}, {"gamma_initializer", "ones"}})
    if (r.initializer(k, d) != d) r.fail(k, std::string("must be ") + d + " in Lockstep");
  no_constraints(r,
                 {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
  r.finish();
  return layers::LayerNormalization(o);
}

// keras.layers.PReLU: alpha_initializer, an L2 alpha_regularizer, shared_axes (null, an int or a
// list of ints); no alpha_constraint.
LayerPtr prelu(const json& c) {
  KerasConfigReader r("PReLU", c);
  layers::PReLUOptions o{.name = r.name()};
  o.alpha_initializer = r.initializer("alpha_initializer", "zeros");
  o.alpha_regularizer_l2 = r.l2_regularizer("alpha_regularizer");
  no_constraints(r, {"alpha_constraint"});
  o.shared_axes = r.ints("shared_axes", {});
  r.finish();
  return layers::PReLU(o);
}

// keras.layers.GroupNormalization: groups, axis (the last only), epsilon, center, scale and the
// initializers; no regularizers or constraints.
LayerPtr group_norm(const json& c) {
  KerasConfigReader r("GroupNormalization", c);
  layers::GroupNormOptions o{.name = r.name()};
  o.groups = r.get<int64_t>("groups", 32);
  o.axis = r.get<int64_t>("axis", -1);
  o.epsilon = r.get<double>("epsilon", 1e-3);
  o.center = r.get<bool>("center", true);
  o.scale = r.get<bool>("scale", true);
  o.beta_initializer = r.initializer("beta_initializer", "zeros");
  o.gamma_initializer = r.initializer("gamma_initializer", "ones");
  no_constraints(r,
                 {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
  r.finish();
  return layers::GroupNormalization(o);
}

// Dropout's noise_shape: null, or a list of ints and nulls (null = -1, the input's size).
std::vector<int64_t> noise_shape(KerasConfigReader& r) {
  const json& v = r.get("noise_shape");
  if (v.is_null()) return {};
  if (!v.is_array()) r.fail("noise_shape", "must be null or a list, got " + v.dump());
  std::vector<int64_t> out;
  for (const json& d : v) {
    if (!d.is_null() && !d.is_number_integer())
      r.fail("noise_shape", "entries must be ints or null, got " + v.dump());
    out.push_back(d.is_null() ? -1 : d.get<int64_t>());
  }
  return out;
}

// ZeroPadding2D's padding: an int, [h, w] or [[top, bottom], [left, right]].
std::vector<int64_t> padding_2d(KerasConfigReader& r) {
  const json& v = r.get("padding");
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
    return {v[0].get<int64_t>(), v[1].get<int64_t>()};
  if (v.is_array() && v.size() == 2 && v[0].is_array() && v[1].is_array() && v[0].size() == 2 &&
      v[1].size() == 2)
    return {v[0][0].get<int64_t>(), v[0][1].get<int64_t>(), v[1][0].get<int64_t>(),
            v[1][1].get<int64_t>()};
  r.fail("padding", "must be an int, [h, w] or [[top, bottom], [left, right]], got " + v.dump());
}

LayerPtr simple(const std::string& cls, const json& c) {
  KerasConfigReader r(cls, c);
  LayerPtr l;
  if (cls == "Flatten") {
    r.expect("data_format", {kChannelsLast});
    l = layers::Flatten(r.name());
  } else if (cls == "Reshape") {
    l = layers::Reshape(r.ints("target_shape", {}), r.name());
  } else if (cls == "Dropout") {
    double rate = r.get<double>("rate", 0.0);
    uint64_t seed = r.get<uint64_t>("seed", 0);
    l = layers::Dropout(rate, {.seed = seed, .noise_shape = noise_shape(r), .name = r.name()});
  } else if (cls == "SpatialDropout2D") {
    r.expect("data_format", {kChannelsLast});
    double rate = r.get<double>("rate", 0.0);
    l = layers::SpatialDropout2D(rate, r.get<uint64_t>("seed", 0), r.name());
  } else if (cls == "Activation") {
    l = layers::Activation(activation(r), r.name());
  } else if (cls == "LeakyReLU") {
    // Keras 3 writes negative_slope; Keras 2 files (and Keras 3's deprecated argument) alpha.
    double slope = r.get<double>("negative_slope", 0.3);
    if (r.has("alpha") && !r.has("negative_slope")) slope = r.get<double>("alpha", 0.3);
    r.get("alpha");
    l = layers::LeakyReLU(slope, r.name());
  } else if (cls == "ELU") {
    l = layers::ELU(r.get<double>("alpha", 1.0), r.name());
  } else if (cls == "ReLU") {
    layers::ReLUOptions o{.name = r.name()};
    if (const json& m = r.get("max_value"); !m.is_null()) o.max_value = m.get<double>();
    o.negative_slope = r.get<double>("negative_slope", 0.0);
    o.threshold = r.get<double>("threshold", 0.0);
    if (o.threshold != 0.0) r.fail("threshold", "must be 0 in Lockstep");
    l = layers::ReLU(o);
  } else if (cls == "ZeroPadding2D") {
    r.expect("data_format", {kChannelsLast});
    l = layers::ZeroPadding2D(padding_2d(r), r.name());
  } else if (cls == "UpSampling2D") {
    r.expect("data_format", {kChannelsLast});
    l = layers::UpSampling2D(r.ints("size", {2, 2}), r.get<std::string>("interpolation", "nearest"),
                             r.name());
  } else if (cls == "Rescaling") {
    if (!r.has("scale") || !r.get("scale").is_number()) r.fail("scale", "must be one number");
    if (r.has("offset") && !r.get("offset").is_number()) r.fail("offset", "must be one number");
    l = layers::Rescaling(r.get<double>("scale", 1.0), r.get<double>("offset", 0.0), r.name());
  } else if (cls == "Add" || cls == "Multiply") {
    l = cls == "Add" ? layers::Add(r.name()) : layers::Multiply(r.name());
  } else if (cls == "Concatenate") {
    l = layers::Concatenate(r.get<int64_t>("axis", -1), r.name());
  }
  r.finish();
  return l;
}

// keras.layers.Normalization: axis (an int, a list or null), fixed mean and variance (null,
// one number or a list), invert.
LayerPtr normalization(const json& c) {
  KerasConfigReader r("Normalization", c);
  layers::NormalizationOptions o{.name = r.name()};
  const json& axis = r.get("axis");
  if (axis.is_null())
    o.axis = {};
  else
    o.axis = r.ints("axis", {-1});
  for (auto [key, out] : {std::pair{"mean", &o.mean}, {"variance", &o.variance}}) {
    const json& v = r.get(key);
    if (v.is_number())
      *out = {v.get<double>()};
    else if (v.is_array())
      *out = v.get<std::vector<double>>();
    else if (!v.is_null())
      r.fail(key, "must be null, a number or a list, got " + v.dump());
  }
  o.invert = r.get<bool>("invert", false);
  r.finish();
  return layers::Normalization(o);
}

layers::Factor factor(KerasConfigReader& r, const std::string& key) {
  const json& f = r.get(key);
  if (f.is_number()) return layers::Factor(f.get<double>());
  if (f.is_array() && f.size() == 2) return layers::Factor(f[0].get<double>(), f[1].get<double>());
  r.fail(key, "must be a number or [lower, upper], got " + f.dump());
}

// RandomContrast's factor as Keras 3 reads it (BaseImagePreprocessingLayer._set_factor with
// bounds [0, 1]): one number f is the range (max(-f, 0), f) = (0, f), so the contrast factor
// is drawn from [1, 1 + f]; a pair is sorted. Keras writes the pair it stored.
layers::Factor contrast_factor(KerasConfigReader& r) {
  const json& f = r.get("factor");
  double lo = 0, hi = 0;
  if (f.is_number()) {
    hi = f.get<double>();
    if (hi < 0 || hi > 1) r.fail("factor", "must be in [0, 1], got " + f.dump());
  } else if (f.is_array() && f.size() == 2 && f[0].is_number() && f[1].is_number()) {
    lo = std::min(f[0].get<double>(), f[1].get<double>());
    hi = std::max(f[0].get<double>(), f[1].get<double>());
    if (lo > 1 || hi < 0) r.fail("factor", "must lie in [0, 1], got " + f.dump());
    if (lo < 0) r.fail("factor", "has a negative lower bound, got " + f.dump());
  } else {
    r.fail("factor", "must be a number or [lower, upper], got " + f.dump());
  }
  return layers::Factor(lo, hi);
}

// RandomFlip, RandomRotation, RandomZoom, RandomTranslation, RandomBrightness, RandomContrast,
// RandomCrop, CenterCrop, Resizing.
LayerPtr image_layer(const std::string& cls, const json& c) {
  KerasConfigReader r(cls, c);
  r.expect("data_format", {kChannelsLast});
  uint64_t seed = r.get<uint64_t>("seed", 0);
  LayerPtr l;
  if (cls == "RandomFlip") {
    l = layers::RandomFlip(r.get<std::string>("mode", "horizontal_and_vertical"), seed, r.name());
  } else if (cls == "RandomCrop" || cls == "CenterCrop" || cls == "Resizing") {
    int64_t h = r.get<int64_t>("height", 0), w = r.get<int64_t>("width", 0);
    if (cls == "RandomCrop") return r.finish(), layers::RandomCrop(h, w, seed, r.name());
    if (cls == "CenterCrop") return r.finish(), layers::CenterCrop(h, w, r.name());
    layers::ResizingOptions o{.interpolation = r.get<std::string>("interpolation", "bilinear"),
                              .crop_to_aspect_ratio = r.get<bool>("crop_to_aspect_ratio", false),
                              .name = r.name()};
    r.expect("pad_to_aspect_ratio", {false});
    r.expect("antialias", {false});
    r.get("fill_mode");  // used only with pad_to_aspect_ratio
    r.get("fill_value");
    l = layers::Resizing(h, w, o);
  } else if (cls == "RandomBrightness" || cls == "RandomContrast") {
    layers::Factor f = cls == "RandomContrast" ? contrast_factor(r) : factor(r, "factor");
    const json& vr = r.get("value_range");
    if (!vr.is_null() &&
        !(vr.is_array() && vr.size() == 2 && vr[0].is_number() && vr[1].is_number()))
      r.fail("value_range", "must be [low, high], got " + vr.dump());
    std::vector<double> range =
        vr.is_null() ? std::vector<double>{0, 255} : vr.get<std::vector<double>>();
    layers::ValueRangeOptions o{.value_range = range, .seed = seed, .name = r.name()};
    l = cls == "RandomContrast" ? layers::RandomContrast(f, o) : layers::RandomBrightness(f, o);
  } else {
    layers::TransformLayerOptions o{
        .fill_mode = r.get<std::string>("fill_mode", "reflect"),
        .interpolation = r.get<std::string>("interpolation", "bilinear"),
        .seed = seed,
        .fill_value = r.get<double>("fill_value", 0.0),
        .name = r.name()};
    if (cls == "RandomRotation") {
      l = layers::RandomRotation(factor(r, "factor"), o);
    } else if (cls == "RandomZoom") {
      layers::Factor hf = factor(r, "height_factor");
      std::optional<layers::Factor> wf;
      if (!r.get("width_factor").is_null()) wf = factor(r, "width_factor");
      l = layers::RandomZoom(hf, wf, o);
    } else {
      layers::Factor hf = factor(r, "height_factor");
      l = layers::RandomTranslation(hf, factor(r, "width_factor"), o);
    }
  }
  r.finish();
  return l;
}

// keras.layers.Embedding (keras/src/layers/core/embedding.py get_config) and Masking.
LayerPtr embedding(const json& c) {
  KerasConfigReader r("Embedding", c);
  layers::EmbeddingOptions o{.name = r.name()};
  const int64_t input_dim = r.get<int64_t>("input_dim", 0);
  const int64_t output_dim = r.get<int64_t>("output_dim", 0);
  o.embeddings_initializer = r.initializer("embeddings_initializer", "random_uniform");
  o.embeddings_regularizer_l2 = r.l2_regularizer("embeddings_regularizer");
  o.mask_zero = r.get<bool>("mask_zero", false);
  no_constraints(r, {"activity_regularizer", "embeddings_constraint", "quantization_config",
                     "lora_rank", "lora_alpha", "input_length"});
  r.finish();
  return layers::Embedding(input_dim, output_dim, o);
}

LayerPtr masking(const json& c) {
  KerasConfigReader r("Masking", c);
  const json& v = r.get("mask_value");
  if (!v.is_null() && !v.is_number()) r.fail("mask_value", "must be one number, got " + v.dump());
  const double value = v.is_number() ? v.get<double>() : 0.0;
  r.finish();
  return layers::Masking(value, r.name());
}

bool register_builtins() {
  register_layer("Dense", dense);
  for (const auto& cls : text_layer_classes())  // host-side text preprocessing
    register_layer(cls, [cls](const json& c) { return text_layer_from_config(cls, c); });
  for (std::string cls : {"Conv2D", "DepthwiseConv2D", "SeparableConv2D", "Conv2DTranspose"})
    register_layer(cls, [cls](const json& c) { return conv(cls, c); });
  for (std::string cls :
       {"MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling2D", "GlobalMaxPooling2D"})
    register_layer(cls, [cls](const json& c) { return pooling(cls, c); });
  register_layer("BatchNormalization", batch_norm);
  register_layer("LayerNormalization", layer_norm);
  register_layer("Normalization", normalization);
  register_layer("GroupNormalization", group_norm);
  register_layer("PReLU", prelu);
  register_layer("Embedding", embedding);
  register_layer("Masking", masking);
  for (std::string cls :
       {"Flatten", "Reshape", "Dropout", "SpatialDropout2D", "Activation", "ReLU", "LeakyReLU",
        "ELU", "Rescaling", "Add", "Multiply", "Concatenate", "ZeroPadding2D", "UpSampling2D"})
    register_layer(cls, [cls](const json& c) { return simple(cls, c); });
  for (std::string cls :
       {"RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation", "RandomBrightness",
        "RandomContrast", "RandomCrop", "CenterCrop", "Resizing"})
    register_layer(cls, [cls](const json& c) { return image_layer(cls, c); });
  register_recurrent_layers();
  register_keras_hub_layers();
  return true;
}

const bool registered = register_builtins();

}  // namespace
}  // namespace lockstep
