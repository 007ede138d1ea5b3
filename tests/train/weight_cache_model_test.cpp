// The weight cache through a Model (see tests/graph/weight_cache_test.cpp for the mechanism):
// predict, fit (the train program writes the weights), predict again gives the trained model's
// prediction, as a freshly built model with the same weights does; so after set_weights, after
// a write through Layer::weights(), and across a frozen-backbone fit (whose train program keeps
// the frozen base's folded batch norms).
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
using test_util::max_abs_diff;

namespace {

struct Net {
  Model base, model;
  LayerPtr conv, bn;
};

Net build(bool frozen) {
  reset_layer_names();
  set_random_seed(11);
  Net n;
  n.conv = Conv2D(6, 3, {.padding = "same"});
  n.bn = BatchNormalization();
  n.base = Sequential({Input({8, 8, 2}), n.conv, n.bn, ReLU(), GlobalAveragePooling2D()}, "base");
  n.bn->weights()[3]->value.copy_from(Tensor::full(Shape{6}, 1.7f));
  KTensor x = Input({8, 8, 2}, "image");
  n.model = Model(x, Dense(3)(n.base(x)), "net");
  n.base.as_layer()->trainable = !frozen;
  // Plain SGD: no optimizer state, so two models with the same weights take the same step.
  n.model.compile({.optimizer = optimizers::SGD(0.2),
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  return n;
}

// What a model with `weights` predicts, compiled afresh.
Tensor fresh_predict(const std::vector<Tensor>& weights, const Tensor& x) {
  Net f = build(false);
  f.model.set_weights(weights);
  return f.model.predict(x);
}

const FitConfig kFit{.batch_size = 8, .epochs = 1, .verbose = 0};

}  // namespace

TEST(WeightCacheModel, PredictFollowsFitSetWeightsAndLayerWrites) {
  for (bool frozen : {false, true}) {
    Net n = build(frozen);
    auto [x, y] = test_util::quadrant_images(32, 5);
    const Tensor p0 = n.model.predict(x);
    n.model.fit(x, y, kFit);
    const Tensor p1 = n.model.predict(x);
    EXPECT_GT(max_abs_diff(p0, p1), 1e-4f) << "fit did not change the prediction";
    EXPECT_LT(max_abs_diff(p1, fresh_predict(n.model.get_weights(), x)), 1e-5f)
        << (frozen ? "frozen" : "trainable") << ": predict after fit used stale weights";
    // set_weights, then a write through Layer::weights() (a frozen layer's, cached by both the
    // predict and the train program).
    Net other = build(false);
    n.model.set_weights(other.model.get_weights());
    const Tensor p2 = n.model.predict(x);
    EXPECT_LT(max_abs_diff(p2, other.model.predict(x)), 1e-5f);
    n.bn->weights()[1]->value.copy_from(Tensor::full(Shape{6}, 0.8f));
    const Tensor p3 = n.model.predict(x);
    EXPECT_GT(max_abs_diff(p2, p3), 1e-4f);
    EXPECT_LT(max_abs_diff(p3, fresh_predict(n.model.get_weights(), x)), 1e-5f);
    // The train program sees the write too: its loss matches a fresh model's on the same weights.
    const auto w = n.model.get_weights();
    const double loss = n.model.evaluate(x, y, {.verbose = 0}).at("loss");
    Net g = build(frozen);
    g.model.set_weights(w);
    EXPECT_NEAR(loss, g.model.evaluate(x, y, {.verbose = 0}).at("loss"), 1e-5);
    n.model.fit(x, y, kFit);
    g.model.fit(x, y, kFit);
    EXPECT_LT(max_abs_diff(n.model.predict(x), g.model.predict(x)), 1e-4f);
  }
}

// adapt() after a prediction: the Normalization's statistics change, and the compiled predict
// program (which keeps the standard deviation it derives from the variance) sees them.
TEST(WeightCacheModel, PredictFollowsNormalizationAdapt) {
  reset_layer_names();
  set_random_seed(3);
  NormalizationHandle norm = Normalization();
  Model m = Sequential({Input({4}), norm, Dense(2)});
  m.compile({.optimizer = optimizers::SGD(0.1), .loss = losses::MeanSquaredError()});
  const Tensor x = test_util::lcg_inputs(Shape{6, 4}, 8);
  norm.adapt(x);
  const Tensor p0 = m.predict(x);
  Tensor scaled = x.clone();
  for (int64_t i = 0; i < scaled.numel(); ++i)
    scaled.data<float>()[i] = 3.f * scaled.data<float>()[i] + 1.f;
  norm.adapt(scaled);
  const Tensor p1 = m.predict(x);
  EXPECT_GT(max_abs_diff(p0, p1), 1e-3f);
  reset_layer_names();
  set_random_seed(3);
  NormalizationHandle norm2 = Normalization();
  Model fresh = Sequential({Input({4}), norm2, Dense(2)});
  fresh.set_weights(m.get_weights());
  EXPECT_LT(max_abs_diff(p1, fresh.predict(x)), 1e-5f);
}
