// keras.applications.MobileNetV2 (keras/src/applications/mobilenet_v2.py): the same layers,
// names and order.
#include <cstdio>

#include "applications/common.h"

namespace lockstep::applications {
namespace {

using namespace lockstep::layers;

// Keras's _make_divisible: v rounded to a multiple of `divisor`, never 10% below v.
int64_t make_divisible(double v, int64_t divisor) {
  int64_t r = std::max(divisor, int64_t(v + double(divisor) / 2) / divisor * divisor);
  if (double(r) < 0.9 * v) r += divisor;
  return r;
}

KTensor bn_relu6(KTensor x, const std::string& bn, const std::string& relu) {
  x = BatchNormalization({.momentum = 0.999, .epsilon = 1e-3, .name = bn})(x);
  return relu.empty() ? x : ReLU({.max_value = 6.0, .name = relu})(x);
}

// Keras's _inverted_res_block.
KTensor inverted_res_block(KTensor in, int64_t expansion, int64_t stride, double alpha,
                           int64_t filters, int block_id) {
  const int64_t in_channels = in.shape()[-1];
  const int64_t pointwise = make_divisible(double(int64_t(double(filters) * alpha)), 8);
  std::string prefix = "block_" + std::to_string(block_id) + "_";
  KTensor x = in;
  if (block_id) {
    x = Conv2D(expansion * in_channels, 1,
               {.padding = "same", .use_bias = false, .name = prefix + "expand"})(x);
    x = bn_relu6(x, prefix + "expand_BN", prefix + "expand_relu");
  } else {
    prefix = "expanded_conv_";
  }
  if (stride == 2) x = ZeroPadding2D(detail::correct_pad(x, 3), prefix + "pad")(x);
  x = DepthwiseConv2D({3, 3}, {.strides = {stride, stride},
                               .padding = stride == 1 ? "same" : "valid",
                               .use_bias = false,
                               .name = prefix + "depthwise"})(x);
  x = bn_relu6(x, prefix + "depthwise_BN", prefix + "depthwise_relu");
  x = Conv2D(pointwise, 1, {.padding = "same", .use_bias = false, .name = prefix + "project"})(x);
  x = bn_relu6(x, prefix + "project_BN", "");
  if (in_channels == pointwise && stride == 1) return Add(prefix + "add")({in, x});
  return x;
}

struct BlockSpec {
  int64_t filters, stride, expansion;
};
constexpr BlockSpec kBlocks[] = {{16, 1, 1},  {24, 2, 6}, {24, 1, 6}, {32, 2, 6},  {32, 1, 6},
                                 {32, 1, 6},  {64, 2, 6}, {64, 1, 6}, {64, 1, 6},  {64, 1, 6},
                                 {96, 1, 6},  {96, 1, 6}, {96, 1, 6}, {160, 2, 6}, {160, 1, 6},
                                 {160, 1, 6}, {320, 1, 6}};

}  // namespace

Model MobileNetV2(Options o) {
  const std::vector<int64_t> shape = detail::input_shape(o, "MobileNetV2", 32);
  LS_CHECK(o.alpha > 0, "MobileNetV2: alpha must be positive, got ", o.alpha);
  KTensor in = Input(shape);
  KTensor x =
      Conv2D(make_divisible(32 * o.alpha, 8), 3,
             {.strides = {2, 2}, .padding = "same", .use_bias = false, .name = "Conv1"})(in);
  x = bn_relu6(x, "bn_Conv1", "Conv1_relu");
  int id = 0;
  for (const BlockSpec& b : kBlocks)
    x = inverted_res_block(x, b.expansion, b.stride, o.alpha, b.filters, id++);
  const int64_t last = o.alpha > 1.0 ? make_divisible(1280 * o.alpha, 8) : 1280;
  x = Conv2D(last, 1, {.use_bias = false, .name = "Conv_1"})(x);
  x = bn_relu6(x, "Conv_1_bn", "out_relu");
  x = detail::top(x, o, "", "");
  std::string name = o.name;
  if (name.empty()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "mobilenetv2_%.2f_%lld", o.alpha,
                  static_cast<long long>(shape[0]));
    name = buf;
  }
  return Model(in, x, name);
}

}  // namespace lockstep::applications
