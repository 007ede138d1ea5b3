// The xla backend through the Executable (CompileOptions{.backend = "xla"}): the train steps of
// xla_train_graphs.h run 20 steps and match the cpu backend's Executable of the same graph,
// loss by loss and weight by weight, within 1e-4 relative + 1e-4 absolute (float32, XLA's and
// oneDNN's summation orders, compounded over 20 steps); the errors for an op without a
// lowering and for a plugin that cannot be loaded name what is wrong.
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaBackend, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <cmath>
#include <cstdlib>

#include "backends/xla_test_util.h"
#include "backends/xla_train_graphs.h"
#include "lockstep/graph/executable.h"

using namespace lockstep;
using namespace lockstep::xla_test;

namespace {

void expect_close(const Tensor& got, const Tensor& want, float tol, const std::string& what) {
  auto g = got.to_vector(), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], tol * (1.f + std::fabs(w[i]))) << what << " element " << i;
}

// `steps` steps of the same train step on the cpu and the xla backend, fed the same batches.
void check_against_cpu(Model model, Optimizer opt, int steps, float tol) {
  Step cpu = build_step(model, opt), xla = build_step(model, opt);
  Executable want(cpu.g, cpu.feeds, {cpu.loss}, CompileOptions{.backend = "cpu"});
  Executable got(xla.g, xla.feeds, {xla.loss}, CompileOptions{.backend = "xla"});
  ASSERT_EQ(got.num_inputs(), 4);
  ASSERT_FALSE(got.report().empty());
  EXPECT_NE(got.report().back().find("xla: whole graph"), std::string::npos);
  for (int step = 1; step <= steps; ++step) {
    std::vector<Tensor> in = batch(model, step);
    for (size_t i = 0; i < in.size(); ++i) {
      want.copy_input_from_host(int(i), in[i]);
      got.copy_input_from_host(int(i), in[i]);
    }
    want.run();
    got.run();
    Tensor loss;
    got.copy_output_to_host(0, loss);
    const float w = want.output(0).item();
    ASSERT_NEAR(loss.item(), w, tol * (1 + std::fabs(w))) << "loss of step " << step;
  }
  EXPECT_EQ(got.step(), uint64_t(steps));
  // The weights are written back to the host variables after every step.
  for (size_t i = 0; i < cpu.weights.size(); ++i)
    expect_close(xla.weights[i]->value, cpu.weights[i]->value, tol, cpu.weights[i]->name);
  for (size_t i = 0; i < cpu.slots.size(); ++i)
    expect_close(xla.slots[i]->value, cpu.slots[i]->value, tol, cpu.slots[i]->name);
}

class XlaBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!shared_client().client) GTEST_SKIP() << "no PJRT CPU plugin: " << shared_client().why_not;
  }
};

}  // namespace

TEST_F(XlaBackend, MlpTrainStepMatchesTheCpuBackendFor20Steps) {
  check_against_cpu(Model::mlp, Optimizer::sgd_momentum, 20, 1e-4f);
}

TEST_F(XlaBackend, ConvNetWithBatchNormMatchesTheCpuBackendFor20Steps) {
  check_against_cpu(Model::cnn_batch_norm, Optimizer::adam, 20, 1e-4f);
}

TEST_F(XlaBackend, HostWritesToAVariableAreSeenByTheNextStep) {
  Step s = build_step(Model::mlp, Optimizer::sgd);
  Executable exe(s.g, s.feeds, {s.loss}, CompileOptions{.backend = "xla"});
  std::vector<Tensor> in = batch(Model::mlp, 1);
  for (size_t i = 0; i < in.size(); ++i) exe.copy_input_from_host(int(i), in[i]);
  exe.run();
  const float first = exe.output(0).item();
  for (auto& w : s.weights) w->value.fill(0.f);  // set_weights between steps
  exe.run();
  // All-zero weights: logits 0, the loss of 4 classes is log(4).
  EXPECT_NEAR(exe.output(0).item(), std::log(4.f), 1e-5f);
  EXPECT_NE(first, exe.output(0).item());
}

TEST_F(XlaBackend, AnOpWithoutALoweringIsNamedWithItsNode) {
  Graph g;
  Value x = g.input({DType::f32, Shape{2, 4, 4, 3}}, "x");
  Value flags = g.input({DType::f32, Shape{2, 2}}, "offsets");
  Value y = g.add(op::image_crop, {x, flags}, Attrs{{"height", 2}, {"width", 2}}, "augment_crop");
  std::string why;
  EXPECT_FALSE(find_backend("xla").can_run(g.node(y.node), {g.type(x), g.type(flags)}, &why));
  EXPECT_NE(why.find("image_crop"), std::string::npos) << why;
  try {
    Executable exe(g, {x, flags}, {y}, CompileOptions{.backend = "xla"});
    FAIL() << "compiled an op without a lowering";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("image_crop"), std::string::npos) << msg;
    EXPECT_NE(msg.find("augment_crop"), std::string::npos) << msg;
    EXPECT_NE(msg.find("a gather"), std::string::npos) << msg;  // the OpDef's reason
  }
}

TEST_F(XlaBackend, ABadPluginPathIsAClearError) {
  Step s = build_step(Model::mlp, Optimizer::sgd);
  ::setenv("LOCKSTEP_XLA_PLUGIN", "/nonexistent/libno_such_pjrt_plugin.so", 1);
  try {
    Executable exe(s.g, s.feeds, {s.loss}, CompileOptions{.backend = "xla"});
    ::unsetenv("LOCKSTEP_XLA_PLUGIN");
    FAIL() << "compiled with a plugin that does not exist";
  } catch (const Error& e) {
    ::unsetenv("LOCKSTEP_XLA_PLUGIN");
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/nonexistent/libno_such_pjrt_plugin.so"), std::string::npos) << msg;
    EXPECT_NE(msg.find("LOCKSTEP_XLA_PLUGIN"), std::string::npos) << msg;
  }
}

#endif
