// LeakyReLU, ELU, PReLU, GroupNormalization and SpatialDropout2D, and RandomContrast's config:
// outputs against values Keras 3.15 computed, gradients against finite differences, bf16 under
// mixed precision, weight names and shapes, and configs both ways (Keras's own JSON read,
// Lockstep's written and read back).
//
// The expected values were computed once with Keras 3.15.1 on JAX (.venv-interop,
// KERAS_BACKEND=jax) by calling the layer on the input shown next to each case, e.g.
//   keras.layers.ELU(alpha=0.5)(np.array([-8, -2.5, ...], "float32").reshape(2, 5))
// with the weights assigned as the test assigns them; printed as float32 and pasted here.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/layers.h"
#include "lockstep/nn/mixed_precision.h"

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

// Builds `l` for x's shape (batch symbolic), calls it and runs it on `backend`; `dtype` bf16
// feeds the layer bfloat16 input under its own mixed_bfloat16 policy (as Layer::invoke would).
Tensor run_layer(const LayerHandle& l, const Tensor& x, bool training = false,
                 const std::string& backend = "reference", DType dtype = DType::f32) {
  l->ensure_built({x.shape().with_dim(0, -1)});
  Graph g;
  Value in = g.input({DType::f32, x.shape()}, "x");
  CallContext ctx{g, training, 0, {}};
  Value y = l->invoke(ctx, {in})[0];
  if (dtype == DType::bf16) EXPECT_EQ(g.type(y).dtype, DType::bf16) << l->name();
  if (g.type(y).dtype != DType::f32) y = g.add(op::cast, {y}, Attrs{{"dtype", "float32"}});
  Executable exe(g, {in}, {y}, {.backend = backend});
  exe.input(0).copy_from(x);
  exe.run();
  return exe.output(0).clone();
}

void expect_values(const Tensor& got, const std::vector<float>& want, double tol = 1e-5) {
  auto g = got.to_vector();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
}

LayerPtr round_trip(const LayerHandle& l) {
  return layer_from_config(json{{"class_name", l->class_name()}, {"config", l->config()}});
}

// The layer's config without its name (two layers built from one config differ only there).
json unnamed(const json& c) {
  json r = c;
  r.erase("name");
  return r;
}

// ((i * 7) % 11) * 0.5 - 2: the inputs the Keras values were computed on.
Tensor gen(Shape s) {
  std::vector<float> v;
  for (int64_t i = 0; i < s.numel(); ++i) v.push_back(float((i * 7) % 11) * 0.5f - 2.f);
  return Tensor::from_vector(s, v);
}

// gen(s) + 0.13: no value at the kink x = 0 of the (leaky, parametric, exponential) ReLUs, for
// central differences.
Tensor off_kink(Shape s) {
  std::vector<float> v = gen(s).to_vector();
  for (float& f : v) f += 0.13f;
  return Tensor::from_vector(s, v);
}

const std::vector<float> kActIn = {-8, -2.5, -0.5, 0, 0.25, 1, 3, 5.5, 6, 7.5};

// d(sum(y * r))/dx and /dw for each weight w of `l`, from autodiff, against central
// differences of the same program (float32, reference backend).
void expect_fd_gradients(const LayerHandle& l, const Tensor& x0, double tol = 2e-3) {
  l->ensure_built({x0.shape().with_dim(0, -1)});
  Graph g;
  Value in = g.input({DType::f32, x0.shape()}, "x");
  CallContext ctx{g, true, 0, {}};
  Value y = l->invoke(ctx, {in})[0];
  const Shape ys = g.type(y).shape;
  std::vector<float> rv;
  for (int64_t i = 0; i < ys.numel(); ++i) rv.push_back(0.3f + 0.1f * float((i * 5) % 7));
  Value r = g.input({DType::f32, ys}, "r");
  Value loss = g.add(op::reduce_sum, {g.add(op::mul, {y, r})});
  std::vector<Value> wrt{in};
  for (const VariablePtr& w : l->weights()) wrt.push_back(g.variable(w));
  std::vector<Value> grads = gradients(g, loss, wrt);
  std::vector<Value> outs{loss};
  outs.insert(outs.end(), grads.begin(), grads.end());
  Executable exe(g, {in, r}, outs, {.backend = "reference"});
  Tensor rt = Tensor::from_vector(ys, rv);
  auto eval = [&](const Tensor& x) {
    exe.input(0).copy_from(x);
    exe.input(1).copy_from(rt);
    exe.run();
    return double(exe.output(0).to_vector()[0]);
  };
  eval(x0);
  std::vector<std::vector<float>> analytic;
  for (size_t i = 1; i < outs.size(); ++i) analytic.push_back(exe.output(int(i)).to_vector());
  const float eps = 1e-2f;
  // The input.
  std::vector<float> xv = x0.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    std::vector<float> p = xv, m = xv;
    p[i] += eps;
    m[i] -= eps;
    double fd =
        (eval(Tensor::from_vector(x0.shape(), p)) - eval(Tensor::from_vector(x0.shape(), m))) /
        (2 * eps);
    EXPECT_NEAR(analytic[0][i], fd, tol * (1 + std::abs(fd))) << l->name() << " dx[" << i << "]";
  }
  // Each weight.
  for (size_t w = 0; w < l->weights().size(); ++w) {
    Tensor& value = l->weights()[w]->value;
    std::vector<float> wv = value.to_vector();
    for (size_t i = 0; i < wv.size(); ++i) {
      std::vector<float> p = wv, m = wv;
      p[i] += eps;
      m[i] -= eps;
      value.copy_from(Tensor::from_vector(value.shape(), p));
      double fp = eval(x0);
      value.copy_from(Tensor::from_vector(value.shape(), m));
      double fm = eval(x0);
      value.copy_from(Tensor::from_vector(value.shape(), wv));
      double fd = (fp - fm) / (2 * eps);
      EXPECT_NEAR(analytic[w + 1][i], fd, tol * (1 + std::abs(fd)))
          << l->weights()[w]->name << "[" << i << "]";
    }
  }
}

}  // namespace

// keras.layers.LeakyReLU()(x) and LeakyReLU(negative_slope=0.05)(x), x = kActIn [2, 5].
TEST(ExtraLayers, LeakyReLUMatchesKeras) {
  Tensor x = Tensor::from_vector(Shape{2, 5}, kActIn);
  const std::vector<float> keras_default = {-2.4f, -0.75f, -0.15f, 0, 0.25, 1, 3, 5.5, 6, 7.5};
  const std::vector<float> keras_005 = {-0.4f, -0.125f, -0.025f, 0, 0.25, 1, 3, 5.5, 6, 7.5};
  for (const char* backend : {"reference", "cpu"}) {
    expect_values(run_layer(L::LeakyReLU(), x, false, backend), keras_default);
    expect_values(run_layer(L::LeakyReLU(0.05), x, false, backend), keras_005);
  }
  LayerHandle bf = L::LeakyReLU();
  bf->set_dtype_policy("mixed_bfloat16");
  expect_values(run_layer(bf, x, false, "cpu", DType::bf16), keras_default, 1e-2);
  EXPECT_EQ(L::LeakyReLU()->config()["negative_slope"], 0.3);
  EXPECT_EQ(L::LeakyReLU()->name().rfind("leaky_re_lu", 0), 0u);
  EXPECT_THROW(L::LeakyReLU(-0.1), Error);
  expect_fd_gradients(L::LeakyReLU(0.2), off_kink(Shape{2, 5}));
}

// keras.layers.ELU()(x), ELU(alpha=0.5)(x) and Activation("elu")(x), x = kActIn [2, 5].
TEST(ExtraLayers, ELUMatchesKeras) {
  Tensor x = Tensor::from_vector(Shape{2, 5}, kActIn);
  const std::vector<float> keras_1 = {-0.9996645450592041f,
                                      -0.9179149866104126f,
                                      -0.39346933364868164f,
                                      0,
                                      0.25,
                                      1,
                                      3,
                                      5.5,
                                      6,
                                      7.5};
  const std::vector<float> keras_05 = {-0.49983227252960205f,
                                       -0.4589574933052063f,
                                       -0.19673466682434082f,
                                       0,
                                       0.25,
                                       1,
                                       3,
                                       5.5,
                                       6,
                                       7.5};
  for (const char* backend : {"reference", "cpu"}) {
    expect_values(run_layer(L::ELU(), x, false, backend), keras_1);
    expect_values(run_layer(L::ELU(0.5), x, false, backend), keras_05);
    expect_values(run_layer(L::Activation("elu"), x, false, backend), keras_1);
  }
  LayerHandle bf = L::ELU(0.5);
  bf->set_dtype_policy("mixed_bfloat16");
  expect_values(run_layer(bf, x, false, "cpu", DType::bf16), keras_05, 1e-2);
  expect_fd_gradients(L::ELU(0.7), off_kink(Shape{2, 5}));
}

// PReLU(shared_axes=[1, 2]) on gen([2, 2, 2, 4]) with alpha = [0.1, 0.2, -0.5, 1.5] (shape
// [1, 1, 4]), and PReLU() on kActIn [2, 5] with alpha = [0.1 .. 0.5].
TEST(ExtraLayers, PReLUMatchesKeras) {
  LayerHandle shared = L::PReLU({.shared_axes = {1, 2}});
  shared->ensure_built({Shape{-1, 2, 2, 4}});
  ASSERT_EQ(shared->weights().size(), 1u);
  EXPECT_EQ(shared->weights()[0]->value.shape(), Shape({1, 1, 4}));
  EXPECT_EQ(shared->weights()[0]->name, shared->name() + "/alpha");
  shared->weights()[0]->value.copy_from(
      Tensor::from_vector(Shape{1, 1, 4}, {0.1f, 0.2f, -0.5f, 1.5f}));
  const std::vector<float> keras_shared = {-0.2f,  1.5f, 0.25f, 3.0f,   1.0f, -0.2f, 2.5f,  0.5f,
                                           -0.15f, 2.0f, 0.0f,  -3.0f,  1.5f, -0.1f, 3.0f,  1.0f,
                                           -0.1f,  2.5f, 0.5f,  -2.25f, 2.0f, 0.0f,  1.0f,  1.5f,
                                           -0.05f, 3.0f, 1.0f,  -1.5f,  2.5f, 0.5f,  0.75f, 2.0f};
  for (const char* backend : {"reference", "cpu"})
    expect_values(run_layer(shared, gen(Shape{2, 2, 2, 4}), false, backend), keras_shared);

  LayerHandle full = L::PReLU();
  full->ensure_built({Shape{-1, 5}});
  EXPECT_EQ(full->weights()[0]->value.shape(), Shape({5}));
  EXPECT_EQ(full->weights()[0]->value.to_vector(), std::vector<float>(5, 0.f));  // Keras: Zeros
  full->weights()[0]->value.copy_from(
      Tensor::from_vector(Shape{5}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}));
  const std::vector<float> keras_full = {-0.8f, -0.5f, -0.15f, 0, 0.25, 1, 3, 5.5, 6, 7.5};
  Tensor x = Tensor::from_vector(Shape{2, 5}, kActIn);
  expect_values(run_layer(full, x, false, "cpu"), keras_full);
  full->set_dtype_policy("mixed_bfloat16");
  expect_values(run_layer(full, x, false, "cpu", DType::bf16), keras_full, 1e-2);

  LayerHandle fd = L::PReLU({.shared_axes = {1, 2}});
  fd->ensure_built({Shape{-1, 2, 2, 4}});
  fd->weights()[0]->value.copy_from(Tensor::from_vector(Shape{1, 1, 4}, {0.1f, 0.2f, -0.5f, 1.5f}));
  expect_fd_gradients(fd, off_kink(Shape{2, 2, 2, 4}));

  EXPECT_THROW(L::PReLU({.shared_axes = {0}}), Error);
  EXPECT_THROW(L::PReLU({.alpha_initializer = "no_such"}), Error);
  EXPECT_THROW(L::PReLU({.shared_axes = {4}})->ensure_built({Shape{-1, 2, 2, 4}}), Error);
}

// GroupNormalization(groups=2) on gen([2, 2, 2, 4]) with gamma = [1, 0.5, 2, -1], beta =
// [0, 0.25, -0.5, 1]; GroupNormalization(groups=3, epsilon=0.01, center=False) on gen([2, 6]).
TEST(ExtraLayers, GroupNormalizationMatchesKeras) {
  LayerHandle gn = L::GroupNormalization({.groups = 2});
  gn->ensure_built({Shape{-1, 2, 2, 4}});
  ASSERT_EQ(gn->weights().size(), 2u);  // Keras's order: gamma, beta
  EXPECT_EQ(gn->weights()[0]->name, gn->name() + "/gamma");
  EXPECT_EQ(gn->weights()[1]->name, gn->name() + "/beta");
  EXPECT_EQ(gn->weights()[0]->value.shape(), Shape({4}));
  gn->weights()[0]->value.copy_from(Tensor::from_vector(Shape{4}, {1.f, 0.5f, 2.f, -1.f}));
  gn->weights()[1]->value.copy_from(Tensor::from_vector(Shape{4}, {0.f, 0.25f, -0.5f, 1.f}));
  const std::vector<float> keras = {
      -1.4627803564071655f, 0.7232524156570435f,   -2.205745220184326f,  -0.22368693351745605f,
      0.6023213267326355f,  -0.13720658421516418f, 1.354071021080017f,   1.2595698833465576f,
      -1.1185966730117798f, 0.8953442573547363f,   -1.6124426126480103f, 2.7428267002105713f,
      0.9465048909187317f,  0.0348852276802063f,   1.9473737478256226f,  0.9629185199737549f,
      -1.462780475616455f,  0.723252534866333f,    0.3604590594768524f,  1.946504831314087f,
      0.6023213267326355f,  -0.13720658421516418f, -3.0813772678375244f, -0.11859673261642456f,
      -1.1185967922210693f, 0.8953442573547363f,   1.0488263368606567f,  1.6023213863372803f,
      0.9465050101280212f,  0.0348852276802063f,   -2.393009901046753f,  -0.4627804160118103f};
  Tensor x = gen(Shape{2, 2, 2, 4});
  for (const char* backend : {"reference", "cpu"})
    expect_values(run_layer(gn, x, false, backend), keras);
  // Training and inference are the same computation (no moving statistics).
  expect_values(run_layer(gn, x, true, "cpu"), keras);
  gn->set_dtype_policy("mixed_bfloat16");
  expect_values(run_layer(gn, x, false, "cpu", DType::bf16), keras, 2e-2);
  gn->set_dtype_policy("float32");
  expect_fd_gradients(gn, x, 5e-3);

  LayerHandle gn2 = L::GroupNormalization({.groups = 3, .epsilon = 0.01, .center = false});
  const std::vector<float> keras2 = {
      -0.9983712434768677f, 0.9983712434768677f,  -0.9983713030815125f, 0.9983712434768677f,
      0.9950371980667114f,  -0.9950371980667114f, 0.9950370788574219f,  -0.9950372576713562f,
      -0.9983712434768677f, 0.9983712434768677f,  0.9950371980667114f,  -0.9950371980667114f};
  expect_values(run_layer(gn2, gen(Shape{2, 6}), false, "cpu"), keras2);
  ASSERT_EQ(gn2->weights().size(), 1u);  // gamma only

  EXPECT_THROW(L::GroupNormalization({.groups = 3})->ensure_built({Shape{-1, 4, 4, 4}}), Error);
  EXPECT_THROW(L::GroupNormalization({.groups = 8})->ensure_built({Shape{-1, 4}}), Error);
  EXPECT_THROW(L::GroupNormalization({.axis = 1})->ensure_built({Shape{-1, 4, 4, 4}}), Error);
  EXPECT_THROW(L::GroupNormalization({.groups = 0}), Error);
}

// SpatialDropout2D drops whole channels: each (example, channel) map is all zeros or all x / (1 -
// rate); inference is the identity.
TEST(ExtraLayers, SpatialDropout2DDropsWholeChannels) {
  const int64_t N = 4, H = 3, W = 5, C = 16;
  std::vector<float> v(size_t(N * H * W * C));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.f + float(i % 13);
  Tensor x = Tensor::from_vector(Shape{N, H, W, C}, v);
  for (const char* backend : {"reference", "cpu"}) {
    LayerHandle sd = L::SpatialDropout2D(0.5, 7);
    EXPECT_EQ(run_layer(sd, x, false, backend).to_vector(), v);
    std::vector<float> y = run_layer(sd, x, true, backend).to_vector();
    int dropped = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const bool zero = y[size_t(n * H * W * C + c)] == 0.f;
        dropped += zero;
        for (int64_t p = 0; p < H * W; ++p) {
          const size_t i = size_t((n * H * W + p) * C + c);
          EXPECT_FLOAT_EQ(y[i], zero ? 0.f : v[i] * 2.f) << backend << " n=" << n << " c=" << c;
        }
      }
    EXPECT_GT(dropped, 0) << backend;
    EXPECT_LT(dropped, N * C) << backend;
  }
  EXPECT_THROW(L::SpatialDropout2D(0.5)->ensure_built({Shape{-1, 8}}), Error);
  EXPECT_THROW(L::SpatialDropout2D(1.0), Error);
  LayerHandle bf = L::SpatialDropout2D(0.25, 3);
  bf->set_dtype_policy("mixed_bfloat16");
  std::vector<float> y = run_layer(bf, x, true, "cpu", DType::bf16).to_vector();
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_TRUE(y[i] == 0.f || std::abs(y[i] - v[i] / 0.75f) < 0.05f * v[i]) << i;
}

// The configs Keras 3.15 writes (get_config(), pasted) build the same layers, and Lockstep's
// configs read back to equal layers.
TEST(ExtraLayers, KerasConfigsBothWays) {
  const json policy = {{"module", "keras"},
                       {"class_name", "DTypePolicy"},
                       {"config", {{"name", "float32"}}},
                       {"registered_name", nullptr}};
  auto init = [](const char* cls) {
    return json{{"module", "keras.initializers"},
                {"class_name", cls},
                {"config", json::object()},
                {"registered_name", nullptr}};
  };
  const json keras[] = {
      {{"class_name", "GroupNormalization"},
       {"config",
        {{"name", "group_normalization"},
         {"trainable", true},
         {"dtype", policy},
         {"groups", 2},
         {"axis", -1},
         {"epsilon", 0.001},
         {"center", true},
         {"scale", true},
         {"beta_initializer", init("Zeros")},
         {"gamma_initializer", init("Ones")},
         {"beta_regularizer", nullptr},
         {"gamma_regularizer", nullptr},
         {"beta_constraint", nullptr},
         {"gamma_constraint", nullptr}}}},
      {{"class_name", "SpatialDropout2D"},
       {"config",
        {{"rate", 0.3},
         {"seed", nullptr},
         {"name", "spatial_dropout2d"},
         {"dtype", "float32"},
         {"data_format", "channels_last"}}}},
      {{"class_name", "LeakyReLU"},
       {"config",
        {{"name", "leaky_re_lu"},
         {"trainable", true},
         {"dtype", policy},
         {"negative_slope", 0.3}}}},
      {{"class_name", "PReLU"},
       {"config",
        {{"name", "p_re_lu"},
         {"trainable", true},
         {"dtype", policy},
         {"alpha_initializer", init("Zeros")},
         {"alpha_regularizer", nullptr},
         {"alpha_constraint", nullptr},
         {"shared_axes", {1, 2}}}}},
      {{"class_name", "ELU"},
       {"config", {{"name", "elu"}, {"alpha", 1.0}, {"trainable", true}, {"dtype", policy}}}},
      {{"class_name", "RandomContrast"},
       {"config",
        {{"name", "random_contrast"},
         {"trainable", true},
         {"dtype", policy},
         {"data_format", "channels_last"},
         {"factor", {0, 0.2}},
         {"value_range", {0, 255}},
         {"seed", nullptr}}}},
  };
  for (const json& k : keras) {
    LayerPtr l = layer_from_config(k);
    const std::string cls = k["class_name"];
    EXPECT_EQ(l->class_name(), cls);
    EXPECT_EQ(l->name(), k["config"]["name"]);
    // Every key Lockstep writes has Keras's value (Lockstep adds trainable where Keras's
    // SpatialDropout2D does not write it).
    const json mine = l->config();
    for (auto& [key, val] : k["config"].items())
      if (key != "dtype") EXPECT_EQ(mine.value(key, json()), val) << cls << " key " << key;
    EXPECT_EQ(unnamed(round_trip(l)->config()), unnamed(mine)) << cls;
  }
  // Defaults and options written by Lockstep's factories read back the same.
  const LayerHandle mine[] = {
      L::GroupNormalization(
          {.groups = 4, .epsilon = 1e-5, .center = false, .gamma_initializer = "glorot_uniform"}),
      L::SpatialDropout2D(0.1, 42),
      L::LeakyReLU(0.01),
      L::ELU(2.0),
      L::PReLU({.alpha_initializer = "constant:0.25", .alpha_regularizer_l2 = 0.01}),
      L::PReLU(),
      L::RandomContrast(0.3),
      L::RandomContrast({0.1, 0.4})};
  for (const LayerHandle& l : mine)
    EXPECT_EQ(unnamed(round_trip(l)->config()), unnamed(l->config())) << l->class_name();
  EXPECT_EQ(L::GroupNormalization()->config()["groups"], 32);
  EXPECT_EQ(L::GroupNormalization()->config()["epsilon"], 1e-3);
  EXPECT_TRUE(L::PReLU()->config()["shared_axes"].is_null());
  // Keras's SpatialDropout2D refuses a `trainable` argument, so its config has none.
  EXPECT_FALSE(L::SpatialDropout2D(0.1)->config().contains("trainable"));
  // Keras 2's LeakyReLU wrote its slope as alpha.
  EXPECT_EQ(
      layer_from_config({{"class_name", "LeakyReLU"}, {"config", {{"name", "lr"}, {"alpha", 0.1}}}})
          ->config()["negative_slope"],
      0.1);
  // Unsupported options are refused naming the layer and the key.
  try {
    layer_from_config(
        {{"class_name", "GroupNormalization"},
         {"config", {{"name", "gn"}, {"gamma_constraint", {{"class_name", "NonNeg"}}}}}});
    ADD_FAILURE() << "a gamma_constraint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gamma_constraint"), std::string::npos) << e.what();
  }
  EXPECT_THROW(layer_from_config({{"class_name", "SpatialDropout2D"},
                                  {"config", {{"rate", 0.2}, {"data_format", "channels_first"}}}}),
               Error);
  EXPECT_THROW(layer_from_config({{"class_name", "RandomContrast"},
                                  {"config", {{"name", "rc"}, {"factor", 1.5}}}}),
               Error);
}

// RandomContrast's factor as Keras 3.15 reads it: one number f is (0, f), so a Keras file's
// factor 0.2 draws contrast factors in [1, 1.2]; Lockstep writes its own ranges as the pair
// Keras reads back as that range ([0.3, 0.3] for Lockstep's RandomContrast(0.3), [0.7, 1.3]).
TEST(ExtraLayers, RandomContrastFactorFollowsKeras) {
  LayerPtr one = layer_from_config(
      {{"class_name", "RandomContrast"}, {"config", {{"name", "rc"}, {"factor", 0.2}}}});
  EXPECT_EQ(one->config()["factor"], json({0.0, 0.2}));
  EXPECT_EQ(L::RandomContrast(0.3)->config()["factor"], json({0.3, 0.3}));
  LayerPtr pair = layer_from_config(
      {{"class_name", "RandomContrast"}, {"config", {{"name", "rc2"}, {"factor", {0.4, 0.1}}}}});
  EXPECT_EQ(pair->config()["factor"], json({0.1, 0.4}));  // sorted, as Keras
  EXPECT_EQ(pair->config()["value_range"], json({0.0, 255.0}));
  // The read layer's factor range acts: a flat-per-channel image is unchanged by any factor,
  // a two-valued one is stretched by f in [1, 1.2] around its mean (clipped to value_range).
  std::vector<float> v;
  for (int i = 0; i < 2 * 4 * 4; ++i) v.push_back(i % 2 ? 100.f : 140.f);
  Tensor x = Tensor::from_vector(Shape{2, 4, 4, 1}, v);
  std::vector<float> y = run_layer(one, x, true, "cpu").to_vector();
  for (size_t i = 0; i < y.size(); ++i) {
    const float f = (y[i] - 120.f) / (v[i] - 120.f);
    EXPECT_GE(f, 1.f - 1e-4f) << i;
    EXPECT_LE(f, 1.2f + 1e-4f) << i;
  }
}
