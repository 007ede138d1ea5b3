// Model on the xla backend (compile({.backend = "xla"})): fit, evaluate and predict of a small
// Dense model on random data match the same model on the cpu backend (losses step by step and
// weights within 1e-4 relative + absolute), the loss falls, the weights fit leaves are what
// get_weights returns, and save() writes a file that loads back with them.
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaModel, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <cmath>
#include <filesystem>

#include "backends/xla_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;

namespace {

constexpr double kTol = 1e-4;

Model dense_model() {
  using namespace layers;
  return Sequential({Input({8}), Dense(16, {.activation = "relu"}), Dense(3)});
}

// 96 rows of 8 features; the label is the quadrant-like class of the first two features.
std::pair<Tensor, Tensor> dense_data() {
  Philox rng(11);
  Tensor x = Tensor::zeros(Shape{96, 8});
  Tensor y = Tensor::zeros(Shape{96}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(-1.f, 1.f);
  for (int64_t r = 0; r < 96; ++r) {
    const float* row = x.data<float>() + 8 * r;
    y.data<int32_t>()[r] = row[0] > 0 ? (row[1] > 0 ? 2 : 1) : 0;
  }
  return {x, y};
}

CompileConfig xla_config(const std::string& backend) {
  return {.optimizer = optimizers::Adam(1e-2),
          .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
          .metrics = {"accuracy"},
          .backend = backend};
}

std::vector<double> fit_losses(Model& m, const Tensor& x, const Tensor& y) {
  std::vector<double> losses;
  auto cb =
      callbacks::LambdaCallback({}, [&](int, const Logs& l) { losses.push_back(l.at("loss")); });
  m.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .callbacks = {cb}, .shuffle = false});
  return losses;
}

void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    auto g = got[k].to_vector(), w = want[k].to_vector();
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], w[i], kTol * (1 + std::fabs(w[i]))) << "tensor " << k << " element " << i;
  }
}

}  // namespace

TEST(XlaModel, FitEvaluatePredictMatchTheCpuBackend) {
  if (!xla_test::shared_client().client)
    GTEST_SKIP() << "no PJRT CPU plugin: " << xla_test::shared_client().why_not;
  auto [x, y] = dense_data();
  Model cpu = dense_model(), xla = dense_model();
  xla.set_weights(cpu.get_weights());
  cpu.compile(xla_config("cpu"));
  xla.compile(xla_config("xla"));
  const std::vector<double> want = fit_losses(cpu, x, y), got = fit_losses(xla, x, y);
  ASSERT_EQ(got.size(), 12u);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], kTol * (1 + std::fabs(want[i]))) << "step " << i;
  EXPECT_LT(got.back(), got.front());  // it learns
  // The weights fit left in the host variables are the ones get_weights returns.
  expect_close(xla.get_weights(), cpu.get_weights());

  Logs ev_cpu = cpu.evaluate(x, y, {.batch_size = 32, .verbose = 0});
  Logs ev_xla = xla.evaluate(x, y, {.batch_size = 32, .verbose = 0});
  EXPECT_NEAR(ev_xla.at("loss"), ev_cpu.at("loss"), kTol * (1 + std::fabs(ev_cpu.at("loss"))));
  EXPECT_NEAR(ev_xla.at("accuracy"), ev_cpu.at("accuracy"), 1e-6);
  const Tensor p_xla = xla.predict(x, 32)[0], p_cpu = cpu.predict(x, 32)[0];
  expect_close(std::vector<Tensor>{p_xla}, std::vector<Tensor>{p_cpu});

  const auto path = test_util::temp_dir("xla_model", true) / "dense.keras";
  xla.save(path.string());
  Model loaded = load_model(path.string());
  expect_close(loaded.get_weights(), xla.get_weights());
}

#endif
