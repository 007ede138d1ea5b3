// Weighted data (sample_weight, class_weight, a Dataset's third element, weighted_metrics)
// against Keras 3.15.1 on JAX: the same Dense(3) model, data and SGD step, the numbers below
// printed by this script (KERAS_BACKEND=jax, .venv-interop):
//
//   import numpy as np, keras
//   x = np.array([[0.5,-1.0],[1.5,0.25],[-0.75,0.5],[0.2,0.9],[1.0,1.0],[-1.2,0.3],
//                 [0.4,-0.6],[0.0,1.5]], dtype="float32")
//   y = np.array([2,1,1,1,0,2,2,0], dtype="int32")
//   sw = np.array([0.5,2,1,3,0,1.5,1,2.5], dtype="float32")   # sums to 11.5, not 8
//   K = np.array([[0.1,-0.2,0.3],[0.4,0.5,-0.6]], dtype="float32")
//   b = np.array([0.01,-0.02,0.03], dtype="float32")
//   m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)]); m.set_weights([K, b])
//   m.compile(optimizer=keras.optimizers.SGD(0.1),
//             loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
//             metrics=["accuracy"], weighted_metrics=["accuracy"])
//   h = m.fit(x, y, sample_weight=sw, batch_size=4, epochs=1, shuffle=False, verbose=0)
//   # or: class_weight={0: 0.5, 1: 2.0, 2: 1.25}
//   print(h.history, m.get_weights())
//   print(m.evaluate(x, y, sample_weight=sw, batch_size=3, return_dict=True))
//   print(m.evaluate(x, y, batch_size=3, return_dict=True))
//
// The loss is Keras's "sum_over_batch_size": sum(loss * w) / batch_size.
#include <gtest/gtest.h>

#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ds = lockstep::distribute;
using test_util::error_of;

namespace {

struct WeightedData {
  Tensor x = Tensor::from_vector(Shape{8, 2}, {0.5f, -1.0f, 1.5f, 0.25f, -0.75f, 0.5f, 0.2f, 0.9f,
                                               1.0f, 1.0f, -1.2f, 0.3f, 0.4f, -0.6f, 0.0f, 1.5f});
  Tensor y = Tensor::from_vector_i32(Shape{8}, {2, 1, 1, 1, 0, 2, 2, 0});
  Tensor sample_weight = Tensor::from_vector(Shape{8}, {0.5f, 2, 1, 3, 0, 1.5f, 1, 2.5f});
  std::map<int, double> class_weight{{0, 0.5}, {1, 2.0}, {2, 1.25}};
};

Model dense_model() {
  reset_layer_names();
  Model m = Sequential({layers::Input({2}), layers::Dense(3)});
  m.set_weights({Tensor::from_vector(Shape{2, 3}, {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f}),
                 Tensor::from_vector(Shape{3}, {0.01f, -0.02f, 0.03f})});
  m.compile({.optimizer = optimizers::SGD(0.1),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"},
             .weighted_metrics = {"accuracy"}});
  return m;
}

struct KerasRun {
  double loss, accuracy, weighted_accuracy;
  std::vector<float> kernel, bias;
};

// fit(..., sample_weight=sw): history and weights after the epoch.
const KerasRun kSampleWeighted{
    1.529795527458191,
    0.375,
    0.21739129722118378,
    {0.08319580554962158f, -0.1251678764820099f, 0.24197207391262054f, 0.4256364703178406f,
     0.5044962167739868f, -0.6301326155662537f},
    {-0.02914489433169365f, 0.015513290651142597f, 0.03363160416483879f}};
// fit(..., class_weight={0: 0.5, 1: 2.0, 2: 1.25}).
const KerasRun kClassWeighted{1.3333746194839478,
                              0.375,
                              0.41860464215278625,
                              {0.09446851164102554f, -0.14910896122455597f, 0.25464046001434326f,
                               0.39563530683517456f, 0.5387774705886841f, -0.6344127655029297f},
                              {-0.05535711720585823f, 0.03533867374062538f, 0.040018439292907715f}};

void expect_matches(const History& h, Model& m, const KerasRun& keras, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_NEAR(h.history.at("loss").at(0), keras.loss, 2e-6);
  EXPECT_NEAR(h.history.at("accuracy").at(0), keras.accuracy, 1e-6);
  EXPECT_NEAR(h.history.at("weighted_accuracy").at(0), keras.weighted_accuracy, 1e-6);
  std::vector<Tensor> w = m.get_weights();
  std::vector<float> kernel = w[0].to_vector(), bias = w[1].to_vector();
  for (size_t i = 0; i < kernel.size(); ++i) EXPECT_NEAR(kernel[i], keras.kernel[i], 1e-6) << i;
  for (size_t i = 0; i < bias.size(); ++i) EXPECT_NEAR(bias[i], keras.bias[i], 1e-6) << i;
}

data::Dataset batches(const WeightedData& d, bool with_weights) {
  std::vector<data::Component> parts{data::Component(d.x), data::Component(d.y)};
  if (with_weights) parts.emplace_back(d.sample_weight);
  return data::Dataset::from_tensor_slices(parts).batch(4);
}

}  // namespace

TEST(WeightedData, SampleWeightedFitAndEvaluateMatchKeras) {
  WeightedData d;
  Model m = dense_model();
  History h =
      m.fit(d.x, d.y,
            {.batch_size = 4, .verbose = 0, .shuffle = false, .sample_weight = d.sample_weight});
  expect_matches(h, m, kSampleWeighted, "fit(sample_weight)");
  // evaluate in batches of 3, 3, 2: the loss tracker weighs each batch's loss by its size.
  Logs weighted =
      m.evaluate(d.x, d.y, {.batch_size = 3, .verbose = 0, .sample_weight = d.sample_weight});
  EXPECT_NEAR(weighted.at("loss"), 1.4084781408309937, 2e-6);
  EXPECT_NEAR(weighted.at("accuracy"), 0.625, 1e-6);
  EXPECT_NEAR(weighted.at("weighted_accuracy"), 0.47826087474823, 1e-6);
  Logs plain = m.evaluate(d.x, d.y, {.batch_size = 3, .verbose = 0});
  EXPECT_NEAR(plain.at("loss"), 0.9115554690361023, 2e-6);
  EXPECT_NEAR(plain.at("weighted_accuracy"), 0.625, 1e-6);  // no weights: the plain value
}

TEST(WeightedData, ClassWeightMatchesKeras) {
  WeightedData d;
  Model m = dense_model();
  History h = m.fit(
      d.x, d.y, {.batch_size = 4, .verbose = 0, .shuffle = false, .class_weight = d.class_weight});
  expect_matches(h, m, kClassWeighted, "fit(class_weight)");
}

TEST(WeightedData, DatasetThirdElementAndClassWeightMatchKeras) {
  WeightedData d;
  Model a = dense_model();
  History ha = a.fit(batches(d, true), {.verbose = 0});
  expect_matches(ha, a, kSampleWeighted, "Dataset {x, y, w}");
  Model b = dense_model();
  History hb = b.fit(batches(d, false), {.verbose = 0, .class_weight = d.class_weight});
  expect_matches(hb, b, kClassWeighted, "Dataset {x, y} + class_weight");
  // evaluate(Dataset) with weights, batches of 4: sum(l * w) / 4 per batch.
  Model c = dense_model();
  Logs by_dataset = c.evaluate(batches(d, true), {.verbose = 0});
  Logs by_arrays =
      c.evaluate(d.x, d.y, {.batch_size = 4, .verbose = 0, .sample_weight = d.sample_weight});
  EXPECT_NEAR(by_dataset.at("loss"), by_arrays.at("loss"), 1e-6);
  EXPECT_NEAR(by_dataset.at("weighted_accuracy"), by_arrays.at("weighted_accuracy"), 1e-6);
}

// Two mirrored replicas take two rows each of every batch of 4: each replica's loss is
// sum(l * w) / 2 over its rows and its gradient weighs 2 / 4, so the update and the logged loss
// are the global batch's sum(l * w) / 4, and the weighted accuracy sums value * w and w over
// both replicas.
TEST(WeightedData, TwoReplicasMatchKeras) {
  WeightedData d;
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model m = [&] {
    auto scope = strategy.scope();
    return dense_model();
  }();
  History h =
      m.fit(d.x, d.y,
            {.batch_size = 4, .verbose = 0, .shuffle = false, .sample_weight = d.sample_weight});
  expect_matches(h, m, kSampleWeighted, "2 replicas, sample_weight");
  Logs weighted =
      m.evaluate(d.x, d.y, {.batch_size = 3, .verbose = 0, .sample_weight = d.sample_weight});
  EXPECT_NEAR(weighted.at("loss"), 1.4084781408309937, 2e-6);
  EXPECT_NEAR(weighted.at("weighted_accuracy"), 0.47826087474823, 1e-6);

  Model c = [&] {
    auto scope = strategy.scope();
    return dense_model();
  }();
  History hc = c.fit(batches(d, false), {.verbose = 0, .class_weight = d.class_weight});
  expect_matches(hc, c, kClassWeighted, "2 replicas, Dataset + class_weight");
}

// validation_split takes the last rows of sample_weight with x and y; validation_data takes a
// third array.
TEST(WeightedData, ValidationWeights) {
  WeightedData d;
  Model m = dense_model();
  History h = m.fit(d.x, d.y,
                    {.batch_size = 4,
                     .verbose = 0,
                     .validation_split = 0.5,
                     .shuffle = false,
                     .sample_weight = d.sample_weight});
  Model fresh = dense_model();
  fresh.fit(d.x.slice(0, 4).contiguous(), d.y.slice(0, 4).contiguous(),
            {.batch_size = 4,
             .verbose = 0,
             .shuffle = false,
             .sample_weight = d.sample_weight.slice(0, 4).contiguous()});
  Logs val = fresh.evaluate(
      d.x.slice(4, 8).contiguous(), d.y.slice(4, 8).contiguous(),
      {.batch_size = 4, .verbose = 0, .sample_weight = d.sample_weight.slice(4, 8).contiguous()});
  EXPECT_NEAR(h.history.at("val_loss").at(0), val.at("loss"), 1e-6);
  EXPECT_NEAR(h.history.at("val_weighted_accuracy").at(0), val.at("weighted_accuracy"), 1e-6);
  EXPECT_NE(val.at("weighted_accuracy"), val.at("accuracy"));  // the weights did matter

  Model v = dense_model();
  History hv = v.fit(d.x, d.y,
                     {.batch_size = 4,
                      .verbose = 0,
                      .validation_data = ValidationData(d.x, d.y, d.sample_weight),
                      .shuffle = false});
  Model w = dense_model();
  w.fit(d.x, d.y, {.batch_size = 4, .verbose = 0, .shuffle = false});
  Logs expected =
      w.evaluate(d.x, d.y, {.batch_size = 4, .verbose = 0, .sample_weight = d.sample_weight});
  EXPECT_NEAR(hv.history.at("val_loss").at(0), expected.at("loss"), 1e-6);
}

TEST(WeightedData, WeightedMetricObjectsAndNames) {
  WeightedData d;
  reset_layer_names();
  Model m = Sequential({layers::Input({2}), layers::Dense(3)});
  m.set_weights({Tensor::from_vector(Shape{2, 3}, {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f}),
                 Tensor::from_vector(Shape{3}, {0.01f, -0.02f, 0.03f})});
  m.compile({.optimizer = optimizers::SGD(0.1),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"},
             .weighted_metrics = {"accuracy", "accuracy"},
             .weighted_metric_objects = {metrics::SparseCategoricalAccuracy("wacc")}});
  Logs logs =
      m.evaluate(d.x, d.y, {.batch_size = 8, .verbose = 0, .sample_weight = d.sample_weight});
  // Keras: "accuracy", then "weighted_accuracy", "weighted_accuracy_1"; own names stay.
  ASSERT_TRUE(logs.count("weighted_accuracy_1")) << logs.size();
  // Hand-worked at the initial weights: rows 0, 2, 4, 6 are right (argmax 2, 1, 0, 2), with
  // weights 0.5 + 1 + 0 + 1 of 11.5.
  EXPECT_NEAR(logs.at("accuracy"), 0.5, 1e-6);
  EXPECT_NEAR(logs.at("weighted_accuracy"), 2.5 / 11.5, 1e-6);
  EXPECT_NEAR(logs.at("weighted_accuracy_1"), 2.5 / 11.5, 1e-6);
  EXPECT_NEAR(logs.at("wacc"), 2.5 / 11.5, 1e-6);
}

TEST(WeightedData, WeightedPrecisionRecallCountWeights) {
  // Binary decisions: y_pred > 0.5 positive. Keras Precision with sample_weight
  // [1, 2, 3, 4] on y_true [1, 0, 1, 1], y_pred [0.9, 0.8, 0.2, 0.7]:
  // TP = 1 + 4 = 5, FP = 2, FN = 3 -> precision 5/7, recall 5/8.
  reset_layer_names();
  Model m = Sequential({layers::Input({1}), layers::Activation("linear")});
  m.compile({.loss = losses::BinaryCrossentropy(),
             .weighted_metric_objects = {metrics::Precision(), metrics::Recall()}});
  Tensor x = Tensor::from_vector(Shape{4, 1}, {0.9f, 0.8f, 0.2f, 0.7f});
  Tensor y = Tensor::from_vector(Shape{4, 1}, {1, 0, 1, 1});
  Logs logs = m.evaluate(x, y,
                         {.batch_size = 4,
                          .verbose = 0,
                          .sample_weight = Tensor::from_vector(Shape{4}, {1, 2, 3, 4})});
  EXPECT_NEAR(logs.at("precision"), 5.0 / 7.0, 1e-6);
  EXPECT_NEAR(logs.at("recall"), 5.0 / 8.0, 1e-6);
}

TEST(WeightedData, ClearErrors) {
  WeightedData d;
  Model m = dense_model();
  EXPECT_NE(error_of([&] {
              m.fit(
                  d.x, d.y,
                  {.verbose = 0, .sample_weight = d.sample_weight, .class_weight = d.class_weight});
            }).find("You cannot `class_weight` and `sample_weight` at the same time"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              m.fit(d.x, d.y, {.verbose = 0, .sample_weight = Tensor::zeros(Shape{5})});
            }).find("sample_weight has 5 weights but there are 8 samples"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              m.evaluate(d.x, d.y, {.verbose = 0, .sample_weight = Tensor::zeros(Shape{8, 2})});
            }).find("must have shape (N,) or (N, 1)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              m.fit(batches(d, true), {.verbose = 0, .class_weight = d.class_weight});
            }).find("You cannot `class_weight` and `sample_weight`"),
            std::string::npos);
}
