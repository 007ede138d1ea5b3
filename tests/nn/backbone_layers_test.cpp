// The layers keras.applications backbones need: ZeroPadding2D, ReLU(max_value, negative_slope)
// and Dropout(noise_shape), against values Keras 3 computed (printed by keras.layers.* on the
// same inputs), their configs both ways, bf16, and the VarianceScaling initializer's config.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/graph/executable.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/nn/layers.h"

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

// Builds `l` for x's shape (batch symbolic), calls it and runs it on `backend`.
Tensor run_layer(const LayerHandle& l, const Tensor& x, bool training = false,
                 const std::string& backend = "reference", DType dtype = DType::f32) {
  l->ensure_built({x.shape().with_dim(0, -1)});
  Graph g;
  Value in = g.input({DType::f32, x.shape()}, "x");
  Value v = dtype == DType::f32 ? in : g.add(op::cast, {in}, Attrs{{"dtype", "bfloat16"}});
  CallContext ctx{g, training, 0, {}};
  Value y = l->call(ctx, {v})[0];
  if (g.type(y).dtype != DType::f32) y = g.add(op::cast, {y}, Attrs{{"dtype", "float32"}});
  Executable exe(g, {in}, {y}, {.backend = backend});
  exe.input(0).copy_from(x);
  exe.run();
  return exe.output(0).clone();
}

const std::vector<float> kReluIn = {-8, -2.5, -0.5, 0, 0.25, 1, 3, 5.5, 6, 7.5};

void expect_values(const Tensor& got, const std::vector<float>& want, double tol = 1e-6) {
  auto g = got.to_vector();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "element " << i;
}

LayerPtr round_trip(const LayerHandle& l) {
  return layer_from_config(json{{"class_name", l->class_name()}, {"config", l->config()}});
}

}  // namespace

// keras.layers.ReLU(**kw)(x) for x = kReluIn (Keras 3.15).
TEST(BackboneLayers, ReLUMaxValueAndSlopeMatchKeras) {
  Tensor x = Tensor::from_vector(Shape{2, 5}, kReluIn);
  struct Case {
    L::ReLUOptions o;
    std::vector<float> keras;
  };
  const std::vector<Case> cases = {
      {{.max_value = 6.0}, {0, 0, 0, 0, 0.25, 1, 3, 5.5, 6, 6}},
      {{.max_value = 1.5}, {0, 0, 0, 0, 0.25, 1, 1.5, 1.5, 1.5, 1.5}},
      {{.negative_slope = 0.2}, {-1.6f, -0.5f, -0.1f, 0, 0.25, 1, 3, 5.5, 6, 7.5}},
      {{.max_value = 6.0, .negative_slope = 0.1},
       {-0.8f, -0.25f, -0.05f, 0, 0.25, 1, 3, 5.5, 6, 6}},
  };
  for (const Case& c : cases) {
    for (const char* backend : {"reference", "cpu"})
      expect_values(run_layer(L::ReLU(c.o), x, false, backend), c.keras);
    // bf16: every value above is exact in bfloat16.
    expect_values(run_layer(L::ReLU(c.o), x, false, "cpu", DType::bf16), c.keras, 0.01);
    LayerPtr back = round_trip(L::ReLU(c.o));
    EXPECT_EQ(
        back->config(),
        L::ReLU(L::ReLUOptions{c.o.max_value, c.o.negative_slope, 0.0, back->name()})->config());
    expect_values(run_layer(back, x), c.keras);
  }
  EXPECT_EQ(L::ReLU({.max_value = 6.0})->config()["max_value"], 6.0);
  EXPECT_TRUE(L::ReLU()->config()["max_value"].is_null());
  EXPECT_THROW(L::ReLU({.threshold = 1.0}), Error);
}

// keras.layers.ZeroPadding2D(((1, 0), (2, 1)))(arange(1, 7).reshape(1, 2, 3, 1)).
TEST(BackboneLayers, ZeroPadding2DMatchesKeras) {
  std::vector<float> in{1, 2, 3, 4, 5, 6};
  Tensor x = Tensor::from_vector(Shape{1, 2, 3, 1}, in);
  const std::vector<float> keras = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0};
  for (const char* backend : {"reference", "cpu"}) {
    Tensor y = run_layer(L::ZeroPadding2D({1, 0, 2, 1}), x, false, backend);
    EXPECT_EQ(y.shape(), Shape({1, 3, 6, 1}));
    expect_values(y, keras);
  }
  expect_values(run_layer(L::ZeroPadding2D({1, 0, 2, 1}), x, false, "cpu", DType::bf16), keras);
  // Keras's config forms: 2 -> ((2, 2), (2, 2)); (1, 2) -> ((1, 1), (2, 2)).
  EXPECT_EQ(L::ZeroPadding2D({2})->config()["padding"], json::parse("[[2, 2], [2, 2]]"));
  EXPECT_EQ(L::ZeroPadding2D({1, 2})->config()["padding"], json::parse("[[1, 1], [2, 2]]"));
  for (const char* padding : {"2", "[1, 2]", "[[1, 0], [2, 1]]"}) {
    LayerPtr l = layer_from_config(json{
        {"class_name", "ZeroPadding2D"},
        {"config",
         {{"name", "zp"}, {"padding", json::parse(padding)}, {"data_format", "channels_last"}}}});
    EXPECT_EQ(l->class_name(), "ZeroPadding2D");
  }
  expect_values(run_layer(round_trip(L::ZeroPadding2D({1, 0, 2, 1})), x), keras);
  EXPECT_THROW(L::ZeroPadding2D({1, 2, 3}), Error);
}

// Dropout(noise_shape=(None, 1, 1, 1)) drops whole examples: each example is all zeros or all
// x / (1 - rate); the identity at inference.
TEST(BackboneLayers, DropoutNoiseShapeDropsWholeExamples) {
  const int64_t N = 64;
  Tensor x = Tensor::full(Shape{N, 2, 2, 3}, 1.0f);
  auto d = L::Dropout(0.5, {.seed = 3, .noise_shape = {-1, 1, 1, 1}});
  auto y = run_layer(d, x, true).to_vector();
  int dropped = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float first = y[size_t(n * 12)];
    EXPECT_TRUE(first == 0.0f || first == 2.0f) << first;
    for (int i = 1; i < 12; ++i) EXPECT_EQ(y[size_t(n * 12 + i)], first) << "example " << n;
    dropped += first == 0.0f;
  }
  EXPECT_GT(dropped, 8);
  EXPECT_LT(dropped, 56);
  expect_values(run_layer(d, x, false), x.to_vector());
  EXPECT_EQ(d->config()["noise_shape"], json::parse("[null, 1, 1, 1]"));
  LayerPtr back = round_trip(d);
  EXPECT_EQ(back->config()["noise_shape"], json::parse("[null, 1, 1, 1]"));
  EXPECT_TRUE(L::Dropout(0.5)->config()["noise_shape"].is_null());
}

// keras.initializers.VarianceScaling(scale, mode, distribution) in a config both ways, and its
// statistics: uniform within sqrt(3 * scale / fan).
TEST(BackboneLayers, VarianceScalingInitializerFromKerasConfig) {
  json c = {{"name", "stem"},
            {"filters", 8},
            {"kernel_size", {3, 3}},
            {"kernel_initializer",
             {{"class_name", "VarianceScaling"},
              {"config",
               {{"scale", 2.0},
                {"mode", "fan_out"},
                {"distribution", "truncated_normal"},
                {"seed", nullptr}}}}}};
  LayerPtr conv = layer_from_config(json{{"class_name", "Conv2D"}, {"config", c}});
  json k = conv->config()["kernel_initializer"];
  EXPECT_EQ(k["class_name"], "VarianceScaling");
  EXPECT_EQ(k["config"]["mode"], "fan_out");
  EXPECT_EQ(k["config"]["distribution"], "truncated_normal");
  EXPECT_DOUBLE_EQ(k["config"]["scale"].get<double>(), 2.0);
  Tensor t = Tensor::zeros(Shape{3, 3, 16, 100});
  initialize(t, "variance_scaling:0.3333333333333333:fan_out:uniform", 5);
  const double limit = std::sqrt(3.0 * (1.0 / 3.0) / (9 * 100));
  double maxabs = 0;
  for (float v : t.to_vector()) maxabs = std::max(maxabs, double(std::fabs(v)));
  EXPECT_LE(maxabs, limit + 1e-7);
  EXPECT_GT(maxabs, 0.9 * limit);
  EXPECT_THROW(check_initializer("variance_scaling:2:fan_sideways:uniform"), Error);
}
