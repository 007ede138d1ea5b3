// Model end to end: compiled vs eager parity, backends, residual functional model training,
// steps_per_execution, no per-step allocation, summary, and bad-input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "lockstep/core/allocator.h"
#include "lockstep/lockstep.h"
#include "test_util.h"
#include "trainers/program.h"

using namespace lockstep;

namespace {

Model small_cnn(bool dropout) {
  using namespace layers;
  std::vector<SequentialItem> items = {Input({8, 8, 2}), Conv2D(4, 3, {.activation = "relu"}),
                                       MaxPooling2D({2, 2}), Flatten()};
  if (dropout) items.push_back(Dropout(0.3));
  items.push_back(Dense(16, {.activation = "relu"}));
  items.push_back(Dense(3));
  return Sequential(items);
}

std::pair<Tensor, Tensor> synthetic(int64_t n, uint64_t seed) {
  return test_util::quadrant_images(n, seed);
}

std::vector<double> step_losses(Model& m, const Tensor& x, const Tensor& y, int steps, int batch) {
  std::vector<double> losses;
  auto cb =
      callbacks::LambdaCallback({}, [&](int, const Logs& l) { losses.push_back(l.at("loss")); });
  m.fit(x.slice(0, int64_t(steps) * batch), y.slice(0, int64_t(steps) * batch),
        {.batch_size = batch, .epochs = 1, .verbose = 0, .callbacks = {cb}, .shuffle = false});
  return losses;
}

using lockstep::test_util::error_of;

}  // namespace

TEST(ModelTrain, CompiledMatchesEagerOver20Steps) {
  auto [x, y] = synthetic(20 * 16, 3);
  set_random_seed(7);
  Model a = small_cnn(true);
  set_random_seed(7);
  Model b = small_cnn(true);
  b.set_weights(a.get_weights());
  a.compile({.optimizer = optimizers::Adam(1e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  b.compile({.optimizer = optimizers::Adam(1e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .run_eagerly = true});
  auto la = step_losses(a, x, y, 20, 16);
  auto lb = step_losses(b, x, y, 20, 16);
  ASSERT_EQ(la.size(), 20u);
  ASSERT_EQ(lb.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * std::fabs(lb[i])) << "step " << i;
  auto wa = a.get_weights(), wb = b.get_weights();
  for (size_t k = 0; k < wa.size(); ++k) {
    auto va = wa[k].to_vector(), vb = wb[k].to_vector();
    for (size_t i = 0; i < va.size(); ++i)
      ASSERT_NEAR(va[i], vb[i], 1e-4 + 1e-4 * std::fabs(vb[i]));
  }
  EXPECT_LT(la.back(), la.front());  // it learns
}

TEST(ModelTrain, CpuBackendMatchesReferenceBackend) {
  auto [x, y] = synthetic(10 * 16, 4);
  Model a = small_cnn(false);
  Model b = small_cnn(false);
  b.set_weights(a.get_weights());
  a.compile({.optimizer = optimizers::SGD(0.05, 0.9),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  b.compile({.optimizer = optimizers::SGD(0.05, 0.9),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .backend = "reference"});
  auto la = step_losses(a, x, y, 10, 16), lb = step_losses(b, x, y, 10, 16);
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(la[i], lb[i], 1e-3 * std::fabs(lb[i])) << "step " << i;
}

TEST(ModelTrain, StepsPerExecutionGivesSameResult) {
  auto [x, y] = synthetic(12 * 8, 5);
  Model a = small_cnn(true), b = small_cnn(true);
  b.set_weights(a.get_weights());
  a.compile({.optimizer = optimizers::Adam(1e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  b.compile({.optimizer = optimizers::Adam(1e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .steps_per_execution = 4});
  auto ha = a.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  auto hb = b.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_NEAR(ha.history["loss"][0], hb.history["loss"][0], 1e-6);
}

TEST(ModelTrain, FunctionalResidualModelLearns) {
  using namespace layers;
  KTensor in = Input({8, 8, 2});
  KTensor h = Conv2D(8, 3, {.padding = "same", .activation = "relu"})(in);
  KTensor r = Conv2D(8, 3, {.padding = "same"})(h);
  KTensor s = Add()({h, r});
  s = Activation("relu")(s);
  KTensor b = Conv2D(8, 1, {.activation = "relu"})(in);  // a second branch
  KTensor c = Concatenate()({s, b});
  c = GlobalAveragePooling2D()(c);
  KTensor out = Dense(3)(c);
  Model m(in, out, "residual");
  m.compile({.optimizer = optimizers::Adam(2e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  auto [x, y] = synthetic(512, 9);
  auto hist = m.fit(x, y, {.batch_size = 32, .epochs = 8, .verbose = 0});
  EXPECT_LT(hist.history["loss"].back(), 0.5 * hist.history["loss"].front());
  auto [xt, yt] = synthetic(256, 10);
  auto r2 = m.evaluate(xt, yt, {.batch_size = 64, .verbose = 0});
  EXPECT_GT(r2["accuracy"], 0.9);
  Tensor p = m.predict(xt, 100);
  EXPECT_EQ(p.shape(), (Shape{256, 3}));
}

TEST(ModelTrain, CompiledStepDoesNotAllocate) {
  Model m = small_cnn(true);
  m.compile({.optimizer = optimizers::Adam(1e-3),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  auto [x, y] = synthetic(16, 1);
  Program p(m, Program::Kind::train, 16, metrics::Mean("loss"), {});
  p.x().copy_from(x);
  p.y().copy_from(y);
  p.run();
  size_t before = allocation_count();
  for (int i = 0; i < 5; ++i) p.run();
  EXPECT_EQ(allocation_count(), before);
  EXPECT_LT(p.executable().arena_bytes(), p.executable().unplanned_bytes());
}

TEST(ModelSummary, ReferenceCnnTable) {
  using namespace layers;
  reset_layer_names();
  Model m = Sequential({Input({28, 28, 1}), Conv2D(32, 3, {.activation = "relu"}),
                        Conv2D(64, 3, {.activation = "relu"}), MaxPooling2D({2, 2}), Dropout(0.25),
                        Flatten(), Dense(128, {.activation = "relu"}), Dropout(0.5), Dense(10)});
  std::ostringstream os;
  m.summary(os);
  std::string s = os.str();
  EXPECT_NE(s.find("conv2d (Conv2D)"), std::string::npos) << s;
  EXPECT_NE(s.find("(None, 24, 24, 64)"), std::string::npos) << s;
  EXPECT_NE(s.find("18,496"), std::string::npos) << s;
  EXPECT_NE(s.find("Total params: 1,199,882 (4.58 MB)"), std::string::npos) << s;
  EXPECT_NE(s.find("Non-trainable params: 0"), std::string::npos) << s;
}

TEST(ModelErrors, WrongInputShapeNamesModelAndShapes) {
  Model m = small_cnn(false);
  m.compile({.optimizer = optimizers::Adam(),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  Tensor x = Tensor::zeros(Shape{4, 8, 8}), y = Tensor::zeros(Shape{4}, DType::i32);
  auto msg = error_of([&] { m.fit(x, y, {.verbose = 0}); });
  EXPECT_NE(msg.find("(4, 8, 8)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(None, 8, 8, 2)"), std::string::npos) << msg;
}

TEST(ModelErrors, LabelsOutOfRange) {
  Model m = small_cnn(false);
  m.compile({.optimizer = optimizers::Adam(),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  auto [x, y] = synthetic(8, 2);
  y.data<int32_t>()[5] = 7;
  auto msg = error_of([&] { m.fit(x, y, {.verbose = 0}); });
  EXPECT_NE(msg.find("label 7 at index 5"), std::string::npos) << msg;
}

TEST(ModelErrors, LayerMisconfigurationNamesLayer) {
  using namespace layers;
  auto msg = error_of([] { Sequential({Input({28, 28}), Conv2D(8, 3, {.name = "block1_conv"})}); });
  EXPECT_NE(msg.find("block1_conv"), std::string::npos) << msg;
}

TEST(ModelErrors, NanLossStopsFitWithMessage) {
  Model m = small_cnn(false);
  // A learning rate this large makes the weights overflow within a few steps.
  m.compile({.optimizer = optimizers::SGD(1e30),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  auto [x, y] = synthetic(256, 2);
  auto hist = m.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0, .shuffle = false});
  EXPECT_TRUE(hist.stopped_on_nan);
  EXPECT_TRUE(hist.stop_reason.find("NaN") != std::string::npos ||
              hist.stop_reason.find("inf") != std::string::npos)
      << hist.stop_reason;
  EXPECT_NE(hist.stop_reason.find("epoch 1, step"), std::string::npos) << hist.stop_reason;
  EXPECT_EQ(hist.epoch.size(), 1u);
}

TEST(ModelErrors, FitBeforeCompile) {
  Model m = small_cnn(false);
  auto [x, y] = synthetic(8, 2);
  auto msg = error_of([&] { m.fit(x, y); });
  EXPECT_NE(msg.find("compile()"), std::string::npos) << msg;
}
