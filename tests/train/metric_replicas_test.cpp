// Precision and Recall under MirroredStrategy: each replica counts its own rows and the counts
// are summed (not the replicas' ratios averaged), so 2 replicas give the 1-replica values, and
// both equal the ratio computed from the predictions.
#include <gtest/gtest.h>

#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"

using namespace lockstep;
namespace ds = lockstep::distribute;

namespace {

Model multi_label_model() {
  set_random_seed(5);
  reset_layer_names();
  Model m = Sequential({layers::Input({4}), layers::Dense(3, {.activation = "sigmoid"})});
  m.compile({.optimizer = optimizers::SGD(0.1),
             .loss = losses::BinaryCrossentropy(),
             .metric_objects = {metrics::Precision(), metrics::Recall()}});
  return m;
}

}  // namespace

TEST(MetricReplicas, PrecisionAndRecallSumTheirCountsAcrossReplicas) {
  const int64_t rows = 8;
  Tensor x = Tensor::empty(Shape{rows, 4}), y = Tensor::empty(Shape{rows, 3});
  Philox rng(3);
  for (int64_t i = 0; i < rows * 4; ++i) x.data<float>()[i] = 4 * rng.uniform() - 2;
  // Replica 0 gets rows 0-3 (all labelled positive), replica 1 rows 4-7 (few positives): their
  // own precisions differ, so averaging ratios would not give the pooled value.
  for (int64_t i = 0; i < rows * 3; ++i) y.data<float>()[i] = i < 12 ? 1.f : (i % 5 == 0);

  Model single = multi_label_model();
  Logs one = single.evaluate(x, y, {.batch_size = 8, .verbose = 0});
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model mirrored = [&] {
    auto scope = strategy.scope();
    return multi_label_model();
  }();
  Logs two = mirrored.evaluate(x, y, {.batch_size = 8, .verbose = 0});

  std::vector<float> p = single.predict(x, 8).to_vector(), labels = y.to_vector();
  double tp = 0, predicted = 0, actual = 0;
  double replica_precision[2] = {0, 0}, replica_tp[2] = {0, 0}, replica_predicted[2] = {0, 0};
  for (size_t i = 0; i < p.size(); ++i) {
    bool positive = p[i] > 0.5f, label = labels[i] > 0.5f;
    tp += positive && label, predicted += positive, actual += label;
    replica_tp[i / 12] += positive && label, replica_predicted[i / 12] += positive;
  }
  ASSERT_GT(predicted, 0);
  for (int r = 0; r < 2; ++r)
    replica_precision[r] = replica_predicted[r] > 0 ? replica_tp[r] / replica_predicted[r] : 0;
  const double precision = tp / predicted, recall = tp / actual;
  EXPECT_NE(precision, (replica_precision[0] + replica_precision[1]) / 2);  // the data does split
  EXPECT_NEAR(one.at("precision"), precision, 1e-6);
  EXPECT_NEAR(one.at("recall"), recall, 1e-6);
  EXPECT_NEAR(two.at("precision"), precision, 1e-6);
  EXPECT_NEAR(two.at("recall"), recall, 1e-6);
}
