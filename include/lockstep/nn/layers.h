// Keras layers: factory functions with Keras's names, defaults and weight order. Options are
// C++20 designated-initialiser structs standing in for keyword arguments:
//   auto y = layers::Conv2D(32, 3, {.padding = "same", .activation = "relu"})(x);
#pragma once
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "lockstep/nn/embedding.h"  // Embedding, Masking
#include "lockstep/nn/layer.h"
#include "lockstep/nn/recurrent.h"
#include "lockstep/nn/text_layers.h"  // TextVectorization, StringLookup, ... (host-side)

namespace lockstep::data {
class Dataset;
}  // namespace lockstep::data

namespace lockstep::layers {

/// keras.Input: a symbolic input of `shape` (without the batch dimension).
KTensor Input(std::vector<int64_t> shape, std::string name = "", DType dtype = DType::f32);

/// Dense's options (keras.layers.Dense's keyword arguments and defaults).
struct DenseOptions {
  std::string activation = "linear";                  ///< applied to the output (see Activation)
  bool use_bias = true;                               ///< add a bias vector
  std::string kernel_initializer = "glorot_uniform";  ///< the kernel's initializer (initializers.h)
  std::string bias_initializer = "zeros";             ///< the bias's initializer
  double kernel_regularizer_l2 = 0.0;                 ///< L2 penalty factor on the kernel (0: none)
  double bias_regularizer_l2 = 0.0;                   ///< L2 penalty factor on the bias (0: none)
  std::string name;                                   ///< "" = "dense", "dense_1", ...
};
/// keras.layers.Dense: activation(x @ kernel + bias); [..., in] -> [..., units]; kernel
/// [in, units].
LayerHandle Dense(int64_t units, DenseOptions o = {});

/// The convolution layers' options (keras.layers.Conv2D's keyword arguments and defaults).
struct ConvOptions {
  std::vector<int64_t> strides = {1, 1};        ///< one value is used for both dims
  std::string padding = "valid";                ///< "valid" | "same"
  std::vector<int64_t> dilation_rate = {1, 1};  ///< the kernel's dilation (one value: both dims)
  int64_t groups = 1;                 ///< grouped convolution: channels split in `groups` groups
  std::string activation = "linear";  ///< applied to the output
  bool use_bias = true;               ///< add a bias per filter
  std::string kernel_initializer = "glorot_uniform";  ///< the kernel's initializer
  std::string bias_initializer = "zeros";             ///< the bias's initializer
  double kernel_regularizer_l2 = 0.0;                 ///< L2 penalty factor on the kernel (0: none)
  double bias_regularizer_l2 = 0.0;                   ///< L2 penalty factor on the bias (0: none)
  int64_t depth_multiplier = 1;                       ///< DepthwiseConv2D / SeparableConv2D
  /// Conv2DTranspose: extra rows/columns at the bottom/right of the output, each < its stride
  /// (one value: both dims); empty: Keras's None (the output size from padding alone).
  std::vector<int64_t> output_padding;
  std::string depthwise_initializer = "glorot_uniform";  ///< the depthwise kernel's initializer
  std::string pointwise_initializer = "glorot_uniform";  ///< the pointwise kernel's initializer
  std::string name;                                      ///< "" = "conv2d", "conv2d_1", ...
};
/// keras.layers.Conv2D: NHWC [N, H, W, C] -> [N, H', W', filters]; kernel HWIO
/// [kh, kw, C / groups, filters]. kernel_size: one value (square) or {kh, kw}.
LayerHandle Conv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o = {});
/// Conv2D with a square k x k kernel: `Conv2D(32, 3)`.
inline LayerHandle Conv2D(int64_t filters, int64_t k, ConvOptions o = {}) {
  return Conv2D(filters, std::vector<int64_t>{k, k}, std::move(o));
}
/// keras.layers.DepthwiseConv2D: one kernel per input channel (times depth_multiplier);
/// [N, H, W, C] -> [N, H', W', C * depth_multiplier].
LayerHandle DepthwiseConv2D(std::vector<int64_t> kernel_size, ConvOptions o = {});
/// keras.layers.SeparableConv2D: a depthwise convolution, then a 1 x 1 convolution to `filters`.
LayerHandle SeparableConv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o = {});

/// keras.layers.Conv2DTranspose (the transposed convolution, "deconvolution"): NHWC
/// [N, H, W, C] -> [N, H', W', filters] with Keras's sizes (padding "valid": (H - 1) * stride +
/// max(kernel, stride); "same": H * stride; output_padding as Keras). Its kernel is Keras's
/// [kh, kw, filters, C] (output channels before input channels). Takes strides, padding,
/// output_padding, dilation_rate, activation, use_bias, initializers and L2 regularizers.
LayerHandle Conv2DTranspose(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o = {});
/// Conv2DTranspose with a square k x k kernel.
inline LayerHandle Conv2DTranspose(int64_t filters, int64_t k, ConvOptions o = {}) {
  return Conv2DTranspose(filters, std::vector<int64_t>{k, k}, std::move(o));
}

/// The pooling layers' options.
struct PoolOptions {
  std::vector<int64_t> strides = {};  ///< default: pool_size
  std::string padding = "valid";      ///< "valid" | "same"
  std::string name;                   ///< "" = a unique default
};
/// keras.layers.MaxPooling2D: the maximum of each pool_size window; NHWC in and out.
LayerHandle MaxPooling2D(std::vector<int64_t> pool_size = {2, 2}, PoolOptions o = {});
/// keras.layers.AveragePooling2D: the mean of each window ("same" padding excludes the padding).
LayerHandle AveragePooling2D(std::vector<int64_t> pool_size = {2, 2}, PoolOptions o = {});
/// keras.layers.GlobalAveragePooling2D: [N, H, W, C] -> [N, C] ([N, 1, 1, C] with keepdims).
LayerHandle GlobalAveragePooling2D(bool keepdims = false, std::string name = "");
/// keras.layers.GlobalMaxPooling2D: [N, H, W, C] -> [N, C] ([N, 1, 1, C] with keepdims).
LayerHandle GlobalMaxPooling2D(bool keepdims = false, std::string name = "");

/// keras.layers.Flatten: [N, ...] -> [N, product of the rest].
LayerHandle Flatten(std::string name = "");
/// keras.layers.Reshape: [N, ...] -> [N, target_shape...] (one -1 allowed).
LayerHandle Reshape(std::vector<int64_t> target_shape, std::string name = "");
/// keras.layers.ZeroPadding2D: zeros around each image, NHWC [N, H, W, C] ->
/// [N, top + H + bottom, left + W + right, C]. padding: {p} (all sides), {h, w} (symmetric) or
/// {top, bottom, left, right} (Keras's ((top, bottom), (left, right))).
LayerHandle ZeroPadding2D(std::vector<int64_t> padding = {1, 1}, std::string name = "");
/// keras.layers.UpSampling2D: each image enlarged by whole factors, NHWC [N, H, W, C] ->
/// [N, H * size[0], W * size[1], C]. size: {s} (both) or {sh, sw}. interpolation: "nearest"
/// (each pixel repeated, Keras's default) or "bilinear" (half-pixel centres, as Keras).
LayerHandle UpSampling2D(std::vector<int64_t> size = {2, 2}, std::string interpolation = "nearest",
                         std::string name = "");
/// Dropout's options (Keras's names and defaults).
struct DropoutOptions {
  uint64_t seed = 0;  ///< 0: drawn from the global seed
  /// The mask's shape, one entry per input axis: -1 (Keras None) = the input's size, 1 = one
  /// draw shared along that axis ({-1, 1, 1, 1}: drop whole examples, EfficientNet's drop
  /// connect). Empty: the input's shape.
  std::vector<int64_t> noise_shape;
  std::string name;  ///< "" = "dropout", ...
};
/// keras.layers.Dropout: in training, zeroes each value with probability `rate` and scales the
/// rest by 1 / (1 - rate); the identity at inference. seed 0: drawn from the global seed.
LayerHandle Dropout(double rate, uint64_t seed = 0, std::string name = "");
/// Dropout with a noise_shape (a mask broadcast over the axes where it is 1).
LayerHandle Dropout(double rate, DropoutOptions o);
/// keras.layers.SpatialDropout2D: Dropout that drops whole feature maps, NHWC [N, H, W, C]: one
/// draw per (example, channel), the mask broadcast over H and W (Dropout with noise_shape
/// [N, 1, 1, C]). seed 0: drawn from the global seed. Only data_format "channels_last".
LayerHandle SpatialDropout2D(double rate, uint64_t seed = 0, std::string name = "");
/// relu, relu6, sigmoid, tanh, softmax, gelu, swish (silu), leaky_relu, elu, linear, softplus.
LayerHandle Activation(std::string activation, std::string name = "");
/// keras.layers.ReLU: max(x, 0).
LayerHandle ReLU(std::string name = "");
/// ReLU's options (Keras's names and defaults).
struct ReLUOptions {
  std::optional<double> max_value;  ///< clip the output at this value (6: relu6); none: no clip
  double negative_slope = 0.0;      ///< the slope below zero (leaky)
  double threshold = 0.0;           ///< only 0 (Keras's thresholded form is not built)
  std::string name;                 ///< "" = "re_lu", ...
};
/// keras.layers.ReLU(max_value, negative_slope): min(max(x, 0), max_value) + negative_slope *
/// min(x, 0). MobileNetV2's ReLU(6.0) is `ReLU({.max_value = 6})`.
LayerHandle ReLU(ReLUOptions o);
/// keras.layers.LeakyReLU: x for x > 0, else negative_slope * x (Keras 3's default slope 0.3;
/// the `leaky_relu` activation string's is 0.2).
LayerHandle LeakyReLU(double negative_slope = 0.3, std::string name = "");
/// keras.layers.ELU: x for x > 0, else alpha * (e^x - 1).
LayerHandle ELU(double alpha = 1.0, std::string name = "");
/// PReLU's options (Keras's names and defaults).
struct PReLUOptions {
  std::string alpha_initializer = "zeros";  ///< the slopes' initializer (initializers.h)
  double alpha_regularizer_l2 = 0.0;        ///< L2 penalty on alpha (0: none)
  /// Input axes (1 = the first after the batch) that share one slope: alpha has size 1 there.
  /// Empty: one slope per input position (Keras shared_axes=None).
  std::vector<int64_t> shared_axes;
  std::string name;  ///< "" = "p_re_lu", ...
};
/// keras.layers.PReLU: relu(x) - alpha * relu(-x), alpha a learned weight shaped like the input
/// without its batch axis, with size 1 on the shared axes (NHWC with shared_axes {1, 2}: one
/// slope per channel, alpha [1, 1, C]).
LayerHandle PReLU(PReLUOptions o = {});

/// BatchNormalization's options (Keras's names and defaults).
struct BatchNormOptions {
  int64_t axis = -1;          ///< the channel axis (only -1)
  double momentum = 0.99;     ///< of the moving mean and variance
  double epsilon = 1e-3;      ///< added to the variance
  bool center = true;         ///< learn beta (an offset)
  bool scale = true;          ///< learn gamma (a scale)
  bool synchronized = false;  ///< cross-replica statistics (distribution strategies)
  std::string name;           ///< "" = "batch_normalization", ...
};
/// keras.layers.BatchNormalization: normalises each channel with the batch's statistics in
/// training and the moving ones at inference; weights gamma, beta, moving_mean, moving_variance.
LayerHandle BatchNormalization(BatchNormOptions o = {});
/// LayerNormalization's options (Keras's names and defaults).
struct LayerNormOptions {
  int64_t axis = -1;      ///< the normalised axis (only -1)
  double epsilon = 1e-3;  ///< added to the variance
  bool center = true;     ///< learn beta
  bool scale = true;      ///< learn gamma
  std::string name;       ///< "" = "layer_normalization", ...
};
/// keras.layers.LayerNormalization: normalises each sample over its last axis.
LayerHandle LayerNormalization(LayerNormOptions o = {});
/// GroupNormalization's options (Keras's names and defaults).
struct GroupNormOptions {
  int64_t groups = 32;                     ///< channel groups; must divide the channels
  int64_t axis = -1;                       ///< the channel axis (only the last)
  double epsilon = 1e-3;                   ///< added to the variance
  bool center = true;                      ///< learn beta (an offset per channel)
  bool scale = true;                       ///< learn gamma (a scale per channel)
  std::string beta_initializer = "zeros";  ///< beta's initializer (initializers.h)
  std::string gamma_initializer = "ones";  ///< gamma's initializer
  std::string name;                        ///< "" = "group_normalization", ...
};
/// keras.layers.GroupNormalization: splits the last axis's C channels into `groups` groups of
/// C / groups and normalises each sample's group over it and every axis but the batch (groups =
/// C: instance normalisation; groups = 1: layer normalisation over all axes); then gamma * x +
/// beta per channel. Weights gamma [C], beta [C]. Computes in float32 under mixed_bfloat16
/// (Keras upcasts too) and returns the compute dtype.
LayerHandle GroupNormalization(GroupNormOptions o = {});
/// keras.layers.Rescaling: x * scale + offset (e.g. Rescaling(1.0 / 255)).
LayerHandle Rescaling(double scale, double offset = 0.0, std::string name = "");

/// keras.layers.Add: the elementwise sum of its inputs (same shapes): `Add()({a, b})`.
LayerHandle Add(std::string name = "");
/// keras.layers.Multiply: the elementwise product of its inputs.
LayerHandle Multiply(std::string name = "");
/// keras.layers.Concatenate: its inputs joined along `axis` (the others must match).
LayerHandle Concatenate(int64_t axis = -1, std::string name = "");

// ---- Image preprocessing and augmentation (src/nn/layers/preprocessing*.cpp) ----
// Random layers transform in training only (identity at inference), drawing per-image
// parameters from Philox keyed by (seed, model seed, node id, replica) with the step as counter,
// like Dropout; the same math as the lockstep/data/augment.h map functions. Inputs are NHWC;
// uint8 inputs are cast to float32. seed 0 = Keras's seed=None.

/// A Keras "factor": one number f (read as [-f, f]; RandomContrast: [1 - f, 1 + f]) or a pair
/// {lower, upper} (RandomContrast: [1 - lower, 1 + upper]).
struct Factor {
  ///@{
  /// The range's ends (both f for one number).
  double lower = 0, upper = 0;
  ///@}
  bool single = true;  ///< given as one number
  /// One number f.
  Factor(double f = 0) : lower(f), upper(f), single(true) {}  // NOLINT
  /// A pair (lo, hi).
  Factor(double lo, double hi) : lower(lo), upper(hi), single(false) {}
};
/// The geometric augmentation layers' options (Keras's names and defaults).
struct TransformLayerOptions {
  std::string fill_mode = "reflect";       ///< reflect | wrap | constant | nearest
  std::string interpolation = "bilinear";  ///< bilinear | nearest
  uint64_t seed = 0;                       ///< 0: drawn from the global seed
  double fill_value = 0.0;                 ///< for fill_mode "constant"
  std::string name;                        ///< "" = a unique default
};
/// mode: "horizontal", "vertical" or "horizontal_and_vertical".
LayerHandle RandomFlip(std::string mode = "horizontal_and_vertical", uint64_t seed = 0,
                       std::string name = "");
/// factor: fraction of 2*pi (0.1 -> up to +-36 degrees; positive = counter-clockwise).
LayerHandle RandomRotation(Factor factor, TransformLayerOptions o = {});
/// Positive factors zoom out, negative zoom in; width_factor unset keeps the aspect ratio.
LayerHandle RandomZoom(Factor height_factor, std::optional<Factor> width_factor = std::nullopt,
                       TransformLayerOptions o = {});
/// Fractions of the height / width (positive = down / right).
LayerHandle RandomTranslation(Factor height_factor, Factor width_factor,
                              TransformLayerOptions o = {});
/// RandomContrast's and RandomBrightness's options.
struct ValueRangeOptions {
  std::vector<double> value_range = {0, 255};  ///< the pixels' range (results are clipped to it)
  uint64_t seed = 0;                           ///< 0: drawn from the global seed
  std::string name;                            ///< "" = a unique default
};
/// keras.layers.RandomContrast: per image and channel (x - mean) * f + mean, f from the factor.
LayerHandle RandomContrast(Factor factor, ValueRangeOptions o = {});
LayerHandle RandomBrightness(Factor factor, ValueRangeOptions o = {});  ///< factor in [-1, 1]
/// Training: a random height x width window per image; inference (or smaller inputs): centre
/// crop to the aspect ratio, then resize (Keras).
LayerHandle RandomCrop(int64_t height, int64_t width, uint64_t seed = 0, std::string name = "");
/// keras.layers.CenterCrop: the centred height x width window (smaller images are resized).
LayerHandle CenterCrop(int64_t height, int64_t width, std::string name = "");
/// Resizing's options.
struct ResizingOptions {
  std::string interpolation = "bilinear";  ///< bilinear | nearest | area
  bool crop_to_aspect_ratio = false;       ///< crop to the target's aspect ratio first
  std::string name;                        ///< "" = a unique default
};
/// keras.layers.Resizing: [N, H, W, C] -> [N, height, width, C] (tf.image.resize).
LayerHandle Resizing(int64_t height, int64_t width, ResizingOptions o = {});
/// Normalization's options.
struct NormalizationOptions {
  std::vector<int64_t> axis = {-1};  ///< kept axes; empty = Keras axis=None (one mean)
  ///@{
  /// Fixed statistics (else adapt()).
  std::vector<double> mean, variance;
  ///@}
  bool invert = false;  ///< x * sqrt(variance) + mean instead (undo a normalisation)
  std::string name;     ///< "" = "normalization", ...
};
/// keras.layers.Normalization: (x - mean) / max(sqrt(variance), 1e-7).
class NormalizationHandle : public LayerHandle {
 public:
  using LayerHandle::LayerHandle;
  /// Computes mean and variance over `data` (batch first) in one streaming pass.
  void adapt(const Tensor& data) const;
  /// Over a Dataset's elements (component 0 is the batch; a finite dataset, or `steps` batches).
  void adapt(const data::Dataset& dataset, int64_t steps = -1) const;
  /// Streaming adapt over any batch source: reset_state(), update_state(batch)...,
  /// finalize_state() (Chan et al. pairwise combination; biased variance as Keras).
  void reset_state() const;
  void update_state(const Tensor& batch) const;  ///< adds a batch to the running statistics
  void finalize_state() const;                   ///< sets the layer's mean and variance from them
  /// Dataset-like sources: anything iterable whose elements are batches (Tensor) or
  /// (Tensor, ...) pairs/tuples whose first item is the batch.
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
/// keras.layers.Normalization (adapt() computes the statistics; NormalizationHandle).
NormalizationHandle Normalization(NormalizationOptions o = {});

}  // namespace lockstep::layers

namespace lockstep {
/// Adds the named activation to the graph (shared by Dense, Conv2D and Activation).
Value apply_activation(Graph& g, Value x, const std::string& activation, const std::string& name);
}  // namespace lockstep

#include "lockstep/nn/einsum_layers.h"  // EinsumDense, RMSNormalization, Softmax, ...
#include "lockstep/nn/layers_1d.h"  // Conv1D, the 1D pooling and sequence layers, TimeDistributed
