// Keras layers: factory functions with Keras's names, defaults and weight order. Options are
// C++20 designated-initialiser structs standing in for keyword arguments:
//   auto y = layers::Conv2D(32, 3, {.padding = "same", .activation = "relu"})(x);
#pragma once
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep::data {
class Dataset;
}  // namespace lockstep::data

namespace lockstep::layers {

// keras.Input: a symbolic input of `shape` (without the batch dimension).
KTensor Input(std::vector<int64_t> shape, std::string name = "", DType dtype = DType::f32);

struct DenseOptions {
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  double kernel_regularizer_l2 = 0.0;
  double bias_regularizer_l2 = 0.0;
  std::string name;
};
LayerHandle Dense(int64_t units, DenseOptions o = {});

struct ConvOptions {
  std::vector<int64_t> strides = {1, 1};  // one value is used for both dims
  std::string padding = "valid";          // "valid" | "same"
  std::vector<int64_t> dilation_rate = {1, 1};
  int64_t groups = 1;
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  double kernel_regularizer_l2 = 0.0;
  double bias_regularizer_l2 = 0.0;
  int64_t depth_multiplier = 1;  // DepthwiseConv2D / SeparableConv2D
  std::string depthwise_initializer = "glorot_uniform";
  std::string pointwise_initializer = "glorot_uniform";
  std::string name;
};
// kernel_size: one value (square) or {kh, kw}.
LayerHandle Conv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o = {});
inline LayerHandle Conv2D(int64_t filters, int64_t k, ConvOptions o = {}) {
  return Conv2D(filters, std::vector<int64_t>{k, k}, std::move(o));
}
LayerHandle DepthwiseConv2D(std::vector<int64_t> kernel_size, ConvOptions o = {});
LayerHandle SeparableConv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o = {});

struct PoolOptions {
  std::vector<int64_t> strides = {};  // default: pool_size
  std::string padding = "valid";
  std::string name;
};
LayerHandle MaxPooling2D(std::vector<int64_t> pool_size = {2, 2}, PoolOptions o = {});
LayerHandle AveragePooling2D(std::vector<int64_t> pool_size = {2, 2}, PoolOptions o = {});
LayerHandle GlobalAveragePooling2D(bool keepdims = false, std::string name = "");
LayerHandle GlobalMaxPooling2D(bool keepdims = false, std::string name = "");

LayerHandle Flatten(std::string name = "");
LayerHandle Reshape(std::vector<int64_t> target_shape, std::string name = "");
LayerHandle Dropout(double rate, uint64_t seed = 0, std::string name = "");
// relu, relu6, sigmoid, tanh, softmax, gelu, swish (silu), leaky_relu, linear, softplus.
LayerHandle Activation(std::string activation, std::string name = "");
LayerHandle ReLU(std::string name = "");

struct BatchNormOptions {
  int64_t axis = -1;
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
  bool synchronized = false;  // cross-replica statistics (distribution strategies)
  std::string name;
};
LayerHandle BatchNormalization(BatchNormOptions o = {});
struct LayerNormOptions {
  int64_t axis = -1;
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
  std::string name;
};
LayerHandle LayerNormalization(LayerNormOptions o = {});
LayerHandle Rescaling(double scale, double offset = 0.0, std::string name = "");

LayerHandle Add(std::string name = "");
LayerHandle Multiply(std::string name = "");
LayerHandle Concatenate(int64_t axis = -1, std::string name = "");

// ---- Image preprocessing and augmentation (src/nn/layers/preprocessing*.cpp) ----
// Random layers transform in training only (identity at inference), drawing per-image
// parameters from Philox keyed by (seed, model seed, node id, replica) with the step as counter,
// like Dropout; the same math as the lockstep/data/augment.h map functions. Inputs are NHWC;
// uint8 inputs are cast to float32. seed 0 = Keras's seed=None.
// A Keras "factor": one number f (read as [-f, f]; RandomContrast: [1 - f, 1 + f]) or a pair
// {lower, upper} (RandomContrast: [1 - lower, 1 + upper]).
struct Factor {
  double lower = 0, upper = 0;
  bool single = true;
  Factor(double f = 0) : lower(f), upper(f), single(true) {}  // NOLINT
  Factor(double lo, double hi) : lower(lo), upper(hi), single(false) {}
};
struct TransformLayerOptions {
  std::string fill_mode = "reflect";       // reflect | wrap | constant | nearest
  std::string interpolation = "bilinear";  // bilinear | nearest
  uint64_t seed = 0;
  double fill_value = 0.0;
  std::string name;
};
// mode: "horizontal", "vertical" or "horizontal_and_vertical".
LayerHandle RandomFlip(std::string mode = "horizontal_and_vertical", uint64_t seed = 0,
                       std::string name = "");
// factor: fraction of 2*pi (0.1 -> up to +-36 degrees; positive = counter-clockwise).
LayerHandle RandomRotation(Factor factor, TransformLayerOptions o = {});
// Positive factors zoom out, negative zoom in; width_factor unset keeps the aspect ratio.
LayerHandle RandomZoom(Factor height_factor, std::optional<Factor> width_factor = std::nullopt,
                       TransformLayerOptions o = {});
// Fractions of the height / width (positive = down / right).
LayerHandle RandomTranslation(Factor height_factor, Factor width_factor,
                              TransformLayerOptions o = {});
struct ValueRangeOptions {
  std::vector<double> value_range = {0, 255};
  uint64_t seed = 0;
  std::string name;
};
LayerHandle RandomContrast(Factor factor, ValueRangeOptions o = {});
LayerHandle RandomBrightness(Factor factor, ValueRangeOptions o = {});  // factor in [-1, 1]
// Training: a random height x width window per image; inference (or smaller inputs): centre
// crop to the aspect ratio, then resize (Keras).
LayerHandle RandomCrop(int64_t height, int64_t width, uint64_t seed = 0, std::string name = "");
LayerHandle CenterCrop(int64_t height, int64_t width, std::string name = "");
struct ResizingOptions {
  std::string interpolation = "bilinear";  // bilinear | nearest | area
  bool crop_to_aspect_ratio = false;
  std::string name;
};
LayerHandle Resizing(int64_t height, int64_t width, ResizingOptions o = {});
struct NormalizationOptions {
  std::vector<int64_t> axis = {-1};    // kept axes; empty = Keras axis=None (one mean)
  std::vector<double> mean, variance;  // fixed statistics (else adapt())
  bool invert = false;
  std::string name;
};
// keras.layers.Normalization: (x - mean) / max(sqrt(variance), 1e-7).
class NormalizationHandle : public LayerHandle {
 public:
  using LayerHandle::LayerHandle;
  // Computes mean and variance over `data` (batch first) in one streaming pass.
  void adapt(const Tensor& data) const;
  // Over a Dataset's elements (component 0 is the batch; a finite dataset, or `steps` batches).
  void adapt(const data::Dataset& dataset, int64_t steps = -1) const;
  // Streaming adapt over any batch source: reset_state(), update_state(batch)...,
  // finalize_state() (Chan et al. pairwise combination; biased variance as Keras).
  void reset_state() const;
  void update_state(const Tensor& batch) const;
  void finalize_state() const;
  // Dataset-like sources: anything iterable whose elements are batches (Tensor) or
  // (Tensor, ...) pairs/tuples whose first item is the batch.
  template <class Batches>
  requires(!std::is_same_v<std::remove_cvref_t<Batches>, Tensor> &&
           !std::is_same_v<std::remove_cvref_t<Batches>,
                           data::Dataset>) void adapt(Batches&& batches) const {
    reset_state();
    for (auto&& b : batches) update_state(first_of(b));
    finalize_state();
  }

 private:
  static const Tensor& first_of(const Tensor& t) { return t; }
  template <class P>
  static const Tensor& first_of(const P& p) {
    return std::get<0>(p);
  }
};
NormalizationHandle Normalization(NormalizationOptions o = {});

}  // namespace lockstep::layers

namespace lockstep {
// Adds the named activation to the graph (shared by Dense, Conv2D and Activation).
Value apply_activation(Graph& g, Value x, const std::string& activation, const std::string& name);
}  // namespace lockstep
