// steps_per_execution on xla as one stablehlo.while (LoweringOptions::loop, lower_graph.h): the
// module holds the step once whatever N is, and N steps in one call give the losses and weights of
// N calls of one step (the Adam CNN step, whose update needs the step counter t as an input of
// every step).
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaLoop, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA (no pjrt_c_api.h)"; }
#else
#include <cmath>

#include "backends/xla/lower_graph.h"
#include "backends/xla/xla_program.h"
#include "backends/xla_test_util.h"
#include "backends/xla_train_graphs.h"

using namespace lockstep;
using namespace lockstep::xla_test;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

// Compile time flat in N, as the module's size: the step's ops appear once for N = 1 and for
// N = 32; what grows with N is one reshape per step's input and one slice and reshape per
// step's output (the stacking and unstacking around the loop).
TEST(XlaLoop, TheModuleHoldsOneStepWhateverTheStepsPerExecution) {
  Step s = build_step(Model::cnn, Optimizer::adam);
  const std::string one = xla::lower_graph(s.g, s.feeds, {s.loss}).mlir;
  const std::string many =
      xla::lower_graph(s.g, s.feeds, {s.loss}, {.steps = 32, .loop = true}).mlir;
  EXPECT_EQ(count(one, "stablehlo.while"), 0u);
  EXPECT_EQ(count(many, "\"stablehlo.while\""), 1u) << many;
  for (const char* op : {"stablehlo.convolution", "stablehlo.dot_general", "stablehlo.exponential"})
    EXPECT_EQ(count(many, op), count(one, op)) << op;
  const size_t per_step = 2 * (s.feeds.size() + 1);  // (reshape per input, slice+reshape out)
  EXPECT_LE(count(many, "\n"), count(one, "\n") + 32 * per_step + 60);
}

// 3 calls of a 4-step loop against 12 calls of one step: every step's loss, then the weights
// and Adam's slots, within 1e-5.
TEST(XlaLoop, FourStepsInOneCallMatchOneStepAtATime) {
  auto client = xla_test::shared_client().client;
  if (!client) GTEST_SKIP() << "no PJRT CPU plugin: " << xla_test::shared_client().why_not;
  Step a = build_step(Model::cnn, Optimizer::adam), b = build_step(Model::cnn, Optimizer::adam);
  xla::XlaProgram single(client, a.g, a.feeds, {a.loss});
  xla::XlaProgram loop(client, b.g, b.feeds, {b.loss}, {.steps = 4, .loop = true});
  for (int call = 0; call < 3; ++call) {
    std::vector<Tensor> feeds;
    std::vector<float> want;
    for (int k = 0; k < 4; ++k) {
      const std::vector<Tensor> in = batch(Model::cnn, call * 4 + k + 1);
      want.push_back(single.run(in)[0].item());
      feeds.insert(feeds.end(), in.begin(), in.end());
    }
    const std::vector<Tensor> got = loop.run(feeds);
    ASSERT_EQ(got.size(), 4u);
    for (int k = 0; k < 4; ++k)
      EXPECT_NEAR(got[size_t(k)].item(), want[size_t(k)], 1e-5f * (1 + std::fabs(want[size_t(k)])))
          << "call " << call << " step " << k;
  }
  single.sync_variables_to_host();
  loop.sync_variables_to_host();
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const auto got = b.weights[i]->value.to_vector(), want = a.weights[i]->value.to_vector();
    for (size_t j = 0; j < want.size(); ++j)
      ASSERT_NEAR(got[j], want[j], 1e-5f * (1 + std::fabs(want[j]))) << a.weights[i]->name;
  }
  for (size_t i = 0; i < a.slots.size(); ++i) {
    const auto got = b.slots[i]->value.to_vector(), want = a.slots[i]->value.to_vector();
    for (size_t j = 0; j < want.size(); ++j)
      ASSERT_NEAR(got[j], want[j], 1e-5f * (1 + std::fabs(want[j]))) << a.slots[i]->name;
  }
}

#endif
