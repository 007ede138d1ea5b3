// Keras layers: factory functions with Keras's names, defaults and weight order. Options are
// C++20 designated-initialiser structs standing in for keyword arguments:
//   auto y = layers::Conv2D(32, 3, {.padding = "same", .activation = "relu"})(x);
#pragma once
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

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

}  // namespace lockstep::layers

namespace lockstep {
// Adds the named activation to the graph (shared by Dense, Conv2D and Activation).
Value apply_activation(Graph& g, Value x, const std::string& activation, const std::string& name);
}  // namespace lockstep
