// fit / evaluate / predict on a Dataset: same weights as the array path, steps_per_epoch over
// a repeated dataset, partial last batch, input wait reported.
#include <gtest/gtest.h>

#include "lockstep/data/dataset.h"
#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

Model mlp(uint64_t seed) {
  set_random_seed(seed);
  reset_layer_names();
  Model m =
      Sequential({layers::Input({6}), layers::Dense(8, {.activation = "relu"}), layers::Dense(3)});
  m.compile({.optimizer = optimizers::Adam(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

std::pair<Tensor, Tensor> make_data(int64_t n) {
  Tensor x = Tensor::empty(Shape{n, 6});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  Philox rng(3);
  for (int64_t i = 0; i < n; ++i) {
    int c = int(rng.next_u32() % 3);
    y.data<int32_t>()[i] = c;
    for (int j = 0; j < 6; ++j)
      x.data<float>()[i * 6 + j] = (j / 2 == c ? 1.f : 0.f) + 0.2f * rng.uniform();
  }
  return {x, y};
}

void expect_same_weights(const Model& a, const Model& b, float tol) {
  auto wa = a.get_weights(), wb = b.get_weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    auto va = wa[i].to_vector(), vb = wb[i].to_vector();
    for (size_t k = 0; k < va.size(); ++k)
      ASSERT_NEAR(va[k], vb[k], tol) << "weight " << i << " [" << k << "]";
  }
}

}  // namespace

TEST(FitDataset, SameWeightsAsArraysWithoutShuffle) {
  auto [x, y] = make_data(100);  // 100 = 6 batches of 16 + 4: exercises the partial batch
  Model a = mlp(7), b = mlp(7);
  auto ha = a.fit(x, y, {.batch_size = 16, .epochs = 3, .verbose = 0, .shuffle = false});
  auto ds = data::Dataset::from_tensor_slices(std::vector<data::Component>{x, y}).batch(16);
  auto hb = b.fit(ds, {.epochs = 3, .verbose = 0});
  expect_same_weights(a, b, 0.f);  // same batches, same programs: bitwise
  EXPECT_EQ(ha.history["loss"], hb.history["loss"]);
  EXPECT_EQ(b.programs_compiled(), 2);  // batch 16 and the partial batch of 4, cached
  // Input wait is measured and reported.
  ASSERT_EQ(hb.history["input_wait_seconds"].size(), 3u);
  EXPECT_GT(hb.input_wait_seconds, 0.0);
  EXPECT_GT(hb.input_wait_fraction, 0.0);
  EXPECT_LT(hb.input_wait_fraction, 1.0);
}

TEST(FitDataset, StepsPerEpochOverRepeatedDataset) {
  auto [x, y] = make_data(64);
  Model m = mlp(1);
  int batches = 0;
  auto cb = callbacks::LambdaCallback({}, [&](int, const Logs&) { ++batches; });
  auto ds =
      data::Dataset::from_tensor_slices(std::vector<data::Component>{x, y}).repeat().batch(16);
  auto h = m.fit(ds, {.epochs = 3, .verbose = 0, .callbacks = {cb}, .steps_per_epoch = 5});
  EXPECT_EQ(batches, 15);
  EXPECT_EQ(h.epoch.size(), 3u);
  EXPECT_FLOAT_EQ(m.compile_config().optimizer->iterations()->value.item(), 15.f);
}

TEST(FitDataset, ValidationDatasetAndEvaluatePredict) {
  auto [x, y] = make_data(80);
  Model m = mlp(2);
  auto ds = data::Dataset::from_tensor_slices(std::vector<data::Component>{x, y}).batch(20);
  auto h = m.fit(ds, {.epochs = 2, .verbose = 0, .validation_data = ds});
  ASSERT_EQ(h.history["val_loss"].size(), 2u);
  Logs e1 = m.evaluate(ds, {.verbose = 0});
  Logs e2 = m.evaluate(x, y, {.batch_size = 20, .verbose = 0});
  EXPECT_NEAR(e1["loss"], e2["loss"], 1e-6);
  EXPECT_NEAR(h.history["val_loss"][1], e2["loss"], 1e-6);
  Tensor p1 = m.predict(data::Dataset::from_tensor_slices(x).batch(30));
  Tensor p2 = m.predict(x, 30);
  EXPECT_EQ(p1.to_vector(), p2.to_vector());
}

TEST(FitDataset, BadElementsNameTheProblem) {
  auto [x, y] = make_data(8);
  Model m = mlp(2);
  auto only_x = data::Dataset::from_tensor_slices(x).batch(4);
  try {
    m.fit(only_x, {.verbose = 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("{x, y}"), std::string::npos) << e.what();
  }
}
