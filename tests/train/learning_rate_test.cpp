// The live learning rate: set_learning_rate between epochs changes the compiled step's update
// without a new program (weights against a hand-computed SGD step), ReduceLROnPlateau and
// LearningRateScheduler against the rates Keras produces, the same under MirroredStrategy,
// and CSVLogger's file read back.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ds = lockstep::distribute;
using lockstep::test_util::error_of;

namespace {

// y = x w + b with w [2, 1], b [1]; MSE; plain SGD.
Model linear_model(double learning_rate) {
  reset_layer_names();
  Model m = Sequential({layers::Input({2}), layers::Dense(1)});
  m.set_weights(
      {Tensor::from_vector(Shape{2, 1}, {0.5f, -0.25f}), Tensor::from_vector(Shape{1}, {0.1f})});
  m.compile({.optimizer = optimizers::SGD(learning_rate), .loss = losses::MeanSquaredError()});
  return m;
}

const std::vector<float> kX = {1, 2, 0.5f, -1, -1.5f, 0.25f, 2, 1};
const std::vector<float> kY = {1, -0.5f, 0.25f, 2};

// One SGD step on the whole batch: loss = mean((x w + b - y)^2).
std::vector<double> sgd_step(const std::vector<double>& wb, double lr) {
  double gw0 = 0, gw1 = 0, gb = 0;
  const int n = 4;
  for (int i = 0; i < n; ++i) {
    double err = kX[2 * i] * wb[0] + kX[2 * i + 1] * wb[1] + wb[2] - kY[i];
    gw0 += 2.0 / n * err * kX[2 * i];
    gw1 += 2.0 / n * err * kX[2 * i + 1];
    gb += 2.0 / n * err;
  }
  return {wb[0] - lr * gw0, wb[1] - lr * gw1, wb[2] - lr * gb};
}

std::vector<double> weights_of(const Model& m) {
  auto w = m.get_weights();
  return {w[0].to_vector()[0], w[0].to_vector()[1], w[1].to_vector()[0]};
}

void fit_one_epoch(Model& m) {
  Tensor x = Tensor::from_vector(Shape{4, 2}, kX), y = Tensor::from_vector(Shape{4, 1}, kY);
  m.fit(x, y, {.batch_size = 4, .epochs = 1, .verbose = 0, .shuffle = false});
}

}  // namespace

TEST(LearningRate, SetBetweenEpochsChangesTheStepWithoutRecompiling) {
  Model m = linear_model(0.1);
  auto& opt = *m.compile_config().optimizer;
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.1);
  std::vector<double> expected = sgd_step(weights_of(m), 0.1);
  fit_one_epoch(m);
  const int programs = m.programs_compiled();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(weights_of(m)[i], expected[i], 1e-6) << i;

  opt.set_learning_rate(0.025);
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.025);
  EXPECT_DOUBLE_EQ(opt.get_config()["learning_rate"].get<double>(), 0.025);
  expected = sgd_step(weights_of(m), 0.025);
  fit_one_epoch(m);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(weights_of(m)[i], expected[i], 1e-6) << i;

  opt.set_learning_rate(0.0);  // a zero rate leaves the weights exactly where they are
  expected = weights_of(m);
  fit_one_epoch(m);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(weights_of(m)[i], expected[i]) << i;
  EXPECT_EQ(m.programs_compiled(), programs);
}

TEST(LearningRate, OptimizerWithScheduleHasNoSettableRate) {
  auto opt =
      optimizers::SGD(0.0, 0.0, false, {.schedule = schedules::ExponentialDecay(0.1, 1, 0.5)});
  EXPECT_TRUE(opt->has_schedule());
  EXPECT_NE(error_of([&] { opt->set_learning_rate(0.01); }).find("not settable"),
            std::string::npos);
  EXPECT_NE(error_of([] { optimizers::SGD()->set_learning_rate(-1); }).find(">= 0"),
            std::string::npos);
}

namespace {

// Drives a callback's epoch hooks with the given monitor values; returns the "learning_rate"
// each epoch's logs carried (the rate that epoch trained with).
std::vector<double> drive(Callback& cb, Model& m, const std::string& monitor,
                          const std::vector<double>& values) {
  cb.set_model(&m);
  cb.on_train_begin({});
  std::vector<double> logged;
  for (size_t e = 0; e < values.size(); ++e) {
    cb.on_epoch_begin(int(e), {});
    Logs logs{{monitor, values[e]}, {"loss", 1.0}};
    cb.add_epoch_logs(int(e), logs);
    logged.push_back(logs.at("learning_rate"));
    cb.on_epoch_end(int(e), logs);
  }
  return logged;
}

void expect_rates(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-7 * want[i]) << i;
}

}  // namespace

TEST(LearningRate, ReduceLROnPlateauMatchesKeras) {
  // Expected rates from keras.callbacks.ReduceLROnPlateau.on_epoch_end (Keras 3) on the same
  // sequences: min mode with cooldown and a floor; max mode ("acc" in the name) with min_delta.
  Model m = linear_model(1.0);
  auto reduce = callbacks::ReduceLROnPlateau("val_loss", 0.5, 2, 0, "auto", 0.0, 1, 0.2);
  expect_rates(drive(*reduce, m, "val_loss",
                     {1.0, 0.9, 0.9, 0.95, 0.9, 0.8, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85}),
               {1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.2, 0.2});
  EXPECT_NEAR(m.compile_config().optimizer->learning_rate(), 0.2, 1e-12);

  Model a = linear_model(1.0);
  auto on_accuracy = callbacks::ReduceLROnPlateau("val_accuracy", 0.1, 1, 0, "auto", 0.01);
  expect_rates(drive(*on_accuracy, a, "val_accuracy", {0.5, 0.6, 0.6, 0.6, 0.7, 0.55, 0.55}),
               {1.0, 1.0, 1.0, 0.1, 0.01, 0.01, 0.001});
  EXPECT_NEAR(a.compile_config().optimizer->learning_rate(), 1e-4, 1e-10);

  EXPECT_NE(error_of([] { callbacks::ReduceLROnPlateau("loss", 1.0); }).find("factor"),
            std::string::npos);
}

TEST(LearningRate, LearningRateSchedulerInFit) {
  Model m = linear_model(0.1);
  std::vector<double> expected = weights_of(m);
  for (double lr : {0.1, 0.05, 0.025}) expected = sgd_step(expected, lr);
  auto scheduler = callbacks::LearningRateScheduler(
      [](int epoch, double lr) { return epoch == 0 ? lr : lr * 0.5; });
  Tensor x = Tensor::from_vector(Shape{4, 2}, kX), y = Tensor::from_vector(Shape{4, 1}, kY);
  History h = m.fit(
      x, y,
      {.batch_size = 4, .epochs = 3, .verbose = 0, .callbacks = {scheduler}, .shuffle = false});
  expect_rates(h.history.at("learning_rate"), {0.1, 0.05, 0.025});
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(weights_of(m)[i], expected[i], 1e-6) << i;
  EXPECT_EQ(m.programs_compiled(), 1);
}

TEST(LearningRate, EveryMirroredReplicaSeesTheNewRate) {
  // 2 replicas x 2 rows: the update is the same as one replica's on 4 rows. A replica that
  // kept the old rate would drift from replica 0 and change the next epoch's gradient.
  auto scheduler = [] {
    return callbacks::LearningRateScheduler([](int epoch, double) { return 0.2 / (1 + epoch); });
  };
  Model single = linear_model(0.2);
  Tensor x = Tensor::from_vector(Shape{4, 2}, kX), y = Tensor::from_vector(Shape{4, 1}, kY);
  FitConfig cfg{
      .batch_size = 4, .epochs = 4, .verbose = 0, .callbacks = {scheduler()}, .shuffle = false};
  single.fit(x, y, cfg);

  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model mirrored = [&] {
    auto scope = strategy.scope();
    return linear_model(0.2);
  }();
  cfg.callbacks = {scheduler()};
  History h = mirrored.fit(x, y, cfg);
  EXPECT_EQ(h.replicas, 2);
  expect_rates(h.history.at("learning_rate"), {0.2, 0.1, 0.2 / 3, 0.05});
  std::vector<double> expected = weights_of(linear_model(0.2));
  for (int e = 0; e < 4; ++e) expected = sgd_step(expected, 0.2 / (1 + e));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(weights_of(mirrored)[i], weights_of(single)[i], 1e-6) << i;
    EXPECT_NEAR(weights_of(mirrored)[i], expected[i], 1e-5) << i;
  }
}

TEST(CSVLogger, WritesKerasColumnsAndAppends) {
  const std::string path = (test_util::temp_dir("csv_logger", true) / "log.csv").string();
  Model m = linear_model(0.1);
  Tensor x = Tensor::from_vector(Shape{4, 2}, kX), y = Tensor::from_vector(Shape{4, 1}, kY);
  History h = m.fit(x, y,
                    {.batch_size = 4,
                     .epochs = 2,
                     .verbose = 0,
                     .callbacks = {callbacks::CSVLogger(path, ";")},
                     .validation_data = {x, y},
                     .shuffle = false});
  m.fit(x, y,
        {.batch_size = 4,
         .epochs = 1,
         .verbose = 0,
         .callbacks = {callbacks::CSVLogger(path, ";", true)},
         .validation_data = {x, y},
         .shuffle = false});
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    ASSERT_FALSE(line.empty());
    ASSERT_EQ(line.back(), '\r');  // Python's csv module ends rows with \r\n
    line.pop_back();
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, ';');) fields.push_back(f);
    rows.push_back(fields);
  }
  ASSERT_EQ(rows.size(), 4u);  // one header (append keeps it), 2 + 1 epochs
  EXPECT_EQ(rows[0], (std::vector<std::string>{"epoch", "input_wait_fraction", "input_wait_seconds",
                                               "loss", "val_loss"}));
  EXPECT_EQ(rows[1][0], "0");
  EXPECT_EQ(rows[2][0], "1");
  EXPECT_EQ(rows[3][0], "0");  // the second fit's first epoch
  for (int e = 0; e < 2; ++e) {
    EXPECT_DOUBLE_EQ(std::stod(rows[size_t(e) + 1][3]), h.history.at("loss")[size_t(e)]);
    EXPECT_DOUBLE_EQ(std::stod(rows[size_t(e) + 1][4]), h.history.at("val_loss")[size_t(e)]);
  }
}

TEST(CSVLogger, AddsValidationTwinsWithoutValidation) {
  const std::string path = (test_util::temp_dir("csv_logger2", true) / "log.csv").string();
  Model m = linear_model(0.1);
  auto scheduler = callbacks::LearningRateScheduler([](int, double lr) { return lr; });
  Tensor x = Tensor::from_vector(Shape{4, 2}, kX), y = Tensor::from_vector(Shape{4, 1}, kY);
  m.fit(x, y,
        {.batch_size = 4,
         .epochs = 1,
         .verbose = 0,
         .callbacks = {scheduler, callbacks::CSVLogger(path)},
         .shuffle = false});
  std::string text = test_util::read_text_file(path);
  EXPECT_EQ(text.substr(0, text.find('\r')),
            "epoch,input_wait_fraction,input_wait_seconds,learning_rate,loss,"
            "val_input_wait_fraction,val_input_wait_seconds,val_learning_rate,val_loss");
  EXPECT_NE(text.find(",0.1,"), std::string::npos) << text;  // the rate, as Python prints it
  EXPECT_NE(text.find(",NA,NA,NA,NA\r\n"), std::string::npos) << text;
}
