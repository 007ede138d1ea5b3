// CompileConfig::steps_per_execution: N train steps staged and run inside one call into the
// compiled program give the weights and logs of N = 1, bit for bit (dropout and an
// augmentation layer draw from the step id), on one device and under 2 mirrored replicas, with
// a tail batch of another size, a NaN stop inside an execution and a Dataset that continues
// across epochs; the batch callbacks run once per execution with Keras 3's indices; a staged
// multi-step run allocates nothing.
#include <gtest/gtest.h>

#include <cstring>

#include "lockstep/core/allocator.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"
#include "trainers/program.h"

using namespace lockstep;
namespace ds = lockstep::distribute;

namespace {

// Augmentation (RandomFlip, RandomTranslation) and Dropout: every step draws from its step id.
Model augmented_cnn() {
  using namespace layers;
  set_random_seed(11);
  reset_layer_names();
  return Sequential({Input({8, 8, 2}), RandomFlip("horizontal", 3),
                     RandomTranslation(0.2, 0.2, {.seed = 4}), Conv2D(4, 3, {.activation = "relu"}),
                     MaxPooling2D({2, 2}), Flatten(), Dropout(0.3),
                     Dense(16, {.activation = "relu"}), Dense(3)});
}

CompileConfig compile_config(int steps_per_execution) {
  return {.optimizer = optimizers::Adam(1e-2),
          .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
          .metrics = {"accuracy"},
          .steps_per_execution = steps_per_execution};
}

// Two augmented CNNs under `strategy`, compiled with 1 and 8 steps per execution, with the same
// weights.
std::pair<Model, Model> mirrored_pair(ds::Strategy& strategy) {
  auto make = [&](int steps_per_execution) {
    auto scope = strategy.scope();
    Model m = augmented_cnn();
    m.compile(compile_config(steps_per_execution));
    return m;
  };
  Model a = make(1), b = make(8);
  b.set_weights(a.get_weights());
  return {std::move(a), std::move(b)};
}

// Every weight (and optimizer slot) of a equals b's, bit for bit.
void expect_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].nbytes(), b[k].nbytes()) << "weight " << k;
    EXPECT_EQ(std::memcmp(a[k].raw(), b[k].raw(), a[k].nbytes()), 0) << "weight " << k;
  }
}

std::vector<Tensor> optimizer_state(const Model& m) {
  std::vector<Tensor> out;
  for (auto& v : m.compile_config().optimizer->variables()) out.push_back(v->value);
  return out;
}

// Records the batch callbacks: (kind, batch index) in call order.
struct BatchRecorder : Callback {
  std::vector<std::pair<char, int>> calls;
  std::vector<Logs> end_logs;
  void on_train_batch_begin(int batch, const Logs&) override { calls.push_back({'b', batch}); }
  void on_train_batch_end(int batch, const Logs& logs) override {
    calls.push_back({'e', batch});
    end_logs.push_back(logs);
  }
};

// 100 samples in batches of 8: 12 full batches and a tail of 4 (a program of its own).
constexpr int64_t kSamples = 100;

}  // namespace

TEST(StepsPerExecution, EightStepsMatchOneStepBitForBit) {
  auto [x, y] = test_util::quadrant_images(kSamples, 21);
  Model a = augmented_cnn(), b = augmented_cnn();
  b.set_weights(a.get_weights());
  a.compile(compile_config(1));
  b.compile(compile_config(8));
  const FitConfig fit{.batch_size = 8, .epochs = 3, .verbose = 0, .seed = 5};
  History ha = a.fit(x, y, fit), hb = b.fit(x, y, fit);
  expect_same_bits(a.get_weights(), b.get_weights());
  expect_same_bits(optimizer_state(a), optimizer_state(b));
  for (const char* name : {"loss", "accuracy"}) {
    ASSERT_EQ(ha.history[name].size(), 3u) << name;
    EXPECT_EQ(ha.history[name], hb.history[name]) << name;  // exactly
  }
  EXPECT_EQ(ha.samples, hb.samples);
  EXPECT_EQ(ha.samples, 3 * kSamples);
  EXPECT_LT(ha.history["loss"].back(), ha.history["loss"].front());  // it trains
  // The step ids went on across epochs and executions alike: a further epoch still agrees.
  EXPECT_EQ(a.compile_config().optimizer->iterations()->value.item(), 3 * 13);
  EXPECT_EQ(b.compile_config().optimizer->iterations()->value.item(), 3 * 13);
}

TEST(StepsPerExecution, TwoMirroredReplicasMatchOneStepPerExecution) {
  auto [x, y] = test_util::quadrant_images(kSamples, 22);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  auto [a, b] = mirrored_pair(strategy);
  const FitConfig fit{.batch_size = 8, .epochs = 2, .verbose = 0, .seed = 6};
  History ha = a.fit(x, y, fit), hb = b.fit(x, y, fit);
  expect_same_bits(a.get_weights(), b.get_weights());
  expect_same_bits(optimizer_state(a), optimizer_state(b));
  // The replicas' metric totals are folded into replica 0's once per execution instead of once
  // per step: the same sums in another order, so equal to float rounding (the counts exactly).
  for (const char* name : {"loss", "accuracy"}) {
    ASSERT_EQ(ha.history[name].size(), 2u) << name;
    ASSERT_EQ(hb.history[name].size(), 2u) << name;
  }
  EXPECT_EQ(ha.replicas, 2);
  EXPECT_EQ(ha.samples, 2 * kSamples);
  for (const char* name : {"loss", "accuracy"})
    for (size_t e = 0; e < 2; ++e)
      EXPECT_NEAR(ha.history[name][e], hb.history[name][e], 1e-6 * std::abs(ha.history[name][e]))
          << name << " epoch " << e;
  EXPECT_EQ(ha.samples, hb.samples);
}

TEST(StepsPerExecution, BatchCallbacksRunOncePerExecutionWithKerasIndices) {
  auto [x, y] = test_util::quadrant_images(kSamples, 23);
  Model m = augmented_cnn();
  m.compile(compile_config(8));
  auto recorder = std::make_shared<BatchRecorder>();
  m.fit(x, y, {.batch_size = 8, .epochs = 2, .verbose = 0, .callbacks = {recorder}});
  // 13 steps an epoch: executions [0, 8) and [8, 13). Keras 3: on_train_batch_begin(first step),
  // on_train_batch_end(last step) with the logs after the execution.
  const std::vector<std::pair<char, int>> epoch{{'b', 0}, {'e', 7}, {'b', 8}, {'e', 12}};
  std::vector<std::pair<char, int>> expected = epoch;
  expected.insert(expected.end(), epoch.begin(), epoch.end());
  EXPECT_EQ(recorder->calls, expected);
  ASSERT_EQ(recorder->end_logs.size(), 4u);
  EXPECT_GT(recorder->end_logs[0].at("loss"), 0);
  EXPECT_GT(recorder->end_logs[0].count("accuracy"), 0u);
}

TEST(StepsPerExecution, NanInsideAnExecutionStopsOnTheSameStep) {
  auto [x, y] = test_util::quadrant_images(64, 24);
  // Image 41 all NaN: it is in batch 5, step 6 of the epoch.
  const int64_t row = 8 * 8 * 2;
  for (int64_t i = 0; i < row; ++i) x.data<float>()[41 * row + i] = NAN;
  // Linear after the flip, so the NaN reaches the loss (a ReLU or a max-pool would drop it).
  auto linear = [] {
    using namespace layers;
    set_random_seed(12);
    return Sequential(
        {Input({8, 8, 2}), RandomFlip("horizontal", 3), Flatten(), Dropout(0.3), Dense(3)});
  };
  Model a = linear(), b = linear();
  b.set_weights(a.get_weights());
  a.compile(compile_config(1));
  b.compile(compile_config(4));
  const FitConfig fit{.batch_size = 8, .epochs = 2, .verbose = 0, .shuffle = false};
  History ha = a.fit(x, y, fit), hb = b.fit(x, y, fit);
  ASSERT_TRUE(ha.stopped_on_nan);
  ASSERT_TRUE(hb.stopped_on_nan);
  EXPECT_EQ(ha.stop_reason, hb.stop_reason);
  EXPECT_NE(ha.stop_reason.find("epoch 1, step 6"), std::string::npos) << ha.stop_reason;
  // The steps after the bad one (7 and 8, in the same execution of 4) did not run.
  EXPECT_EQ(a.compile_config().optimizer->iterations()->value.item(), 6);
  EXPECT_EQ(b.compile_config().optimizer->iterations()->value.item(), 6);
  EXPECT_EQ(ha.samples, hb.samples);
}

TEST(StepsPerExecution, DatasetContinuingAcrossEpochsMatches) {
  auto [x, y] = test_util::quadrant_images(kSamples, 25);
  auto dataset = [&] { return data::Dataset::from_tensor_slices({x, y}).batch(8).repeat(); };
  Model a = augmented_cnn(), b = augmented_cnn();
  b.set_weights(a.get_weights());
  a.compile(compile_config(1));
  b.compile(compile_config(3));
  // 5 steps an epoch in executions of 3 + 2; the iterator runs on across the epochs.
  const FitConfig fit{.epochs = 3, .verbose = 0, .steps_per_epoch = 5};
  History ha = a.fit(dataset(), fit), hb = b.fit(dataset(), fit);
  expect_same_bits(a.get_weights(), b.get_weights());
  EXPECT_EQ(ha.history["loss"], hb.history["loss"]);
  // 15 steps: the 13 batches of one pass (12 of 8, a tail of 4: in epoch 3's first execution,
  // a run of its own) and 2 of the next.
  EXPECT_EQ(ha.samples, 14 * 8 + 4);
  EXPECT_EQ(hb.samples, 14 * 8 + 4);
}

TEST(StepsPerExecution, StagedStepsDoNotAllocateAndMatchSingleSteps) {
  auto [x, y] = test_util::quadrant_images(32, 26);
  Model a = augmented_cnn(), b = augmented_cnn();
  b.set_weights(a.get_weights());
  a.compile(compile_config(1));
  b.compile(compile_config(4));
  Program pa(a, Program::Kind::train, 8, metrics::Mean("loss"), {});
  Program pb(b, Program::Kind::train, 8, metrics::Mean("loss"), {});
  pb.stage(4);
  for (int s = 0; s < 4; ++s) {
    pb.staged_x(s).copy_from(x.slice(8 * s, 8 * s + 8));
    pb.staged_y(s).copy_from(y.slice(8 * s, 8 * s + 8));
  }
  const size_t before = allocation_count();
  EXPECT_EQ(pb.run_steps(0, 4, 100), 4);
  EXPECT_EQ(allocation_count(), before);
  for (int s = 0; s < 4; ++s) {
    pa.x().copy_from(x.slice(8 * s, 8 * s + 8));
    pa.y().copy_from(y.slice(8 * s, 8 * s + 8));
    EXPECT_EQ(pa.run_steps(-1, 1, 100 + uint64_t(s)), 1);
  }
  EXPECT_EQ(pa.loss(), pb.loss());
  expect_same_bits(a.get_weights(), b.get_weights());
}

TEST(StepsPerExecution, StagingErrorsNameTheSlot) {
  Model m = augmented_cnn();
  m.compile(compile_config(2));
  Program p(m, Program::Kind::train, 8, metrics::Mean("loss"), {});
  p.stage(2);
  auto msg = test_util::error_of([&] { p.staged_x(2); });
  EXPECT_NE(msg.find("slot 2"), std::string::npos) << msg;
  msg = test_util::error_of([&] { p.run_steps(1, 2, 0); });
  EXPECT_NE(msg.find("2 staged slots"), std::string::npos) << msg;
}

namespace {

// Records evaluate's and predict's batch callbacks: (kind, batch index) in call order.
struct TestPredictRecorder : Callback {
  std::vector<std::pair<char, int>> calls;
  std::vector<Logs> end_logs;
  void on_test_batch_begin(int batch, const Logs&) override { calls.push_back({'b', batch}); }
  void on_test_batch_end(int batch, const Logs& logs) override {
    calls.push_back({'e', batch});
    end_logs.push_back(logs);
  }
  void on_predict_batch_begin(int batch, const Logs&) override { calls.push_back({'B', batch}); }
  void on_predict_batch_end(int batch, const Logs&) override { calls.push_back({'E', batch}); }
};

void expect_same_tensor(const Tensor& a, const Tensor& b) {
  ASSERT_TRUE(a.defined() && b.defined());
  ASSERT_EQ(a.shape().str(), b.shape().str());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

// Sample weights 0.5, 1, ..., 3 (cycling).
Tensor cycling_weights(int64_t n) {
  std::vector<float> w;
  for (int64_t i = 0; i < n; ++i) w.push_back(0.5f * float(1 + i % 6));
  return Tensor::from_vector({n}, w);
}

}  // namespace

// 100 samples in batches of 8: 13 batches, the last of 4 (a program of its own); with 8 steps
// per execution, executions of 8 and 5 batches (a last partial group).
TEST(StepsPerExecution, EvaluateMatchesOneStepPerExecution) {
  auto [x, y] = test_util::quadrant_images(kSamples, 27);
  Model a = augmented_cnn(), b = augmented_cnn();
  b.set_weights(a.get_weights());
  auto cfg = [](int n) {
    CompileConfig c = compile_config(n);
    c.weighted_metrics = {"accuracy"};
    return c;
  };
  a.compile(cfg(1));
  b.compile(cfg(8));
  a.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0});  // weights other than the start
  b.set_weights(a.get_weights());
  for (bool weighted : {false, true}) {
    EvaluateConfig ec{.batch_size = 8, .verbose = 0};
    if (weighted) ec.sample_weight = cycling_weights(kSamples);
    const Logs la = a.evaluate(x, y, ec), lb = b.evaluate(x, y, ec);
    ASSERT_EQ(la.size(), 3u);
    EXPECT_EQ(la, lb) << "weighted " << weighted;  // exactly
    EXPECT_GT(la.at("loss"), 0);
  }
  // A Dataset of the same batches (and its last partial batch).
  auto dataset = data::Dataset::from_tensor_slices({x, y}).batch(8);
  EXPECT_EQ(a.evaluate(dataset, {.verbose = 0}), b.evaluate(dataset, {.verbose = 0}));
  // Keras 3's callbacks: once per execution, begin(first batch), end(last batch) with the
  // running metrics after it.
  auto recorder = std::make_shared<TestPredictRecorder>();
  const Logs lb = b.evaluate(x, y, {.batch_size = 8, .verbose = 0, .callbacks = {recorder}});
  const std::vector<std::pair<char, int>> expected{{'b', 0}, {'e', 7}, {'b', 8}, {'e', 12}};
  EXPECT_EQ(recorder->calls, expected);
  ASSERT_EQ(recorder->end_logs.size(), 2u);
  EXPECT_EQ(recorder->end_logs[1], lb);
  // After 8 of the 13 batches: evaluating the first 64 samples gives those running metrics.
  const Logs first64 = a.evaluate(x.slice(0, 64).contiguous(), y.slice(0, 64).contiguous(),
                                  {.batch_size = 8, .verbose = 0});
  EXPECT_EQ(recorder->end_logs[0], first64);
}

TEST(StepsPerExecution, PredictMatchesOneStepPerExecution) {
  auto [x, y] = test_util::quadrant_images(kSamples, 28);
  Model a = augmented_cnn(), b = augmented_cnn();
  b.set_weights(a.get_weights());
  a.compile(compile_config(1));
  b.compile(compile_config(8));
  for (int batch : {8, 7, 100}) {  // 13 batches (a tail of 4); 15 (a tail of 2); one
    const Tensor pa = a.predict(x, batch), pb = b.predict(x, batch);
    ASSERT_EQ(pa.dim(0), kSamples);
    expect_same_tensor(pa, pb);
  }
  // Dataset input, with a step id that differs: predictions do not depend on it.
  auto dataset = data::Dataset::from_tensor_slices({x}).batch(8);
  expect_same_tensor(a.predict(dataset), b.predict(dataset));
  expect_same_tensor(b.predict(dataset), b.predict(x, 8));
  auto recorder = std::make_shared<TestPredictRecorder>();
  b.predict(x, {.batch_size = 8, .callbacks = {recorder}});
  const std::vector<std::pair<char, int>> expected{{'B', 0}, {'E', 7}, {'B', 8}, {'E', 12}};
  EXPECT_EQ(recorder->calls, expected);
}

// Two outputs: each staged step's predictions of each output are kept until read.
TEST(StepsPerExecution, PredictSeveralOutputsMatches) {
  auto [x, y] = test_util::quadrant_images(kSamples, 29);
  auto make = [] {
    using namespace layers;
    set_random_seed(13);
    reset_layer_names();
    auto in = Input({8, 8, 2});
    auto h = Dense(8, {.activation = "relu"})(Flatten()(in));
    return Model({in}, {Dense(3, {.name = "a"})(h), Dense(1, {.name = "b"})(h)});
  };
  Model a = make(), b = make();
  b.set_weights(a.get_weights());
  auto cfg = [](int n) {
    return CompileConfig{.optimizer = optimizers::Adam(1e-2),
                         .losses = {losses::SparseCategoricalCrossentropy({.from_logits = true}),
                                    losses::get("mse")},
                         .output_metrics = {{"accuracy"}, {"mae"}},
                         .steps_per_execution = n};
  };
  a.compile(cfg(1));
  b.compile(cfg(8));
  const std::vector<Tensor> pa = a.predict(std::vector<Tensor>{x}, {.batch_size = 8}),
                            pb = b.predict(std::vector<Tensor>{x}, {.batch_size = 8});
  ASSERT_EQ(pa.size(), 2u);
  ASSERT_EQ(pb.size(), 2u);
  for (size_t o = 0; o < 2; ++o) expect_same_tensor(pa[o], pb[o]);
  Tensor size = Tensor::empty({kSamples, 1});
  for (int64_t i = 0; i < kSamples; ++i) size.data<float>()[i] = float(i % 5);
  EXPECT_EQ(a.evaluate({x}, {y, size}, {.batch_size = 8, .verbose = 0}),
            b.evaluate({x}, {y, size}, {.batch_size = 8, .verbose = 0}));
}

TEST(StepsPerExecution, EvaluateAndPredictUnderTwoMirroredReplicasMatch) {
  auto [x, y] = test_util::quadrant_images(kSamples, 30);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  auto [a, b] = mirrored_pair(strategy);
  // Batches of 9: 11 full ones split 5 + 4, and a tail of 1 that one replica takes alone.
  EXPECT_EQ(a.evaluate(x, y, {.batch_size = 9, .verbose = 0}),
            b.evaluate(x, y, {.batch_size = 9, .verbose = 0}));
  expect_same_tensor(a.predict(x, 9), b.predict(x, 9));
}
