// A Model trained on backend "xla" keeps its weights and optimizer slots in device buffers
// between steps (lockstep/graph/device_residence.h): a step moves none of them (counted by
// XlaProgram::transfers()), yet every host read sees the trained values (get_weights after fit
// equals the cpu backend's, a save in a batch callback in the middle of fit loads back as the
// cpu twin's) and every host write reaches the next step (set_weights after a fit). fit's
// default progress output reports the compile of the train step. Tolerance: 1e-4 relative +
// absolute (float32, XLA's and oneDNN's summation orders over 12 Adam steps).
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaResidence, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <cmath>
#include <filesystem>

#include "backends/xla/xla_program.h"
#include "backends/xla_dense_model.h"
#include "backends/xla_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;

namespace {

constexpr double kTol = 1e-4;

using xla_test::dense_model;
std::pair<Tensor, Tensor> dense_data() { return xla_test::dense_data(5); }
CompileConfig train_config(const std::string& backend) { return xla_test::adam_config(backend); }

// An xla model and a cpu twin with the same initial weights, compiled.
std::pair<Model, Model> twins() {
  Model cpu = dense_model(), xla = dense_model();
  xla.set_weights(cpu.get_weights());
  cpu.compile(train_config("cpu"));
  xla.compile(train_config("xla"));
  return {std::move(cpu), std::move(xla)};
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

struct Counts {
  int64_t held_up, held_down, other_up, other_down;
};
Counts counts() {
  auto& t = xla::XlaProgram::transfers();
  return {t.held_uploads.load(), t.held_downloads.load(), t.other_uploads.load(),
          t.other_downloads.load()};
}
Counts operator-(Counts a, Counts b) {
  return {a.held_up - b.held_up, a.held_down - b.held_down, a.other_up - b.other_up,
          a.other_down - b.other_down};
}

// The weights and Adam slots moved by one fit of `epochs` epochs of 6 steps (fresh model).
Counts fit_transfers(int epochs) {
  auto [x, y] = dense_data();
  Model m = dense_model();
  m.compile(train_config("xla"));
  const Counts before = counts();
  m.fit(x, y, {.batch_size = 16, .epochs = epochs, .verbose = 0, .shuffle = false});
  return counts() - before;
}

class XlaResidence : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!xla_test::shared_client().client)
      GTEST_SKIP() << "no PJRT CPU plugin: " << xla_test::shared_client().why_not;
  }
};

}  // namespace

// 4 weights and their 8 Adam slots go up once and come back once per fit, however many steps
// it runs; the metric accumulators and the iteration count (host-read each step) move each step.
TEST_F(XlaResidence, AStepMovesNoWeights) {
  const Counts six = fit_transfers(1), twenty_four = fit_transfers(4);
  EXPECT_EQ(six.held_up, 12);
  EXPECT_EQ(six.held_down, 12);
  EXPECT_EQ(twenty_four.held_up, six.held_up);
  EXPECT_EQ(twenty_four.held_down, six.held_down);
  EXPECT_GT(twenty_four.other_up, six.other_up);  // the per-step ones are counted too
  EXPECT_GE(six.other_down, 6);
}

TEST_F(XlaResidence, GetWeightsAfterFitEqualsTheCpuBackend) {
  auto [x, y] = dense_data();
  auto [cpu, xla] = twins();
  for (Model* m : {&cpu, &xla})
    m->fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});
  expect_close(xla.get_weights(), cpu.get_weights());
  // Through the variables too (weights() brings the device values to the host first).
  const std::vector<VariablePtr> vars = xla.weights();
  for (size_t i = 0; i < vars.size(); ++i) expect_close({vars[i]->value}, {cpu.get_weights()[i]});
}

// A host write after a fit (set_weights: all zero) is what the next step runs on: zero logits,
// the loss of 3 classes is log(3); and the step after it trains from there as on cpu.
TEST_F(XlaResidence, SetWeightsAfterFitIsSeenByTheNextStep) {
  auto [x, y] = dense_data();
  auto [cpu, xla] = twins();
  for (Model* m : {&cpu, &xla})
    m->fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
  std::vector<Tensor> zeros;
  for (const Tensor& w : xla.get_weights()) zeros.push_back(Tensor::zeros(w.shape()));
  xla.set_weights(zeros), cpu.set_weights(zeros);
  const Tensor xb = x.slice(0, 16).contiguous(), yb = y.slice(0, 16).contiguous();
  const Logs got = xla.train_on_batch(xb, yb), want = cpu.train_on_batch(xb, yb);
  EXPECT_NEAR(got.at("loss"), std::log(3.0), 1e-5);
  EXPECT_NEAR(got.at("loss"), want.at("loss"), 1e-5);
  expect_close(xla.get_weights(), cpu.get_weights());
}

// model->save() in a batch callback in the middle of fit writes the weights of that step (the
// device's), as the cpu twin's save at the same step.
TEST_F(XlaResidence, SaveInTheMiddleOfFitRoundTrips) {
  auto [x, y] = dense_data();
  auto [cpu, xla] = twins();
  const auto dir = test_util::temp_dir("xla_residence", true);
  std::vector<Tensor> at_step_3;
  for (Model* m : {&cpu, &xla}) {
    const std::string path = (dir / (m == &cpu ? "cpu.keras" : "xla.keras")).string();
    LambdaHooks hooks;
    hooks.on_train_batch_end = [&, m, path](int batch, const Logs&) {
      if (batch != 2) return;
      m->save(path);
      if (m != &cpu) at_step_3 = m->get_weights();
    };
    m->fit(x, y,
           {.batch_size = 16,
            .epochs = 1,
            .verbose = 0,
            .callbacks = {callbacks::LambdaCallback(hooks)},
            .shuffle = false});
  }
  Model from_xla = load_model((dir / "xla.keras").string());
  Model from_cpu = load_model((dir / "cpu.keras").string());
  expect_close(from_xla.get_weights(), at_step_3);
  expect_close(from_xla.get_weights(), from_cpu.get_weights());
  // ... and the fit went on from the device weights to the end: as the cpu twin.
  expect_close(xla.get_weights(), cpu.get_weights());
}

// The article's slow first epoch: fit's progress output says what compiling the step cost.
TEST_F(XlaResidence, FitReportsTheCompileOfTheTrainStep) {
  auto [x, y] = dense_data();
  auto [cpu, xla] = twins();
  testing::internal::CaptureStdout();
  xla.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 1, .shuffle = false});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("compiled the train step (batch 16) for xla:cpu in "), std::string::npos)
      << out;
  testing::internal::CaptureStdout();
  cpu.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 1, .shuffle = false});
  const std::string cpu_out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(cpu_out.find("compiled the train step"), std::string::npos) << cpu_out;
}

// steps_per_execution = 4 on xla: 8 steps as 2 calls of the step unrolled 4 times (the weights
// stay on the device in between), the same weights and loss as 8 calls of one step.
TEST_F(XlaResidence, FourStepsPerExecutionMatchOneStepAtATime) {
  auto [x, y] = dense_data();  // 96 rows: 8 batches of 12
  Model one = dense_model(), four = dense_model();
  four.set_weights(one.get_weights());
  one.compile(train_config("xla"));
  CompileConfig unrolled = train_config("xla");
  unrolled.steps_per_execution = 4;
  four.compile(unrolled);
  auto& runs = xla::XlaProgram::transfers().runs;
  int64_t before = runs.load();
  const History h1 = one.fit(x, y, {.batch_size = 12, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_EQ(runs.load() - before, 8);
  before = runs.load();
  const History h4 =
      four.fit(x, y, {.batch_size = 12, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_EQ(runs.load() - before, 2);
  expect_close(four.get_weights(), one.get_weights());
  EXPECT_NEAR(h4.history.at("loss")[0], h1.history.at("loss")[0],
              kTol * (1 + std::fabs(h1.history.at("loss")[0])));
  EXPECT_NEAR(h4.history.at("accuracy")[0], h1.history.at("accuracy")[0], 1e-6);
}

#endif
