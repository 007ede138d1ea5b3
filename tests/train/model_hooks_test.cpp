// More of Model: train_on_batch / test_on_batch / predict_on_batch against Keras 3.15.1 (JAX),
// the on_test_* and on_predict_* callbacks, EarlyStopping's mode / baseline /
// start_from_epoch (sequences checked against Keras's EarlyStopping) and LambdaCallback's hooks.
//
// The *_on_batch numbers come from the model and data of weighted_data_test.cpp:
//   m.train_on_batch(x[:4], y[:4], sample_weight=sw[:4], return_dict=True)
//   m.train_on_batch(x[4:], y[4:], sample_weight=sw[4:], return_dict=True)
//   m.test_on_batch(x, y, sample_weight=sw, return_dict=True); m.predict_on_batch(x[:2])
//   fresh model: m.train_on_batch(x, y, class_weight={0: 0.5, 1: 2.0, 2: 1.25}, ...)
#include <gtest/gtest.h>

#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"

using namespace lockstep;
namespace ds = lockstep::distribute;

namespace {

const std::vector<float> kX = {0.5f, -1.0f, 1.5f,  0.25f, -0.75f, 0.5f,  0.2f, 0.9f,
                               1.0f, 1.0f,  -1.2f, 0.3f,  0.4f,   -0.6f, 0.0f, 1.5f};
const std::vector<int32_t> kY = {2, 1, 1, 1, 0, 2, 2, 0};
const std::vector<float> kW = {0.5f, 2, 1, 3, 0, 1.5f, 1, 2.5f};

Tensor rows_x(int64_t begin, int64_t end) {
  return Tensor::from_vector(Shape{end - begin, 2},
                             std::vector<float>(kX.begin() + 2 * begin, kX.begin() + 2 * end));
}
Tensor rows_y(int64_t begin, int64_t end) {
  return Tensor::from_vector_i32(Shape{end - begin},
                                 std::vector<int32_t>(kY.begin() + begin, kY.begin() + end));
}
Tensor rows_w(int64_t begin, int64_t end) {
  return Tensor::from_vector(Shape{end - begin},
                             std::vector<float>(kW.begin() + begin, kW.begin() + end));
}

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

void check_on_batch(Model& m) {
  Logs t1 = m.train_on_batch(rows_x(0, 4), rows_y(0, 4), {.sample_weight = rows_w(0, 4)});
  EXPECT_NEAR(t1.at("loss"), 1.6455368995666504, 2e-6);
  EXPECT_NEAR(t1.at("accuracy"), 0.5, 1e-6);
  EXPECT_NEAR(t1.at("weighted_accuracy"), 0.23076923191547394, 1e-6);
  Logs t2 = m.train_on_batch(rows_x(4, 8), rows_y(4, 8), {.sample_weight = rows_w(4, 8)});
  EXPECT_NEAR(t2.at("loss"), 1.4140541553497314, 2e-6);  // this batch's, metrics were reset
  EXPECT_NEAR(t2.at("accuracy"), 0.25, 1e-6);
  EXPECT_NEAR(t2.at("weighted_accuracy"), 0.20000000298023224, 1e-6);
  const std::vector<float> kernel = {0.08319580554962158f, -0.1251678764820099f,
                                     0.24197207391262054f, 0.4256364703178406f,
                                     0.5044962167739868f,  -0.6301326155662537f};
  std::vector<float> got = m.get_weights()[0].to_vector();
  for (size_t i = 0; i < kernel.size(); ++i) EXPECT_NEAR(got[i], kernel[i], 1e-6) << i;
  Logs test = m.test_on_batch(rows_x(0, 8), rows_y(0, 8), {.sample_weight = rows_w(0, 8)});
  EXPECT_NEAR(test.at("loss"), 1.4084781408309937, 2e-6);
  EXPECT_NEAR(test.at("weighted_accuracy"), 0.47826087474823, 1e-6);
  const std::vector<float> predicted = {-0.41318345069885254f,  -0.5515668392181396f,
                                        0.7847502827644348f,    0.20205792784690857f,
                                        -0.046114470809698105f, 0.2390565574169159f};
  Tensor p = m.predict_on_batch(rows_x(0, 2));
  ASSERT_EQ(p.shape(), (Shape{2, 3}));
  for (size_t i = 0; i < predicted.size(); ++i)
    EXPECT_NEAR(p.to_vector()[i], predicted[i], 1e-6) << i;
}

}  // namespace

TEST(ModelOnBatch, MatchesKeras) {
  Model m = dense_model();
  check_on_batch(m);
  Model c = dense_model();
  Logs cw = c.train_on_batch(rows_x(0, 8), rows_y(0, 8),
                             {.class_weight = {{0, 0.5}, {1, 2.0}, {2, 1.25}}});
  EXPECT_NEAR(cw.at("loss"), 1.3115570545196533, 2e-6);
  EXPECT_NEAR(cw.at("weighted_accuracy"), 0.4651162922382355, 1e-6);
}

TEST(ModelOnBatch, MatchesKerasUnderTwoReplicas) {
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model m = [&] {
    auto scope = strategy.scope();
    return dense_model();
  }();
  check_on_batch(m);
}

TEST(ModelCallbacks, TestAndPredictHooks) {
  Model m = dense_model();
  std::vector<std::string> calls;
  Logs test_end, last_batch;
  auto cb = callbacks::LambdaCallback(LambdaHooks{
      .on_test_begin = [&](const Logs&) { calls.push_back("test_begin"); },
      .on_test_end = [&](const Logs& l) { calls.push_back("test_end"), test_end = l; },
      .on_test_batch_begin =
          [&](int b, const Logs&) { calls.push_back("test_batch_begin " + std::to_string(b)); },
      .on_test_batch_end =
          [&](int b, const Logs& l) {
            calls.push_back("test_batch_end " + std::to_string(b)), last_batch = l;
          },
      .on_predict_begin = [&](const Logs&) { calls.push_back("predict_begin"); },
      .on_predict_end = [&](const Logs&) { calls.push_back("predict_end"); },
      .on_predict_batch_begin =
          [&](int b, const Logs&) { calls.push_back("predict_batch_begin " + std::to_string(b)); },
      .on_predict_batch_end =
          [&](int b, const Logs&) { calls.push_back("predict_batch_end " + std::to_string(b)); },
  });
  Logs logs =
      m.evaluate(rows_x(0, 8), rows_y(0, 8), {.batch_size = 3, .verbose = 0, .callbacks = {cb}});
  const std::vector<std::string> expected_test = {
      "test_begin",       "test_batch_begin 0", "test_batch_end 0", "test_batch_begin 1",
      "test_batch_end 1", "test_batch_begin 2", "test_batch_end 2", "test_end"};
  EXPECT_EQ(calls, expected_test);
  EXPECT_EQ(test_end, logs);
  EXPECT_NEAR(last_batch.at("loss"), logs.at("loss"), 1e-7);  // running, ends at the total
  calls.clear();
  m.predict(rows_x(0, 8), PredictConfig{.batch_size = 5, .callbacks = {cb}});
  const std::vector<std::string> expected_predict = {"predict_begin",       "predict_batch_begin 0",
                                                     "predict_batch_end 0", "predict_batch_begin 1",
                                                     "predict_batch_end 1", "predict_end"};
  EXPECT_EQ(calls, expected_predict);
  // fit's validation passes fit's callbacks to evaluate: on_test_* once per epoch.
  calls.clear();
  m.fit(rows_x(0, 8), rows_y(0, 8),
        {.batch_size = 4,
         .epochs = 2,
         .verbose = 0,
         .callbacks = {cb},
         .validation_data = ValidationData(rows_x(0, 4), rows_y(0, 4))});
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "test_begin"), 2);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "test_batch_end 0"), 2);
}

TEST(ModelCallbacks, LambdaTrainHooksInOrder) {
  Model m = dense_model();
  std::vector<std::string> calls;
  auto cb = callbacks::LambdaCallback(LambdaHooks{
      .on_epoch_begin = [&](int e,
                            const Logs&) { calls.push_back("epoch_begin " + std::to_string(e)); },
      .on_epoch_end = [&](int e,
                          const Logs&) { calls.push_back("epoch_end " + std::to_string(e)); },
      .on_train_begin = [&](const Logs&) { calls.push_back("train_begin"); },
      .on_train_end = [&](const Logs&) { calls.push_back("train_end"); },
      .on_train_batch_begin =
          [&](int b, const Logs&) { calls.push_back("batch_begin " + std::to_string(b)); },
      .on_train_batch_end = [&](int b,
                                const Logs&) { calls.push_back("batch_end " + std::to_string(b)); },
  });
  m.fit(rows_x(0, 8), rows_y(0, 8),
        {.batch_size = 4, .epochs = 1, .verbose = 0, .callbacks = {cb}});
  const std::vector<std::string> expected = {"train_begin", "epoch_begin 0", "batch_begin 0",
                                             "batch_end 0", "batch_begin 1", "batch_end 1",
                                             "epoch_end 0", "train_end"};
  EXPECT_EQ(calls, expected);
}

namespace {

struct EarlyStopCase {
  EarlyStoppingOptions options;
  std::vector<double> values;
  int stopped_at;  // -1: ran through
  int stopped_epoch, best_epoch, wait;
  double best;
};

}  // namespace

// Keras 3.15.1's EarlyStopping fed the same sequences (on_epoch_end(e, {monitor: v}) on a stub
// model, stopping when model.stop_training turns true) gives these states.
TEST(EarlyStopping, ModeBaselineAndStartFromEpochMatchKeras) {
  const std::vector<EarlyStopCase> cases = {
      {{.monitor = "val_acc_custom", .patience = 1, .mode = "max"},
       {0.5, 0.6, 0.7, 0.4, 0.8, 0.9},
       3,
       3,
       2,
       1,
       0.7},
      {{.monitor = "val_acc_custom", .patience = 2, .mode = "max", .baseline = 0.75},
       {0.5, 0.6, 0.7, 0.4, 0.8, 0.9},
       3,
       3,
       2,
       4,
       0.7},
      {{.monitor = "val_loss", .patience = 1, .start_from_epoch = 2},
       {0.9, 0.8, 0.85, 0.86, 0.7, 0.95, 0.96},
       3,
       3,
       2,
       1,
       0.85},
      {{.monitor = "val_score", .min_delta = 0.1, .patience = 2, .mode = "min"},
       {0.9, 0.8, 0.85, 0.86, 0.7, 0.95, 0.96},
       2,
       2,
       0,
       2,
       0.9},
      {{.monitor = "val_x", .patience = 3, .mode = "max", .baseline = 0.8},
       {0.5, 0.6, 0.7, 0.72, 0.73},
       -1,
       0,
       4,
       5,
       0.73},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE("case " + std::to_string(k));
    const EarlyStopCase& c = cases[k];
    Model m = dense_model();
    auto cb = callbacks::EarlyStopping(c.options);
    cb->set_model(&m);
    m.stop_training = false;
    cb->on_train_begin({});
    int stopped_at = -1;
    for (size_t e = 0; e < c.values.size(); ++e) {
      cb->on_epoch_end(int(e), {{c.options.monitor, c.values[e]}});
      if (m.stop_training) {
        stopped_at = int(e);
        break;
      }
    }
    auto* es = dynamic_cast<EarlyStoppingCallback*>(cb.get());
    ASSERT_NE(es, nullptr);
    EXPECT_EQ(stopped_at, c.stopped_at);
    EXPECT_EQ(es->stopped_epoch(), c.stopped_epoch);
    EXPECT_EQ(es->best_epoch(), c.best_epoch);
    EXPECT_EQ(es->wait(), c.wait);
    EXPECT_DOUBLE_EQ(es->best(), c.best);
  }
  EXPECT_THROW(callbacks::EarlyStopping(EarlyStoppingOptions{.mode = "up"}), Error);
}
