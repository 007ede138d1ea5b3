// keras.applications.ResNet50 (keras/src/applications/resnet.py, v1: preact=False,
// use_bias=True): the same layers, names and order.
#include "applications/common.h"

namespace lockstep::applications {
namespace {

using namespace lockstep::layers;

constexpr double kEpsilon = 1.001e-5;

KTensor bn(KTensor x, const std::string& name) {
  return BatchNormalization({.axis = 3, .epsilon = kEpsilon, .name = name})(x);
}

// Keras's residual_block_v1.
KTensor residual_block(KTensor x, int64_t filters, int64_t stride, bool conv_shortcut,
                       const std::string& name) {
  KTensor shortcut = x;
  if (conv_shortcut) {
    shortcut = Conv2D(4 * filters, 1, {.strides = {stride, stride}, .name = name + "_0_conv"})(x);
    shortcut = bn(shortcut, name + "_0_bn");
  }
  x = Conv2D(filters, 1, {.strides = {stride, stride}, .name = name + "_1_conv"})(x);
  x = Activation("relu", name + "_1_relu")(bn(x, name + "_1_bn"));
  x = Conv2D(filters, 3, {.padding = "same", .name = name + "_2_conv"})(x);
  x = Activation("relu", name + "_2_relu")(bn(x, name + "_2_bn"));
  x = Conv2D(4 * filters, 1, {.name = name + "_3_conv"})(x);
  x = bn(x, name + "_3_bn");
  x = Add(name + "_add")({shortcut, x});
  return Activation("relu", name + "_out")(x);
}

// Keras's stack_residual_blocks_v1.
KTensor stack(KTensor x, int64_t filters, int blocks, int64_t stride1, const std::string& name) {
  x = residual_block(x, filters, stride1, true, name + "_block1");
  for (int i = 2; i <= blocks; ++i)
    x = residual_block(x, filters, 1, false, name + "_block" + std::to_string(i));
  return x;
}

}  // namespace

Model ResNet50(Options o) {
  const std::vector<int64_t> shape = detail::input_shape(o, "ResNet50", 32);
  KTensor in = Input(shape);
  KTensor x = ZeroPadding2D({3, 3}, "conv1_pad")(in);
  x = Conv2D(64, 7, {.strides = {2, 2}, .name = "conv1_conv"})(x);
  x = Activation("relu", "conv1_relu")(bn(x, "conv1_bn"));
  x = ZeroPadding2D({1, 1}, "pool1_pad")(x);
  x = MaxPooling2D({3, 3}, {.strides = {2, 2}, .name = "pool1_pool"})(x);
  x = stack(x, 64, 3, 1, "conv2");
  x = stack(x, 128, 4, 2, "conv3");
  x = stack(x, 256, 6, 2, "conv4");
  x = stack(x, 512, 3, 2, "conv5");
  x = detail::top(x, o, "avg_pool", "max_pool");
  return Model(in, x, o.name.empty() ? "resnet50" : o.name);
}

}  // namespace lockstep::applications
