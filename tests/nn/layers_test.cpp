// Keras layers: output shapes, parameter counts, weight names, configs, graphs and errors.
#include "lockstep/nn/layers.h"

#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/nn/initializers.h"
#include "test_util.h"

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

class LayerTest : public ::testing::Test {
 protected:
  void SetUp() override { reset_layer_names(); }
};

int64_t trainable_count(const LayerHandle& l) {
  int64_t n = 0;
  for (auto& w : l->trainable_weights()) n += w->value.numel();
  return n;
}

std::vector<std::string> weight_names(const LayerHandle& l) {
  std::vector<std::string> r;
  for (auto& w : l->weights()) r.push_back(w->name);
  return r;
}

// Calls `l` on fresh graph inputs of the given shapes; returns the graph's op sequence.
std::vector<std::string> ops_of(const LayerHandle& l, const std::vector<Shape>& shapes,
                                bool training, Graph* out = nullptr) {
  Graph g;
  std::vector<Value> in;
  for (auto& s : shapes) in.push_back(g.input({DType::f32, s}, "x"));
  l->ensure_built(shapes);
  CallContext ctx{g, training, 0, {}};
  l->call(ctx, in);
  std::vector<std::string> ops;
  for (auto& n : g.nodes()) ops.push_back(n.op);
  if (out) *out = g;
  return ops;
}

using lockstep::test_util::error_of;

}  // namespace

TEST_F(LayerTest, InputShapeAndName) {
  KTensor x = L::Input({28, 28, 1});
  EXPECT_EQ(x.shape(), Shape({-1, 28, 28, 1}));
  EXPECT_TRUE(x.call->inputs.empty());
  EXPECT_EQ(x.call->layer->name(), "input_layer");
  EXPECT_EQ(x.call->layer->class_name(), "InputLayer");
  json c = x.call->layer->config();
  EXPECT_EQ(c["batch_shape"], json::parse("[null, 28, 28, 1]"));
  EXPECT_EQ(L::Input({4}).call->layer->name(), "input_layer_1");
}

TEST_F(LayerTest, ReferenceCnnShapesAndParams) {
  KTensor x = L::Input({28, 28, 1});
  auto c1 = L::Conv2D(32, 3, {.activation = "relu"});
  auto c2 = L::Conv2D(64, 3, {.activation = "relu"});
  auto pool = L::MaxPooling2D({2, 2});
  auto flat = L::Flatten();
  auto d1 = L::Dense(128, {.activation = "relu"});
  auto d2 = L::Dense(10, {.activation = "softmax"});
  KTensor h = c1(x);
  EXPECT_EQ(h.shape(), Shape({-1, 26, 26, 32}));
  h = c2(h);
  EXPECT_EQ(h.shape(), Shape({-1, 24, 24, 64}));
  h = pool(h);
  EXPECT_EQ(h.shape(), Shape({-1, 12, 12, 64}));
  h = flat(h);
  EXPECT_EQ(h.shape(), Shape({-1, 9216}));
  h = d1(h);
  EXPECT_EQ(h.shape(), Shape({-1, 128}));
  h = d2(h);
  EXPECT_EQ(h.shape(), Shape({-1, 10}));
  EXPECT_EQ(c1->count_params(), 320);
  EXPECT_EQ(c2->count_params(), 18496);
  EXPECT_EQ(d1->count_params(), 1179776);
  EXPECT_EQ(d2->count_params(), 1290);
  EXPECT_EQ(c1->name(), "conv2d");
  EXPECT_EQ(c2->name(), "conv2d_1");
  EXPECT_EQ(pool->name(), "max_pooling2d");
  EXPECT_EQ(d2->name(), "dense_1");
  EXPECT_EQ(weight_names(c1), (std::vector<std::string>{"conv2d/kernel", "conv2d/bias"}));
  EXPECT_EQ(c2->weights()[0]->value.shape(), Shape({3, 3, 32, 64}));
  EXPECT_EQ(d1->weights()[0]->value.shape(), Shape({9216, 128}));
  EXPECT_EQ(weight_names(d1), (std::vector<std::string>{"dense/kernel", "dense/bias"}));
}

TEST_F(LayerTest, BatchNormWeights) {
  KTensor x = L::Input({12, 12, 64});
  auto bn = L::BatchNormalization();
  EXPECT_EQ(bn(x).shape(), Shape({-1, 12, 12, 64}));
  EXPECT_EQ(bn->count_params(), 256);
  EXPECT_EQ(trainable_count(bn), 128);
  EXPECT_EQ(bn->non_trainable_weights().size(), 2u);
  EXPECT_EQ(weight_names(bn),
            (std::vector<std::string>{"batch_normalization/gamma", "batch_normalization/beta",
                                      "batch_normalization/moving_mean",
                                      "batch_normalization/moving_variance"}));
  EXPECT_EQ(bn->weights()[0]->value.to_vector()[5], 1.f);
  EXPECT_EQ(bn->weights()[3]->value.to_vector()[5], 1.f);
  EXPECT_EQ(bn->weights()[2]->value.to_vector()[5], 0.f);
}

TEST_F(LayerTest, ConvPaddingAndStrides) {
  KTensor x = L::Input({28, 28, 3});
  EXPECT_EQ(L::Conv2D(8, 3, {.strides = {2}, .padding = "same"})(x).shape(),
            Shape({-1, 14, 14, 8}));
  EXPECT_EQ(L::Conv2D(8, 3, {.strides = {2}})(x).shape(), Shape({-1, 13, 13, 8}));
  EXPECT_EQ(L::Conv2D(8, {5, 3}, {.padding = "same"})(x).shape(), Shape({-1, 28, 28, 8}));
  EXPECT_EQ(L::Conv2D(8, 3, {.dilation_rate = {2}})(x).shape(), Shape({-1, 24, 24, 8}));
  auto grouped = L::Conv2D(6, 3, {.groups = 3});
  EXPECT_EQ(grouped(x).shape(), Shape({-1, 26, 26, 6}));
  EXPECT_EQ(grouped->weights()[0]->value.shape(), Shape({3, 3, 1, 6}));
  KTensor y = L::Input({7, 7, 4});
  EXPECT_EQ(L::MaxPooling2D({2, 2}, {.padding = "same"})(y).shape(), Shape({-1, 4, 4, 4}));
  EXPECT_EQ(L::MaxPooling2D({2, 2})(y).shape(), Shape({-1, 3, 3, 4}));
  EXPECT_EQ(L::AveragePooling2D({3, 3}, {.strides = {1}})(y).shape(), Shape({-1, 5, 5, 4}));
  EXPECT_EQ(L::GlobalAveragePooling2D()(y).shape(), Shape({-1, 4}));
  EXPECT_EQ(L::GlobalMaxPooling2D(true)(y).shape(), Shape({-1, 1, 1, 4}));
}

TEST_F(LayerTest, DepthwiseAndSeparable) {
  KTensor x = L::Input({8, 8, 3});
  auto dw = L::DepthwiseConv2D({3, 3}, {.depth_multiplier = 2});
  EXPECT_EQ(dw(x).shape(), Shape({-1, 6, 6, 6}));
  EXPECT_EQ(dw->name(), "depthwise_conv2d");
  EXPECT_EQ(weight_names(dw),
            (std::vector<std::string>{"depthwise_conv2d/kernel", "depthwise_conv2d/bias"}));
  EXPECT_EQ(dw->weights()[0]->value.shape(), Shape({3, 3, 3, 2}));
  EXPECT_EQ(dw->count_params(), 54 + 6);
  auto sep = L::SeparableConv2D(16, {3, 3}, {.padding = "same"});
  EXPECT_EQ(sep(x).shape(), Shape({-1, 8, 8, 16}));
  EXPECT_EQ(weight_names(sep), (std::vector<std::string>{"separable_conv2d/depthwise_kernel",
                                                         "separable_conv2d/pointwise_kernel",
                                                         "separable_conv2d/bias"}));
  EXPECT_EQ(sep->weights()[1]->value.shape(), Shape({1, 1, 3, 16}));
  EXPECT_EQ(sep->count_params(), 27 + 48 + 16);
  Graph g;
  auto ops = ops_of(dw, {Shape{-1, 8, 8, 3}}, false, &g);
  int conv = -1;
  for (auto& n : g.nodes())
    if (n.op == op::conv2d) conv = n.id;
  ASSERT_GE(conv, 0);
  EXPECT_EQ(g.node(conv).attrs.i("groups"), 3);
  EXPECT_EQ(g.type(g.node(conv).inputs[1]).shape, Shape({3, 3, 1, 6}));
}

TEST_F(LayerTest, ReshapingMergeMisc) {
  KTensor x = L::Input({8, 2});
  EXPECT_EQ(L::Reshape({-1, 4})(x).shape(), Shape({-1, 4, 4}));
  EXPECT_EQ(L::Reshape({16})(x).shape(), Shape({-1, 16}));
  EXPECT_EQ(L::Flatten()(x).shape(), Shape({-1, 16}));
  EXPECT_EQ(L::Dense(5)(x).shape(), Shape({-1, 8, 5}));
  EXPECT_EQ(L::Dropout(0.5)(x).shape(), Shape({-1, 8, 2}));
  EXPECT_EQ(L::Activation("gelu")(x).shape(), Shape({-1, 8, 2}));
  EXPECT_EQ(L::ReLU()(x).shape(), Shape({-1, 8, 2}));
  EXPECT_EQ(L::Rescaling(1.0 / 255)(x).shape(), Shape({-1, 8, 2}));
  EXPECT_EQ(L::LayerNormalization()(x).shape(), Shape({-1, 8, 2}));
  KTensor a = L::Input({4, 5}), b = L::Input({4, 3}), c = L::Input({4, 5});
  EXPECT_EQ(L::Concatenate()({a, b})[0].shape(), Shape({-1, 4, 8}));
  EXPECT_EQ(L::Concatenate(1)({a, c})[0].shape(), Shape({-1, 8, 5}));
  EXPECT_EQ(L::Add()({a, c, a})[0].shape(), Shape({-1, 4, 5}));
  EXPECT_EQ(L::Multiply()({a, c})[0].shape(), Shape({-1, 4, 5}));
}

TEST_F(LayerTest, ConvGraphIsConvBiasRelu) {
  auto conv = L::Conv2D(4, 3, {.activation = "relu"});
  auto ops = ops_of(conv, {Shape{-1, 8, 8, 2}}, false);
  EXPECT_EQ(ops, (std::vector<std::string>{"input", "variable", "conv2d", "variable", "bias_add",
                                           "relu"}));
  auto dense = L::Dense(3, {.activation = "softmax"});
  ops = ops_of(dense, {Shape{-1, 4}}, false);
  EXPECT_EQ(ops, (std::vector<std::string>{"input", "variable", "matmul", "variable", "bias_add",
                                           "softmax"}));
}

TEST_F(LayerTest, DropoutTrainingAndInference) {
  auto d = L::Dropout(0.25);
  EXPECT_EQ(ops_of(d, {Shape{-1, 4}}, false), (std::vector<std::string>{"input"}));
  Graph g;
  EXPECT_EQ(ops_of(d, {Shape{-1, 4}}, true, &g), (std::vector<std::string>{"input", "dropout"}));
  EXPECT_DOUBLE_EQ(g.node(1).attrs.f("rate"), 0.25);
  EXPECT_EQ(g.node(1).attrs.i("seed"), 0);  // keyed by model seed + node id in the kernel
  auto seeded = L::Dropout(0.1, 42);
  ops_of(seeded, {Shape{-1, 4}}, true, &g);
  EXPECT_EQ(g.node(1).attrs.i("seed"), 42);
}

TEST_F(LayerTest, BatchNormTrainingUpdatesMovingStats) {
  auto bn = L::BatchNormalization({.momentum = 0.9});
  Graph g;
  auto ops = ops_of(bn, {Shape{-1, 4, 4, 8}}, true, &g);
  int assigns = 0;
  bool train = false;
  for (auto& n : g.nodes()) {
    if (n.op == op::batch_norm_train) train = true;
    if (n.op == op::assign) {
      ++assigns;
      ASSERT_TRUE(n.variable);
      EXPECT_EQ(n.variable, g.node(n.inputs[0].node).variable);
    }
    if (n.op == op::scale_shift && n.attrs.f("scale") < 0.5) {
      EXPECT_NEAR(n.attrs.f("scale"), 0.1, 1e-12);
    }
  }
  EXPECT_TRUE(train);
  EXPECT_EQ(assigns, 2);
  ops = ops_of(bn, {Shape{-1, 4, 4, 8}}, false);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "batch_norm_infer"), 1);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "assign"), 0);
}

TEST_F(LayerTest, RegularizerAddsLossWhenTraining) {
  auto d = L::Dense(3, {.kernel_regularizer_l2 = 0.01});
  d->ensure_built({Shape{-1, 4}});
  Graph g;
  Value x = g.input({DType::f32, Shape{-1, 4}}, "x");
  CallContext ctx{g, true, 0, {}};
  d->call(ctx, {x});
  EXPECT_EQ(ctx.losses.size(), 1u);
  EXPECT_EQ(d->config()["kernel_regularizer"]["config"]["l2"], 0.01);
}

TEST_F(LayerTest, ConfigKeys) {
  KTensor x = L::Input({8, 8, 3});
  auto conv = L::Conv2D(16, 3, {.padding = "same", .activation = "relu"});
  conv(x);
  json c = conv->config();
  for (const char* k :
       {"name", "trainable", "dtype", "filters", "kernel_size", "strides", "padding", "data_format",
        "dilation_rate", "groups", "activation", "use_bias", "kernel_initializer",
        "bias_initializer", "kernel_regularizer", "bias_regularizer"})
    EXPECT_TRUE(c.contains(k)) << k;
  EXPECT_EQ(c["kernel_size"], json::parse("[3, 3]"));
  EXPECT_EQ(c["padding"], "same");
  EXPECT_EQ(c["data_format"], "channels_last");
  EXPECT_EQ(c["kernel_initializer"]["class_name"], "GlorotUniform");
  EXPECT_TRUE(c["kernel_initializer"]["config"]["seed"].is_null());
  EXPECT_EQ(c["bias_initializer"]["class_name"], "Zeros");
  EXPECT_TRUE(c["kernel_regularizer"].is_null());
  json d = L::Dense(10, {.kernel_initializer = "he_normal"})->config();
  EXPECT_EQ(d["units"], 10);
  EXPECT_EQ(d["activation"], "linear");
  EXPECT_EQ(d["kernel_initializer"]["class_name"], "HeNormal");
  json bn = L::BatchNormalization({.synchronized = true})->config();
  EXPECT_EQ(bn["momentum"], 0.99);
  EXPECT_EQ(bn["epsilon"], 1e-3);
  EXPECT_EQ(bn["synchronized"], true);
  EXPECT_EQ(L::Dropout(0.3)->config()["rate"], 0.3);
  EXPECT_EQ(L::MaxPooling2D()->config()["pool_size"], json::parse("[2, 2]"));
  EXPECT_EQ(L::MaxPooling2D()->config()["strides"], json::parse("[2, 2]"));
  EXPECT_EQ(L::Concatenate()->config()["axis"], -1);
  EXPECT_EQ(L::Reshape({4, 4})->config()["target_shape"], json::parse("[4, 4]"));
  EXPECT_EQ(L::ReLU()->name(), "re_lu");
  EXPECT_EQ(L::DepthwiseConv2D({3, 3})->config()["depth_multiplier"], 1);
}

TEST_F(LayerTest, ErrorsNameTheLayer) {
  KTensor x2 = L::Input({28, 28});
  L::Conv2D(8, 3);              // conv2d
  auto conv = L::Conv2D(8, 3);  // conv2d_1
  EXPECT_EQ(error_of([&] { conv(x2); }),
            "Conv2D 'conv2d_1': expected input of rank 4 (batch, height, width, channels), got "
            "(None, 28, 28) — add a channel axis, e.g. Input({28, 28, 1})");
  KTensor x3 = L::Input({8, 8, 3});
  std::string e = error_of([&] { L::Conv2D(4, 3, {.groups = 2, .name = "grp"})(x3); });
  EXPECT_NE(e.find("Conv2D 'grp'"), std::string::npos) << e;
  EXPECT_NE(e.find("not divisible by groups"), std::string::npos) << e;
  e = error_of([&] { L::Conv2D(5, 3, {.groups = 2}); });
  EXPECT_NE(e.find("filters (5) must be divisible by groups (2)"), std::string::npos) << e;
  e = error_of([&] { L::Dropout(1.5, 0, "drop"); });
  EXPECT_EQ(e, "Dropout 'drop': rate must be in [0, 1), got 1.5");
  e = error_of([&] { L::Dense(4, {.activation = "relux", .name = "fc"}); });
  EXPECT_NE(e.find("Dense 'fc': unknown activation 'relux'"), std::string::npos) << e;
  EXPECT_NE(e.find("softmax"), std::string::npos) << e;
  e = error_of([&] { L::Activation("nope"); });
  EXPECT_NE(e.find("Activation 'activation': unknown activation 'nope'"), std::string::npos) << e;
  KTensor a = L::Input({4, 5}), b = L::Input({3, 5});
  e = error_of([&] { L::Concatenate(-1, "cat")({a, b}); });
  EXPECT_NE(e.find("Concatenate 'cat'"), std::string::npos) << e;
  EXPECT_NE(e.find("(None, 4, 5), (None, 3, 5)"), std::string::npos) << e;
  e = error_of([&] { L::Add("plus")({a, b}); });
  EXPECT_NE(e.find("Add 'plus'"), std::string::npos) << e;
  e = error_of([&] { L::Dense(4, {.kernel_initializer = "glorot"}); });
  EXPECT_NE(e.find("unknown initializer 'glorot'"), std::string::npos) << e;
  e = error_of([&] { L::Conv2D(4, 3, {.padding = "full"}); });
  EXPECT_NE(e.find("padding must be"), std::string::npos) << e;
  e = error_of([&] { L::BatchNormalization({.axis = 0}); });
  EXPECT_NE(e.find("only the last axis"), std::string::npos) << e;
  e = error_of([&] { L::BatchNormalization({.axis = 1})(a); });  // rank 3: the last axis is 2
  EXPECT_NE(e.find("only the last axis (channels_last) is supported, got axis=1"),
            std::string::npos)
      << e;
  EXPECT_NO_THROW(L::BatchNormalization({.axis = 2})(a));
  e = error_of([&] { L::Reshape({5, 3}, "rs")(a); });
  EXPECT_NE(e.find("Reshape 'rs'"), std::string::npos) << e;
  KTensor small = L::Input({2, 2, 1});
  e = error_of([&] { L::Conv2D(4, 3, {.name = "big"})(small); });
  EXPECT_NE(e.find("big"), std::string::npos) << e;
  e = error_of([&] { L::Dense(3, {.name = "d3"})(L::Input({8, 8, 3})); });
  EXPECT_EQ(e, "");  // Dense applies to the last axis: no error
}

TEST_F(LayerTest, ApplyActivationNames) {
  Graph g;
  Value x = g.input({DType::f32, Shape{-1, 4}}, "x");
  EXPECT_EQ(apply_activation(g, x, "linear", "l"), x);
  EXPECT_EQ(apply_activation(g, x, "", "l"), x);
  for (const char* a : {"relu", "relu6", "sigmoid", "tanh", "softmax", "gelu", "swish", "silu",
                        "leaky_relu", "softplus"}) {
    Value y = apply_activation(g, x, a, "l");
    EXPECT_EQ(g.type(y).shape, Shape({-1, 4})) << a;
  }
  EXPECT_EQ(g.node(apply_activation(g, x, "silu", "l").node).op, op::swish);
  std::string e = error_of([&] { apply_activation(g, x, "foo", "my_layer"); });
  EXPECT_NE(e.find("my_layer"), std::string::npos) << e;
  EXPECT_NE(e.find("valid names"), std::string::npos) << e;
}

// ---- Initializers ----

namespace {
std::vector<float> init(const Shape& s, const std::string& name, uint64_t seed = 7) {
  Tensor t = Tensor::zeros(s);
  initialize(t, name, seed);
  return t.to_vector();
}
void moments(const std::vector<float>& v, double* mean, double* sd, double* maxabs) {
  double s = 0, s2 = 0, m = 0;
  for (float x : v) s += x, s2 += double(x) * x, m = std::max(m, double(std::fabs(x)));
  *mean = s / v.size();
  *sd = std::sqrt(s2 / v.size() - *mean * *mean);
  *maxabs = m;
}
}  // namespace

TEST(InitTest, GlorotUniformBound) {
  auto v = init(Shape{100, 200}, "glorot_uniform");
  double mean, sd, maxabs, limit = std::sqrt(6.0 / 300);
  moments(v, &mean, &sd, &maxabs);
  EXPECT_LE(maxabs, limit);
  EXPECT_GT(maxabs, 0.98 * limit);
  EXPECT_NEAR(mean, 0.0, 0.01 * limit);
  EXPECT_NEAR(sd, limit / std::sqrt(3.0), 0.02 * limit);
  // Conv fans: [3,3,32,64] -> fan_in 288, fan_out 576.
  auto c = init(Shape{3, 3, 32, 64}, "GlorotUniform");
  moments(c, &mean, &sd, &maxabs);
  EXPECT_LE(maxabs, std::sqrt(6.0 / (288 + 576)));
}

TEST(InitTest, HeNormalAndLecunStd) {
  auto v = init(Shape{3, 3, 64, 128}, "he_normal");
  double mean, sd, maxabs, want = std::sqrt(2.0 / 576);
  moments(v, &mean, &sd, &maxabs);
  EXPECT_NEAR(sd, want, 0.03 * want);
  EXPECT_NEAR(mean, 0.0, 0.02 * want);
  EXPECT_LE(maxabs, 2 * want / 0.87962566103423978 + 1e-6);  // truncated at 2 stddev
  auto l = init(Shape{400, 300}, "lecun_normal");
  moments(l, &mean, &sd, &maxabs);
  EXPECT_NEAR(sd, std::sqrt(1.0 / 400), 0.03 * std::sqrt(1.0 / 400));
  auto hu = init(Shape{400, 300}, "he_uniform");
  moments(hu, &mean, &sd, &maxabs);
  EXPECT_LE(maxabs, std::sqrt(6.0 / 400));
  auto lu = init(Shape{400, 300}, "lecun_uniform");
  moments(lu, &mean, &sd, &maxabs);
  EXPECT_LE(maxabs, std::sqrt(3.0 / 400));
  auto gn = init(Shape{400, 300}, "glorot_normal");
  moments(gn, &mean, &sd, &maxabs);
  EXPECT_NEAR(sd, std::sqrt(2.0 / 700), 0.03 * std::sqrt(2.0 / 700));
}

TEST(InitTest, RandomConstantsAndSeeds) {
  double mean, sd, maxabs;
  auto rn = init(Shape{200, 200}, "random_normal");
  moments(rn, &mean, &sd, &maxabs);
  EXPECT_NEAR(sd, 0.05, 0.002);
  auto ru = init(Shape{200, 200}, "random_uniform");
  moments(ru, &mean, &sd, &maxabs);
  EXPECT_LE(maxabs, 0.05);
  EXPECT_GT(maxabs, 0.049);
  for (float x : init(Shape{5}, "zeros")) EXPECT_EQ(x, 0.f);
  for (float x : init(Shape{5}, "ones")) EXPECT_EQ(x, 1.f);
  for (float x : init(Shape{5}, "constant:0.25")) EXPECT_EQ(x, 0.25f);
  EXPECT_EQ(init(Shape{10, 10}, "glorot_uniform", 3), init(Shape{10, 10}, "glorot_uniform", 3));
  EXPECT_NE(init(Shape{10, 10}, "glorot_uniform", 3), init(Shape{10, 10}, "glorot_uniform", 4));
}

TEST(InitTest, UnknownNameListsValidNames) {
  std::string e = error_of([] { init(Shape{2}, "xavier"); });
  EXPECT_NE(e.find("unknown initializer 'xavier'"), std::string::npos) << e;
  EXPECT_NE(e.find("glorot_uniform"), std::string::npos) << e;
  EXPECT_NE(e.find("he_normal"), std::string::npos) << e;
  EXPECT_NE(error_of([] { init(Shape{2}, "constant:abc"); }), "");
}

TEST_F(LayerTest, LayerWeightsDifferAcrossLayers) {
  auto a = L::Dense(8, {.name = "a"}), b = L::Dense(8, {.name = "b"});
  a->ensure_built({Shape{-1, 8}});
  b->ensure_built({Shape{-1, 8}});
  EXPECT_NE(a->weights()[0]->value.to_vector(), b->weights()[0]->value.to_vector());
}
