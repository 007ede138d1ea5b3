// keras.applications backbones built by Lockstep (lockstep/applications/applications.h): layer
// counts, parameter counts, model names and output shapes as Keras 3.15 reports them for the same
// arguments (printed by keras.applications.*(weights=None, ...): len(model.layers),
// model.count_params(), model.name, model.output.shape), and a forward pass on small inputs.
// tests/interop/applications_interop_test.cpp compares layer by layer against real Keras.
#include "lockstep/applications/applications.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lockstep/nn/layers.h"
#include "lockstep/nn/mixed_precision.h"

using namespace lockstep;

namespace {

void expect_finite_output(Model& m, const Shape& want) {
  Shape in = m.inputs()[0].shape().with_dim(0, 2);
  Tensor x = Tensor::full(in, 0.5f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 37) % 101) / 50.0f - 1;
  Tensor y = m.predict(x);
  ASSERT_EQ(y.shape(), want);
  for (float v : y.to_vector()) ASSERT_TRUE(std::isfinite(v));
}

const Layer& layer(const Model& m, const std::string& name) {
  for (const auto& l : m.layers())
    if (l->name() == name) return *l;
  throw std::runtime_error("no layer " + name);
}

}  // namespace

TEST(Applications, MobileNetV2MatchesKerasCounts) {
  reset_layer_names();
  Model m = applications::MobileNetV2(
      {.input_shape = {32, 32, 3}, .classes = 10, .classifier_activation = "linear"});
  EXPECT_EQ(m.name(), "mobilenetv2_1.00_32");
  EXPECT_EQ(m.layers().size(), 156u);
  EXPECT_EQ(m.count_params(), 2270794);
  EXPECT_EQ(m.weights().size(), 262u);
  EXPECT_EQ(layer(m, "block_1_pad").class_name(), "ZeroPadding2D");
  EXPECT_EQ(layer(m, "block_1_pad").config()["padding"], json::parse("[[0, 1], [0, 1]]"));
  EXPECT_EQ(layer(m, "Conv1_relu").config()["max_value"], 6.0);
  EXPECT_EQ(layer(m, "bn_Conv1").config()["momentum"], 0.999);
  EXPECT_EQ(m.layers().back()->name(), "predictions");
  expect_finite_output(m, Shape{2, 10});
  // alpha 0.5 on a 40 x 48 input, max pooling; alpha 1.4 widens the last convolution.
  Model half = applications::MobileNetV2(
      {.include_top = false, .input_shape = {40, 48, 3}, .pooling = "max", .alpha = 0.5});
  EXPECT_EQ(half.name(), "mobilenetv2_0.50_40");
  EXPECT_EQ(half.layers().size(), 155u);
  EXPECT_EQ(half.count_params(), 706224);
  Model wide =
      applications::MobileNetV2({.include_top = false, .input_shape = {32, 32, 3}, .alpha = 1.4});
  EXPECT_EQ(wide.layers().size(), 154u);
  EXPECT_EQ(wide.count_params(), 4363712);
  EXPECT_EQ(wide.outputs()[0].shape(), Shape({-1, 1, 1, 1792}));
}

TEST(Applications, ResNet50MatchesKerasCounts) {
  Model m =
      applications::ResNet50({.include_top = false, .input_shape = {32, 32, 3}, .pooling = "avg"});
  EXPECT_EQ(m.name(), "resnet50");
  EXPECT_EQ(m.layers().size(), 176u);
  EXPECT_EQ(m.count_params(), 23587712);
  EXPECT_EQ(m.weights().size(), 318u);
  EXPECT_EQ(layer(m, "conv1_pad").config()["padding"], json::parse("[[3, 3], [3, 3]]"));
  EXPECT_EQ(m.layers().back()->name(), "avg_pool");
  // model.layers in Keras's order (by depth, as Keras 3.15 lists it): a block's main branch
  // first, then the shortcut and the last convolution, which lie at the same depth.
  std::vector<std::string> names;
  for (size_t i = 7; i < 19; ++i) names.push_back(m.layers()[i]->name());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "conv2_block1_1_conv", "conv2_block1_1_bn", "conv2_block1_1_relu",
                       "conv2_block1_2_conv", "conv2_block1_2_bn", "conv2_block1_2_relu",
                       "conv2_block1_0_conv", "conv2_block1_3_conv", "conv2_block1_0_bn",
                       "conv2_block1_3_bn", "conv2_block1_add", "conv2_block1_out"}));
  // weights() follows: conv2_block1_2_bn's 4 weights, then 0_conv's kernel and bias.
  const auto w = m.weights();
  size_t k = 0;
  while (k < w.size() && w[k]->name != "conv2_block1_0_conv/kernel") ++k;
  ASSERT_LT(k + 2, w.size());
  EXPECT_EQ(w[k - 1]->name, "conv2_block1_2_bn/moving_variance");
  EXPECT_EQ(w[k + 2]->name, "conv2_block1_3_conv/kernel");
  expect_finite_output(m, Shape{2, 2048});
}

// Keras's count includes Normalization's mean, variance and int64 count (7).
TEST(Applications, EfficientNetB0MatchesKerasCounts) {
  Model m = applications::EfficientNetB0({.input_shape = {32, 32, 3}, .classes = 10});
  EXPECT_EQ(m.name(), "efficientnetb0");
  EXPECT_EQ(m.layers().size(), 240u);
  EXPECT_EQ(m.count_params(), 4062381);
  EXPECT_EQ(m.weights().size(), 314u);
  EXPECT_EQ(layer(m, "block2b_drop").config()["noise_shape"], json::parse("[null, 1, 1, 1]"));
  EXPECT_NEAR(layer(m, "block2b_drop").config()["rate"].get<double>(), 0.025, 1e-12);
  EXPECT_EQ(layer(m, "stem_conv").config()["kernel_initializer"]["class_name"], "VarianceScaling");
  EXPECT_EQ(layer(m, "block1a_se_excite").class_name(), "Multiply");
  expect_finite_output(m, Shape{2, 10});
}

TEST(Applications, ByNameAndErrors) {
  EXPECT_EQ(applications::by_name("mobilenet_v2", {.input_shape = {32, 32, 3}}).name(),
            "mobilenetv2_1.00_32");
  try {
    applications::by_name("VGG16");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MobileNetV2, ResNet50, EfficientNetB0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(applications::MobileNetV2({.input_shape = {16, 16, 3}}), Error);
  EXPECT_THROW(applications::ResNet50({.input_shape = {32, 32, 3}, .pooling = "sum"}), Error);
}

// keras.applications.resnet50.preprocess_input ("caffe"): RGB to BGR, minus the ImageNet means,
// no scaling, computed exactly in float32 by one frozen 1x1 Conv2D (even under mixed_bfloat16);
// mobilenet_v2's "tf" mode maps 0..255 to [-1, 1]. The interop test compares with Keras itself.
TEST(Applications, PreprocessInputIsKerasCaffeAndTfModes) {
  struct PolicyReset {
    ~PolicyReset() { mixed_precision::set_global_policy("float32"); }
  } reset;
  mixed_precision::set_global_policy("mixed_bfloat16");
  KTensor in = layers::Input({1, 2, 3});
  KTensor caffe = applications::preprocess_input("ResNet50", in);
  mixed_precision::set_global_policy("float32");
  Model m(in, caffe);
  const Layer& pre = layer(m, "preprocess");
  EXPECT_EQ(pre.class_name(), "Conv2D");
  EXPECT_FALSE(pre.trainable);
  EXPECT_EQ(pre.compute_dtype(), DType::f32);
  EXPECT_TRUE(m.trainable_weights().empty());
  Tensor x = Tensor::zeros(Shape{1, 1, 2, 3});
  const float pixels[6] = {10, 20, 30, 255, 0, 128.5f};
  std::copy(pixels, pixels + 6, x.data<float>());
  const std::vector<float> y = m.predict(x).to_vector();
  const std::vector<float> want = {30 - 103.939f,     20 - 116.779f, 10 - 123.68f,
                                   128.5f - 103.939f, 0 - 116.779f,  255 - 123.68f};
  ASSERT_EQ(y.size(), want.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], want[i]) << i;

  KTensor in2 = layers::Input({1, 2, 3});
  Model tf(in2, applications::preprocess_input("mobilenet_v2", in2));
  const std::vector<float> t = tf.predict(x).to_vector();
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], pixels[i] / 127.5f - 1.f, 1e-6) << i;

  KTensor in3 = layers::Input({1, 2, 4});
  EXPECT_THROW(applications::preprocess_input("ResNet50", in3), Error);
  EXPECT_THROW(applications::preprocess_input("VGG16", in), Error);
}
