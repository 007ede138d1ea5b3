// Thread replicas (lockstep/core/config.h set_thread_replicas, src/trainers/thread_replicas.h): a
// model with BatchNormalization fits as 2 in-process replicas of one core each, every batch split
// between them and the statistics pooled, and ends where one program on the whole batches ends:
// weights, moving statistics, per-epoch losses and metrics; with a last batch of one row (run
// alone), with uneven halves and with a frozen base. Where the rule says no (parameters
// outweigh activations, small batches, op determinism, the setting at 1) fit runs one program.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;

namespace {

// Conv -> BN(relu6) -> depthwise -> BN -> swish -> conv -> BN -> relu: the three fused forms.
Model bn_cnn(bool batch_norm = true, int steps_per_execution = 1) {
  set_random_seed(5);
  reset_layer_names();
  using namespace layers;
  std::vector<SequentialItem> items{Input({8, 8, 3}), Conv2D(8, 3, {.use_bias = false})};
  if (batch_norm) items.push_back(BatchNormalization());
  items.push_back(ReLU(ReLUOptions{.max_value = 6.0}));
  items.push_back(DepthwiseConv2D({3, 3}, {.padding = "same", .use_bias = false}));
  if (batch_norm) items.push_back(BatchNormalization());
  items.push_back(Activation("swish"));
  items.push_back(Conv2D(8, 1, {.use_bias = false}));
  if (batch_norm) items.push_back(BatchNormalization());
  items.push_back(Activation("relu"));
  items.push_back(GlobalAveragePooling2D());
  items.push_back(Dense(3));
  Model m = Sequential(items);
  m.compile({.optimizer = optimizers::SGD(0.05, 0.9),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"},
             .steps_per_execution = steps_per_execution});
  return m;
}

std::pair<Tensor, Tensor> make_data(int64_t n) {
  Tensor x = Tensor::empty(Shape{n, 8, 8, 3});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  Philox rng(3);
  for (int64_t i = 0; i < n; ++i) {
    const int c = int(rng.next_u32() % 3);
    y.data<int32_t>()[i] = c;
    for (int k = 0; k < 192; ++k)
      x.data<float>()[i * 192 + k] = (k % 3 == c ? 1.f : 0.f) + rng.uniform(-0.5f, 0.5f);
  }
  return {x, y};
}

History fit(Model& m, int replicas, int64_t rows, int batch, int epochs = 2) {
  test_util::ThreadReplicasGuard guard(replicas);
  auto [x, y] = make_data(rows);
  return m.fit(x, y, {.batch_size = batch, .epochs = epochs, .verbose = 0, .shuffle = false});
}

void expect_same_training(int64_t rows, int batch, int steps_per_execution = 1) {
  Model one = bn_cnn(true, steps_per_execution), two = bn_cnn(true, steps_per_execution);
  History h1 = fit(one, 1, rows, batch), h2 = fit(two, 2, rows, batch);
  EXPECT_EQ(h1.thread_replicas, 1);
  EXPECT_EQ(h2.thread_replicas, 2);
  EXPECT_EQ(h2.replicas, 1);  // (the user's step is one replica's)
  // Weights include the moving statistics; SGD with momentum over 2 epochs keeps rounding small.
  EXPECT_LT(test_util::max_abs_diff(one.get_weights(), two.get_weights()), 2e-5f);
  for (const char* k : {"loss", "accuracy"})
    for (size_t e = 0; e < 2; ++e)
      EXPECT_NEAR(h1.history[k][e], h2.history[k][e], 1e-5) << k << " epoch " << e;
  // And the comparison can fail: one epoch more moves the weights.
  Model three = bn_cnn();
  fit(three, 2, rows, batch, 3);
  EXPECT_GT(test_util::max_abs_diff(one.get_weights(), three.get_weights()), 1e-3f);
}

}  // namespace

TEST(ThreadReplicas, FitMatchesOneProgram) { expect_same_training(64, 16); }

// 16, 16, 16, 1: the last batch has fewer rows than replicas and runs alone, on replica 0's
// variables; the other replica takes them before the next epoch's first step.
TEST(ThreadReplicas, ALastBatchOfOneRowRunsAlone) { expect_same_training(49, 16); }

// Four steps per call into the programs (staged slots), the 1-row batch among them.
TEST(ThreadReplicas, StepsPerExecutionMatch) { expect_same_training(49, 16, 4); }

// 16, 16, 16, 11: halves of 6 and 5 (the first replica takes the odd row).
TEST(ThreadReplicas, UnevenHalvesMatch) { expect_same_training(59, 16); }

// A frozen backbone (transfer learning's first phase): the batch norms run in inference mode,
// only the head trains, and the replicas still match one program.
TEST(ThreadReplicas, FrozenBaseMatchesOneProgram) {
  auto frozen = [] {
    Model m = bn_cnn();
    for (auto& layer : m.layers()) layer->trainable = layer->class_name() == "Dense";
    m.compile({.optimizer = optimizers::SGD(0.05, 0.9),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    return m;
  };
  Model one = frozen(), two = frozen();
  History h1 = fit(one, 1, 64, 16), h2 = fit(two, 2, 64, 16);
  EXPECT_EQ(h2.thread_replicas, 2);
  EXPECT_LT(test_util::max_abs_diff(one.get_weights(), two.get_weights()), 1e-5f);
  for (size_t e = 0; e < 2; ++e) EXPECT_NEAR(h1.history["loss"][e], h2.history["loss"][e], 1e-5);
}

// A callback that rewrites the weights at an epoch's end (to replica 0's variables, the model's
// own) reaches every replica: both runs halve the Dense kernel after epoch 1 and agree after
// epoch 2; without the sync the second replica would train on the old kernel.
TEST(ThreadReplicas, WeightsACallbackWritesReachEveryReplica) {
  auto run = [](int replicas) {
    Model m = bn_cnn();
    test_util::ThreadReplicasGuard guard(replicas);
    auto [x, y] = make_data(64);
    auto halve = callbacks::LambdaCallback([&m](int epoch, const Logs&) {
      if (epoch != 0) return;
      std::vector<Tensor> w = m.get_weights();
      Tensor& kernel = w[w.size() - 2];  // the Dense kernel
      for (int64_t i = 0; i < kernel.numel(); ++i) kernel.data<float>()[i] *= 0.5f;
      m.set_weights(w);
    });
    History h = m.fit(
        x, y,
        {.batch_size = 16, .epochs = 2, .verbose = 0, .callbacks = {halve}, .shuffle = false});
    EXPECT_EQ(h.thread_replicas, replicas);
    return m.get_weights();
  };
  EXPECT_LT(test_util::max_abs_diff(run(1), run(2)), 2e-5f);
}

// A replica that fails (a label out of range in the second half of the batch) ends the fit with
// its own error, not a hang in the other replica's batch-norm exchange; the next fit of the same
// model runs on fresh replicas.
TEST(ThreadReplicas, AFailedReplicaEndsTheFitAndTheNextFitRuns) {
  Model m = bn_cnn();
  test_util::ThreadReplicasGuard guard(2);
  auto [x, y] = make_data(32);
  y.data<int32_t>()[20] = 7;  // 3 classes
  const std::string what = test_util::error_of(
      [&] { m.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0, .shuffle = false}); });
  EXPECT_NE(what.find("label"), std::string::npos) << what;
  y.data<int32_t>()[20] = 1;
  History h = m.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_EQ(h.thread_replicas, 2);
  EXPECT_TRUE(std::isfinite(h.history["loss"][0]));
}

TEST(ThreadReplicas, OnlyWhereTheRuleSaysSo) {
  {
    // Parameters outweigh activations (a row writes 707 elements, 8 rows a replica, ~100K
    // parameters): each replica's optimizer update would cost more than it saves.
    set_random_seed(5);
    using namespace layers;
    Model m = Sequential({Input({8, 8, 3}), Flatten(), Dense(512), Dense(3)});
    m.compile({.optimizer = optimizers::SGD(0.05),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    EXPECT_EQ(fit(m, 2, 32, 16, 1).thread_replicas, 1);
  }
  {
    Model m = bn_cnn();  // 8 rows a batch: fewer than kMinThreadReplicaRows per replica
    EXPECT_EQ(fit(m, 2, 32, 8, 1).thread_replicas, 1);
  }
  {
    Model m = bn_cnn();
    EXPECT_EQ(fit(m, 1, 32, 16, 1).thread_replicas, 1);  // the setting says off
  }
  {
    Model m = bn_cnn();
    config::enable_op_determinism();
    const int used = fit(m, 2, 32, 16, 1).thread_replicas;
    config::disable_op_determinism();
    EXPECT_EQ(used, 1);
  }
  Model m = bn_cnn();
  EXPECT_EQ(fit(m, 2, 32, 16, 1).thread_replicas, 2);
  // evaluate and predict do not split: the plain programs, the same results after the fit.
  auto [x, y] = make_data(32);
  Model copy = bn_cnn();
  copy.set_weights(m.get_weights());
  EXPECT_NEAR(m.evaluate(x, y, {.verbose = 0})["loss"], copy.evaluate(x, y, {.verbose = 0})["loss"],
              1e-6);
}

TEST(ThreadReplicas, SettingOutOfRangeIsAnError) {
  EXPECT_THROW(config::set_thread_replicas(-1), Error);
  EXPECT_THROW(config::set_thread_replicas(1025), Error);
}
