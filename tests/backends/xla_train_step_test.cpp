// Whole train steps built with the graph and autodiff API (forward, gradients(), one update op
// per variable) run as one PJRT executable (XlaProgram: variables resident on the device,
// donated and updated in place) against the reference Executable of the same graph, step by
// step: the losses of every step and the weights after the last one agree within 1e-4
// (relative + absolute; float32 with another summation order, compounded over the steps).
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaTrainStep, NeedsTheXlaBuild) {
  GTEST_SKIP() << "built without LOCKSTEP_XLA (no pjrt_c_api.h)";
}
#else
#include <cmath>

#include "backends/xla/xla_program.h"
#include "backends/xla_test_util.h"
#include "backends/xla_train_graphs.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

using namespace lockstep;
using namespace lockstep::xla_test;

namespace {

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  auto g = got.to_vector(), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], 1e-4f * (1.f + std::fabs(w[i]))) << what << " element " << i;
}

void check_steps(Model model, Optimizer opt, int steps) {
  auto client = xla_test::shared_client().client;
  Step ref = build_step(model, opt), xla = build_step(model, opt);
  Executable exe(ref.g, ref.feeds, {ref.loss}, CompileOptions{.backend = "reference"});
  xla::XlaProgram program(client, xla.g, xla.feeds, {xla.loss});
  // Only the variables the step updates are donated; the inputs are not.
  int donated = 0;
  for (bool d : program.lowered().donate()) donated += d;
  EXPECT_EQ(donated, int(xla.weights.size() + xla.slots.size()));
  for (int step = 1; step <= steps; ++step) {
    std::vector<Tensor> in = batch(model, step);
    for (size_t i = 0; i < in.size(); ++i) exe.input(int(i)).copy_from(in[i]);
    exe.run();
    Tensor loss = program.run(in)[0];
    ASSERT_NEAR(loss.item(), exe.output(0).item(), 1e-4f * (1 + std::fabs(exe.output(0).item())))
        << "loss of step " << step;
  }
  program.sync_variables_to_host();
  for (size_t i = 0; i < ref.weights.size(); ++i)
    expect_close(xla.weights[i]->value, ref.weights[i]->value, ref.weights[i]->name);
  for (size_t i = 0; i < ref.slots.size(); ++i)
    expect_close(xla.slots[i]->value, ref.slots[i]->value, ref.slots[i]->name);
}

class XlaTrainStep : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!xla_test::shared_client().client)
      GTEST_SKIP() << "no PJRT CPU plugin: " << xla_test::shared_client().why_not;
  }
};

}  // namespace

TEST_F(XlaTrainStep, MlpSgdMatchesTheReferenceStepByStep) {
  check_steps(Model::mlp, Optimizer::sgd, 5);
}
TEST_F(XlaTrainStep, MlpSgdMomentumWeightDecay) {
  check_steps(Model::mlp, Optimizer::sgd_momentum, 5);
}
TEST_F(XlaTrainStep, MlpAdam) { check_steps(Model::mlp, Optimizer::adam, 5); }
TEST_F(XlaTrainStep, MlpRmspropMomentum) { check_steps(Model::mlp, Optimizer::rmsprop, 5); }
TEST_F(XlaTrainStep, ConvNetSgd) { check_steps(Model::cnn, Optimizer::sgd_momentum, 4); }
TEST_F(XlaTrainStep, ConvNetWithBatchNorm) {
  check_steps(Model::cnn_batch_norm, Optimizer::adam, 4);
}

// Replicas the TPUStrategy way: 2 CPU-plugin devices, each on half of the batch of 6, the
// gradients averaged by an all_reduce inside the program, match the reference step on the
// whole batch (the mean of the replicas' losses is the batch loss).
TEST_F(XlaTrainStep, TwoReplicasMatchOneStepOnTheWholeBatch) {
  for (Optimizer opt : {Optimizer::sgd_momentum, Optimizer::adam}) {
    Step ref = build_step(Model::mlp, opt), xla = build_step(Model::mlp, opt, 3);
    Executable exe(ref.g, ref.feeds, {ref.loss}, CompileOptions{.backend = "reference"});
    xla::XlaProgram program(xla_test::shared_client().client, xla.g, xla.feeds, {xla.loss},
                            {.num_replicas = 2});
    ASSERT_EQ(program.num_replicas(), 2);
    EXPECT_NE(program.lowered().mlir.find("stablehlo.all_reduce"), std::string::npos);
    for (int step = 1; step <= 4; ++step) {
      std::vector<Tensor> in = batch(Model::mlp, step);
      for (size_t i = 0; i < in.size(); ++i) exe.input(int(i)).copy_from(in[i]);
      exe.run();
      std::vector<std::vector<Tensor> > halves(2, in);
      for (int r = 0; r < 2; ++r) {
        halves[size_t(r)][0] = in[0].slice(3 * r, 3 * r + 3).contiguous();
        halves[size_t(r)][1] = in[1].slice(3 * r, 3 * r + 3).contiguous();
      }
      auto out = program.run_replicas(halves);
      const float mean = 0.5f * (out[0][0].item() + out[1][0].item());
      ASSERT_NEAR(mean, exe.output(0).item(), 1e-4f) << "loss of step " << step;
    }
    program.sync_variables_to_host();
    for (size_t i = 0; i < ref.weights.size(); ++i)
      expect_close(xla.weights[i]->value, ref.weights[i]->value, ref.weights[i]->name);
  }
}

// An optimizer's updates fused into one node (count = 2, as the cpu fusion pass makes them):
// inputs grouped per kind (var_1, var_2, grad_1, grad_2, lr, m_1, m_2), each variable and slot
// updated as the reference kernel does.
TEST_F(XlaTrainStep, FusedUpdateOfTwoVariables) {
  auto make = [](std::vector<VariablePtr>& vars) {
    Philox rng(3);
    const Shape shapes[] = {{3, 4}, {4}, {3, 4}, {4}};
    const char* names[] = {"w", "b", "momentum_w", "momentum_b"};
    for (int k = 0; k < 4; ++k) vars.push_back(variable(names[k], shapes[k], rng, 0.5f));
    Graph g;
    Value gw = g.input({DType::f32, Shape{3, 4}}, "gw"), gb = g.input({DType::f32, Shape{4}}, "gb");
    Value lr = g.input({DType::f32, Shape{}}, "lr");
    std::vector<Value> v;
    for (auto& var : vars) v.push_back(g.variable(var));
    g.add_multi(op::sgd_update, {v[0], v[1], gw, gb, lr, v[2], v[3]},
                Attrs{{"count", 2}, {"momentum", 0.9}, {"nesterov", true}});
    return std::make_pair(g, std::vector<Value>{gw, gb, lr});
  };
  std::vector<VariablePtr> ref_vars, xla_vars;
  auto [rg, rfeeds] = make(ref_vars);
  auto [xg, xfeeds] = make(xla_vars);
  Executable exe(rg, rfeeds, {}, CompileOptions{.backend = "reference", .fuse = false});
  xla::XlaProgram program(xla_test::shared_client().client, xg, xfeeds, {});
  EXPECT_EQ(program.lowered().results.size(), 4u);  // w, b and both momenta, updated in place
  Philox rng(8);
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> in = {Tensor::zeros(Shape{3, 4}), Tensor::zeros(Shape{4}),
                              Tensor::full(Shape{}, 0.1f)};
    for (int k = 0; k < 2; ++k)
      for (int64_t i = 0; i < in[size_t(k)].numel(); ++i)
        in[size_t(k)].data<float>()[i] = rng.uniform(-1.f, 1.f);
    for (size_t i = 0; i < in.size(); ++i) exe.input(int(i)).copy_from(in[i]);
    exe.run();
    program.run(in);
  }
  program.sync_variables_to_host();
  for (size_t i = 0; i < ref_vars.size(); ++i)
    expect_close(xla_vars[i]->value, ref_vars[i]->value, ref_vars[i]->name);
}

// The weights stay on the device between runs: after reload_variables() the program takes the
// host values again (a restored checkpoint), so a run repeats exactly.
TEST_F(XlaTrainStep, ReloadedWeightsRepeatAStep) {
  Step s = build_step(Model::mlp, Optimizer::sgd);
  std::vector<Tensor> saved;
  for (auto& w : s.weights) saved.push_back(w->value.clone());
  xla::XlaProgram program(xla_test::shared_client().client, s.g, s.feeds, {s.loss});
  const float first = program.run(batch(Model::mlp, 1))[0].item();
  const float second = program.run(batch(Model::mlp, 1))[0].item();
  EXPECT_LT(second, first);  // one sgd step on the same batch lowers its loss
  for (size_t i = 0; i < saved.size(); ++i) s.weights[i]->value.copy_from(saved[i]);
  program.reload_variables();
  EXPECT_EQ(program.run(batch(Model::mlp, 1))[0].item(), first);
}

#endif  // LOCKSTEP_XLA
