// The small GPT's train step (examples/gpt_model.h, "tiny": 2 pre-norm TransformerDecoders of
// 32 with attention and residual dropout, T = 16, next-byte cross-entropy over [batch, T, 256])
// on xla:cpu against the cpu backend: 20 steps from the same weights, every step's loss and
// then every weight within 1e-4 relative + absolute.
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaGpt, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <cmath>

#include "../../examples/gpt_model.h"
#include "backends/xla_test_util.h"

using namespace lockstep;

namespace {

Model tiny_gpt() {
  GptConfig c = gpt_preset("tiny");
  c.dropout = 0.1;
  return gpt_model(c);
}

CompileConfig step_config(const std::string& backend) {
  return CompileConfig{.optimizer = optimizers::SGD(0.05, 0.9),
                       .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                       .backend = backend};
}

}  // namespace

TEST(XlaGpt, TrainStepMatchesTheCpuBackendFor20Steps) {
  if (!xla_test::shared_client().client)
    GTEST_SKIP() << "no PJRT CPU plugin: " << xla_test::shared_client().why_not;
  // The same names and seed for both: the decoders key their dropout by their names.
  reset_layer_names();
  set_random_seed(21);
  Model cpu = tiny_gpt();
  reset_layer_names();
  set_random_seed(21);
  Model xla = tiny_gpt();
  const std::string text =
      "Whenever you find yourself on the side of the majority, it is time to pause and "
      "reflect. -- Mark Twain\n\nThe secret of getting ahead is getting started.\n";
  const auto [x, y] = byte_windows(text, 160, 16, true, 7);
  xla.set_weights(cpu.get_weights());
  cpu.compile(step_config("cpu"));
  xla.compile(step_config("xla"));
  std::vector<double> want, got;
  for (auto [m, losses] : {std::pair{&cpu, &want}, std::pair{&xla, &got}}) {
    auto cb = callbacks::LambdaCallback(LambdaHooks{
        .on_train_batch_end = [l = losses](int, const Logs& g) { l->push_back(g.at("loss")); }});
    m->fit(x, y,
           {.batch_size = 8, .epochs = 1, .verbose = 0, .callbacks = {cb}, .shuffle = false,
            .seed = 3});
  }
  ASSERT_EQ(got.size(), 20u);
  ASSERT_EQ(want.size(), 20u);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << "loss of step " << i + 1;
  EXPECT_LT(got.back(), got.front() - 0.5);  // it learns (from ln 256 = 5.5)
  const std::vector<Tensor> gw = xla.get_weights(), ww = cpu.get_weights();
  ASSERT_EQ(gw.size(), ww.size());
  double worst = 0;
  for (size_t k = 0; k < gw.size(); ++k) {
    auto g = gw[k].to_vector(), w = ww[k].to_vector();
    for (size_t i = 0; i < g.size(); ++i)
      worst = std::max(worst, std::fabs(double(g[i]) - w[i]) / (1 + std::fabs(double(w[i]))));
  }
  std::printf("gpt, 20 steps: losses %.4f -> %.4f, worst weight difference xla vs cpu %.3g\n",
              want.front(), want.back(), worst);
  EXPECT_LE(worst, 1e-4);
}
#endif
