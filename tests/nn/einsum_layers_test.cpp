// EinsumDense, RMSNormalization, UnitNormalization, Softmax and AdditiveAttention in C++: the
// weights Keras would make (names and shapes), values against hand-computed ones, configs that
// round-trip, clear errors naming the layer and the argument, and under mixed_bfloat16 a model
// of them that computes in bfloat16, tracks the float32 model and trains (cpu and reference).
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"
#include "lockstep/nn/config.h"
#include "test_util.h"

using namespace lockstep;
namespace L = lockstep::layers;
using lockstep::test_util::error_of;
using lockstep::test_util::expect_has;

namespace {

using V = std::vector<float>;

struct PolicyScope {
  explicit PolicyScope(const char* name) { mixed_precision::set_global_policy(name); }
  ~PolicyScope() { mixed_precision::set_global_policy("float32"); }
};

Tensor inputs(const Shape& s) {
  V v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 37 + 11) % 19) / 8.f - 1.1f;
  return Tensor::from_vector(s, v);
}

// Sets the global seed for one scope and puts the previous one back (other tests' weights).
struct SeedScope {
  uint64_t saved = random_seed();
  explicit SeedScope(uint64_t s) { set_random_seed(s); }
  ~SeedScope() { set_random_seed(saved); }
};

Model transformer_block() {
  reset_layer_names();
  SeedScope seed(5);
  KTensor in = L::Input({6, 8}, "x");
  KTensor h = L::EinsumDense("btd,dhk->bthk", {-1, 2, 4}, {.bias_axes = "hk"})(in);
  h = L::EinsumDense("bthk,hkd->btd", {-1, 8}, {.activation = "gelu", .bias_axes = "d"})(h);
  h = L::RMSNormalization()(h);
  KTensor a = L::AdditiveAttention()({h, in});
  a = L::UnitNormalization()(a);
  KTensor s = L::Softmax({-1})(L::Dense(3)(a));
  KTensor pooled = L::GlobalAveragePooling1D()(s);
  return Model(in, L::Dense(3, {.name = "head"})(pooled), "block");
}

}  // namespace

TEST(EinsumLayers, EinsumDenseMakesKerasShapedWeights) {
  reset_layer_names();
  KTensor in = L::Input({5, 6}, "x");
  LayerHandle heads = L::EinsumDense("btd,dhk->bthk", {-1, 2, 3}, {.bias_axes = "hk"});
  KTensor y = heads(in);
  EXPECT_EQ(y.shape(), (Shape{-1, 5, 2, 3}));
  ASSERT_EQ(heads->weights().size(), 2u);
  EXPECT_EQ(heads->weights()[0]->value.shape(), (Shape{6, 2, 3}));
  EXPECT_EQ(heads->weights()[1]->value.shape(), (Shape{2, 3}));
  LayerHandle right = L::EinsumDense("ab...,bc->ac...", {4}, {.bias_axes = "c"});
  KTensor in2 = L::Input({3, 5}, "x2");
  EXPECT_EQ(right(in2).shape(), (Shape{-1, 4, 5}));
  EXPECT_EQ(right->weights()[1]->value.shape(), (Shape{4, 1}));  // bias "c" then the elided 1
}

TEST(EinsumLayers, EinsumDenseComputesTheEinsumPlusBias) {
  reset_layer_names();
  KTensor in = L::Input({2, 3}, "x");
  LayerHandle d = L::EinsumDense("abc,cd->abd", {-1, 2}, {.bias_axes = "d"});
  Model m(in, d(in));
  d->weights()[0]->value.copy_from(Tensor::from_vector({3, 2}, {1, 2, 3, 4, 5, 6}));
  d->weights()[1]->value.copy_from(Tensor::from_vector({2}, {0.5f, -1}));
  const V got = m.predict(Tensor::from_vector({1, 2, 3}, {1, 0, -1, 2, 1, 0})).to_vector();
  const V want = {1 - 5 + 0.5f, 2 - 6 - 1.f, 2 + 3 + 0.5f, 4 + 4 - 1.f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
}

TEST(EinsumLayers, RmsAndUnitNormalizationAndSoftmaxValues) {
  reset_layer_names();
  KTensor in = L::Input({4}, "x");
  Model rms(in, L::RMSNormalization({.epsilon = 1e-6})(in));
  Model unit(in, L::UnitNormalization()(in));
  Model soft(in, L::Softmax()(in));
  const Tensor x = Tensor::from_vector({1, 4}, {1, -2, 3, 0.5f});
  const double ms = (1 + 4 + 9 + 0.25) / 4, n = std::sqrt(14.25);
  const V r = rms.predict(x).to_vector(), u = unit.predict(x).to_vector(),
          s = soft.predict(x).to_vector();
  const V xv = {1, -2, 3, 0.5f};
  double z = 0;
  for (float v : xv) z += std::exp(v);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(r[i], xv[i] / std::sqrt(ms + 1e-6), 1e-5);
    EXPECT_NEAR(u[i], xv[i] / n, 1e-6);
    EXPECT_NEAR(s[i], std::exp(xv[i]) / z, 1e-6);
  }
}

TEST(EinsumLayers, ConfigsRoundTripWithKerasKeys) {
  reset_layer_names();
  LayerHandle e = L::EinsumDense("...b,bc->...c", {4}, {.activation = "relu", .bias_axes = "c"});
  const json c = e->config();
  EXPECT_EQ(c.at("equation"), "...b,bc->...c");
  EXPECT_EQ(c.at("output_shape"), json::array({4}));
  EXPECT_EQ(c.at("bias_axes"), "c");
  json k = {{"class_name", "EinsumDense"}, {"config", c}};
  EXPECT_EQ(layer_from_config(k)->config(), c);
  for (LayerHandle l :
       {L::RMSNormalization({.epsilon = 1e-4}), L::UnitNormalization({1, 2}), L::Softmax({-1}),
        L::AdditiveAttention({.use_scale = false, .dropout = 0.2})}) {
    json lc = {{"class_name", l->class_name()}, {"config", l->config()}};
    EXPECT_EQ(layer_from_config(lc)->config(), l->config()) << l->class_name();
  }
}

TEST(EinsumLayers, BadEquationsAxesAndShapesNameTheLayerAndArgument) {
  reset_layer_names();
  KTensor in = L::Input({5, 6}, "x");
  expect_has(error_of([&] { L::EinsumDense("abc,cd", {4}, {.name = "proj"})(in); }),
             {"EinsumDense 'proj'", "equation \"abc,cd\"", "<input>,<kernel>-><output>"});
  expect_has(error_of([&] { L::EinsumDense("ab,bc->ac", {4}, {.name = "p2"})(in); }),
             {"EinsumDense 'p2'", "2 input letters for an input of shape (None, 5, 6)"});
  expect_has(error_of([&] {
               L::EinsumDense("abc,ce->abd", {5, 4}, {.name = "p3"})(in);
             }),
             {"EinsumDense 'p3'", "output letter 'd'"});
  expect_has(error_of([&] {
               L::EinsumDense("abc,cd->abd", {-1, 4}, {.bias_axes = "x", .name = "p4"})(in);
             }),
             {"EinsumDense 'p4'", "bias_axes letter 'x'"});
  expect_has(error_of([&] {
               L::EinsumDense("abc,cd->abd", {7, 4}, {.name = "p5"})(in);
             }),
             {"EinsumDense 'p5'", "output_shape gives letter 'b' size 7, the input 5"});
  expect_has(error_of([&] { L::RMSNormalization({.axis = 1, .name = "rms"})(in); }),
             {"RMSNormalization 'rms'", "axis=1"});
  expect_has(error_of([&] { L::Softmax({3}, "sm")(in); }), {"Softmax 'sm'", "axis 3"});
  expect_has(error_of([&] { L::UnitNormalization({0}, "un")(in); }),
             {"UnitNormalization 'un'", "axis 0"});
  KTensor q = L::Input({5, 4}, "q");
  expect_has(error_of([&] {
               L::AdditiveAttention({.name = "att"})({q, in});
             }),
             {"AdditiveAttention 'att'", "same last dim"});
  const json bad = {{"class_name", "EinsumDense"},
                    {"config", {{"name", "e"}, {"equation", "ab,bc->ac"}, {"output_shape", "x"}}}};
  expect_has(error_of([&] { layer_from_config(bad); }), {"EinsumDense 'e'", "output_shape"});
}

TEST(EinsumLayers, AdditiveAttentionMasksValueStepsAndQueryRows) {
  reset_layer_names();
  KTensor in = L::Input({3, 2}, "x");
  KTensor m = L::Masking(0.0)(in);
  Model model(in, L::AdditiveAttention({.use_scale = false})({m, m}));
  const Tensor x = Tensor::from_vector({1, 3, 2}, {1, 2, 0, 0, -1, 0.5f});
  const V y = model.predict(x).to_vector();
  // Step 1 is masked: its output row is zero; the others attend to steps 0 and 2 only.
  EXPECT_EQ(y[2], 0.f);
  EXPECT_EQ(y[3], 0.f);
  const V q0 = {1, 2}, k0 = {1, 2}, k2 = {-1, 0.5f};
  auto score = [](const V& q, const V& k) {
    return std::tanh(q[0] + k[0]) + std::tanh(q[1] + k[1]);
  };
  const double s0 = score(q0, k0), s2 = score(q0, k2);
  const double w0 = std::exp(s0) / (std::exp(s0) + std::exp(s2));
  EXPECT_NEAR(y[0], w0 * 1 + (1 - w0) * -1, 1e-5);
  EXPECT_NEAR(y[1], w0 * 2 + (1 - w0) * 0.5, 1e-5);
}

TEST(EinsumLayers, MixedBfloat16ComputesInBfloat16TracksFloat32AndTrains) {
  Model f32 = transformer_block();
  Model mixed = [] {
    PolicyScope p("mixed_bfloat16");
    return transformer_block();
  }();
  mixed.set_weights(f32.get_weights());
  for (const LayerPtr& l : mixed.layers()) {
    if (l->class_name() == "EinsumDense") EXPECT_EQ(l->compute_dtype(), DType::bf16);
  }
  const Tensor x = inputs(Shape{8, 6, 8});
  const V want = f32.predict(x).to_vector();
  for (const char* backend : {"reference", "cpu"}) {
    mixed.compile({.optimizer = optimizers::Adam(1e-2),
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .backend = backend});
    const V got = mixed.predict(x).to_vector();
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 5e-2 * (1 + std::abs(want[i]))) << backend;
  }
  Tensor y = Tensor::from_vector({8}, {0, 1, 2, 0, 1, 2, 0, 1});
  // The mixed model trains (cpu; compiled above).
  std::vector<double> losses;
  auto cb =
      callbacks::LambdaCallback({}, [&](int, const Logs& l) { losses.push_back(l.at("loss")); });
  mixed.fit(x, y, {.batch_size = 8, .epochs = 40, .verbose = 0, .callbacks = {cb}});
  EXPECT_LT(losses.back(), 0.75 * losses.front());  // 40 steps take it from ~1.18 to ~0.74
}
