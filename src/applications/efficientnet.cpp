// keras.applications.EfficientNetB0 (keras/src/applications/efficientnet.py): the same layers,
// names, initializers and order (width and depth coefficients 1.0, drop connect 0.2).
#include <cmath>

#include "applications/common.h"

namespace lockstep::applications {
namespace {

using namespace lockstep::layers;

const char* kConvInit = "variance_scaling:2:fan_out:truncated_normal";
const char* kDenseInit = "variance_scaling:0.3333333333333333:fan_out:uniform";
constexpr double kDropConnectRate = 0.2;

struct BlockArgs {
  int64_t kernel_size, repeats, filters_in, filters_out, expand_ratio, strides;
};
constexpr BlockArgs kBlocks[] = {
    {3, 1, 32, 16, 1, 1},  {3, 2, 16, 24, 6, 2},   {5, 2, 24, 40, 6, 2},  {3, 3, 40, 80, 6, 2},
    {5, 3, 80, 112, 6, 1}, {5, 4, 112, 192, 6, 2}, {3, 1, 192, 320, 6, 1}};
constexpr double kSeRatio = 0.25;

KTensor bn_act(KTensor x, const std::string& bn, const std::string& act) {
  x = BatchNormalization({.axis = 3, .name = bn})(x);
  return act.empty() ? x : Activation("swish", act)(x);
}

ConvOptions conv(const std::string& name, bool bias = false, std::string act = "linear") {
  return {.padding = "same",
          .activation = std::move(act),
          .use_bias = bias,
          .kernel_initializer = kConvInit,
          .name = name};
}

// Squeeze and excitation: x * sigmoid(conv(swish(conv(mean over H, W of x)))).
KTensor squeeze_excite(KTensor x, int64_t filters_in, int64_t filters, const std::string& name) {
  const int64_t filters_se = std::max<int64_t>(1, int64_t(double(filters_in) * kSeRatio));
  KTensor se = GlobalAveragePooling2D(false, name + "se_squeeze")(x);
  se = Reshape({1, 1, filters}, name + "se_reshape")(se);
  se = Conv2D(filters_se, 1, conv(name + "se_reduce", true, "swish"))(se);
  se = Conv2D(filters, 1, conv(name + "se_expand", true, "sigmoid"))(se);
  return Multiply(name + "se_excite")({x, se});
}

// Keras's block(): expansion, depthwise convolution, squeeze and excitation, projection.
KTensor block(KTensor in, double drop_rate, const std::string& name, const BlockArgs& a) {
  const int64_t filters = a.filters_in * a.expand_ratio;
  KTensor x = in;
  if (a.expand_ratio != 1) {
    x = Conv2D(filters, 1, conv(name + "expand_conv"))(x);
    x = bn_act(x, name + "expand_bn", name + "expand_activation");
  }
  if (a.strides == 2)
    x = ZeroPadding2D(detail::correct_pad(x, a.kernel_size), name + "dwconv_pad")(x);
  x = DepthwiseConv2D({a.kernel_size, a.kernel_size}, {.strides = {a.strides, a.strides},
                                                       .padding = a.strides == 2 ? "valid" : "same",
                                                       .use_bias = false,
                                                       .depthwise_initializer = kConvInit,
                                                       .name = name + "dwconv"})(x);
  x = bn_act(x, name + "bn", name + "activation");
  x = squeeze_excite(x, a.filters_in, filters, name);
  x = Conv2D(a.filters_out, 1, conv(name + "project_conv"))(x);
  x = bn_act(x, name + "project_bn", "");
  if (a.strides == 1 && a.filters_in == a.filters_out) {
    if (drop_rate > 0)
      x = Dropout(drop_rate, {.noise_shape = {-1, 1, 1, 1}, .name = name + "drop"})(x);
    x = Add(name + "add")({x, in});
  }
  return x;
}

}  // namespace

Model EfficientNetB0(Options o) {
  const std::vector<int64_t> shape = detail::input_shape(o, "EfficientNetB0", 32);
  KTensor in = Input(shape);
  KTensor x = Rescaling(1.0 / 255.0)(in);
  x = Normalization({.axis = {3}})(x);
  x = ZeroPadding2D(detail::correct_pad(x, 3), "stem_conv_pad")(x);
  ConvOptions stem = conv("stem_conv");
  stem.strides = {2, 2};
  stem.padding = "valid";
  x = Conv2D(32, 3, stem)(x);
  x = bn_act(x, "stem_bn", "stem_activation");
  double total = 0;
  for (const BlockArgs& a : kBlocks) total += double(a.repeats);
  int b = 0;
  for (size_t i = 0; i < std::size(kBlocks); ++i) {
    BlockArgs a = kBlocks[i];
    for (int64_t j = 0; j < kBlocks[i].repeats; ++j) {
      if (j > 0) a.strides = 1, a.filters_in = a.filters_out;
      const std::string name =
          "block" + std::to_string(i + 1) + std::string(1, char('a' + j)) + "_";
      x = block(x, kDropConnectRate * b / total, name, a);
      ++b;
    }
  }
  x = Conv2D(1280, 1, conv("top_conv"))(x);
  x = bn_act(x, "top_bn", "top_activation");
  x = detail::top(x, o, "avg_pool", "max_pool", 0.2, kDenseInit);
  return Model(in, x, o.name.empty() ? "efficientnetb0" : o.name);
}

}  // namespace lockstep::applications
