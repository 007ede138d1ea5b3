// fit and predict on edge-case data: fit on 0 samples is an error naming x (it returned loss 0
// and accuracy 0), predict on 0 rows returns an empty (0, ...) result per output (it returned
// shape ()), and a NaN in the input makes fit's NaN stop fire (relu turned the NaN into 0, so
// the loss stayed finite for 3 epochs while the weights became NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;

namespace {

Model dense_model(const std::string& activation) {
  KTensor in = Input({4}, "x");
  KTensor h = Dense(8, {.activation = activation, .name = "hidden"})(in);
  Model m(in, Dense(3, {.name = "logits"})(h), "edge");
  m.compile({.optimizer = optimizers::SGD(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

// n samples of 4 features, labels 0..2; sample `nan_at` (if >= 0) holds a NaN.
std::pair<Tensor, Tensor> samples(int64_t n, int64_t nan_at = -1) {
  Tensor x = Tensor::empty(Shape{n, 4}, DType::f32), y = Tensor::empty(Shape{n}, DType::i32);
  for (int64_t i = 0; i < n * 4; ++i) x.data<float>()[i] = float((i * 7) % 11) / 11.f - 0.5f;
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = int32_t(i % 3);
  if (nan_at >= 0) x.data<float>()[nan_at * 4 + 1] = std::numeric_limits<float>::quiet_NaN();
  return {x, y};
}

}  // namespace

TEST(FitEdgeData, FitOnZeroSamplesIsAnErrorNamingX) {
  Model m = dense_model("relu");
  auto [x, y] = samples(0);
  const std::string msg = test_util::error_of([&] { m.fit(x, y, {.epochs = 2, .verbose = 0}); });
  EXPECT_NE(msg.find("x has 0 samples"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at least one sample"), std::string::npos) << msg;
}

TEST(FitEdgeData, PredictOnZeroRowsReturnsAnEmptyResult) {
  Model m = dense_model("relu");
  const Tensor y = m.predict(Tensor::empty(Shape{0, 4}, DType::f32));
  ASSERT_TRUE(y.defined());
  EXPECT_EQ(y.shape().str(), Shape({0, 3}).str());
  EXPECT_EQ(y.numel(), 0);
  // A batch of rows still works afterwards.
  EXPECT_EQ(m.predict(samples(5).first).shape().str(), Shape({5, 3}).str());
}

TEST(FitEdgeData, ANaNInTheInputStopsFitThroughRelu) {
  for (const std::string activation : {"relu", "relu6"}) {
    Model m = dense_model(activation);
    auto [x, y] = samples(64, 10);
    History h = m.fit(x, y, {.batch_size = 16, .epochs = 3, .verbose = 0, .shuffle = false});
    EXPECT_TRUE(h.stopped_on_nan) << activation << ": fit went on with a NaN input";
    EXPECT_NE(h.stop_reason.find("epoch 1, step 1"), std::string::npos) << h.stop_reason;
  }
}

TEST(FitEdgeData, ANaNInTheInputStopsFitThroughAConvWithAFusedRelu) {
  KTensor in = Input({6, 6, 1}, "image");
  KTensor h = Conv2D(8, 3, {.activation = "relu", .name = "conv"})(in);
  h = Flatten()(h);
  Model m(in, Dense(3, {.name = "logits"})(h), "conv_edge");
  m.compile({.optimizer = optimizers::SGD(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  Tensor x = Tensor::empty(Shape{32, 6, 6, 1}, DType::f32),
         y = Tensor::zeros(Shape{32}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 13) / 13.f;
  x.data<float>()[3 * 36 + 14] = std::numeric_limits<float>::quiet_NaN();  // sample 3
  History hist = m.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0, .shuffle = false});
  EXPECT_TRUE(hist.stopped_on_nan) << "fit went on with a NaN input";
}

// Sparse labels of a sequence output (N, T, C): one per step, (N, T), as a language model's
// next-token targets; fit and evaluate take them, float labels are converted, and one label per
// sample is refused naming the shape it needs.
TEST(FitEdgeData, SequenceOutputsTakeOneSparseLabelPerStep) {
  KTensor ids = Input({5}, "ids", DType::i32);
  Model m(ids, Dense(3)(Embedding(7, 4)(ids)), "tagger");
  m.compile({.optimizer = optimizers::Adam(0.05),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  const int64_t n = 16;
  Tensor x = Tensor::empty(Shape{n, 5}, DType::i32), y = Tensor::empty(Shape{n, 5}, DType::i32);
  for (int64_t i = 0; i < n * 5; ++i) {
    x.data<int32_t>()[i] = int32_t((i * 3) % 7);
    y.data<int32_t>()[i] = x.data<int32_t>()[i] % 3;  // each step's label follows its id
  }
  const double before = m.evaluate(x, y, {.verbose = 0})["loss"];
  m.fit(x, y, {.batch_size = 8, .epochs = 20, .verbose = 0});
  const double after = m.evaluate(x, y, {.verbose = 0})["loss"];
  EXPECT_LT(after, 0.5 * before);
  Tensor yf = Tensor::empty(Shape{n, 5}, DType::f32);
  for (int64_t i = 0; i < n * 5; ++i) yf.data<float>()[i] = float(y.data<int32_t>()[i]);
  EXPECT_NEAR(m.evaluate(x, yf, {.verbose = 0})["loss"], after, 1e-6);
  test_util::expect_has(
      test_util::error_of([&] { m.fit(x, Tensor::zeros(Shape{n}, DType::i32), {.verbose = 0}); }),
      {"SparseCategoricalCrossentropy", "(None, 5, 3)", "(None, 5)", "one per step", "got (16"});
}

// Max pooling kept the other values' maximum of a window holding a NaN, on cpu in every layout
// (NHWC, and nChw16c after a conv the layout pass keeps blocked), so the NaN never reached the
// loss and fit went on.
TEST(FitEdgeData, ANaNInTheInputStopsFitThroughMaxPooling) {
  KTensor in = Input({8, 8, 1}, "image");
  // A 1x1 conv: the NaN stays one pixel of a window whose other three are finite.
  KTensor h = Conv2D(16, 1, {.activation = "relu", .name = "conv"})(in);
  h = MaxPooling2D({2, 2})(h);
  h = Flatten()(h);
  Model m(in, Dense(3, {.name = "logits"})(h), "pool_edge");
  m.compile({.optimizer = optimizers::SGD(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  Tensor x = Tensor::empty(Shape{32, 8, 8, 1}, DType::f32),
         y = Tensor::zeros(Shape{32}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 13) / 13.f;
  x.data<float>()[3 * 64 + 27] = std::numeric_limits<float>::quiet_NaN();  // sample 3
  History hist = m.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0, .shuffle = false});
  EXPECT_TRUE(hist.stopped_on_nan) << "fit went on with a NaN input";
  // On the step that read the NaN: before, its loss was finite, and only the conv's kernel,
  // updated from the NaN pixel, made the next step's NaN.
  EXPECT_NE(hist.stop_reason.find("epoch 1, step 1"), std::string::npos) << hist.stop_reason;
}
