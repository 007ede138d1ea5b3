// A transformer train step on xla:cpu against the cpu backend (issue 36): a small classifier
// (Embedding, causal MultiHeadAttention with attention dropout + residual + LayerNormalization,
// a Dense feed-forward block, GroupQueryAttention, GlobalAveragePooling1D, Dense) trained 20
// steps from the same weights on both: every step's loss, then every weight, within 1e-4
// relative + absolute (the lowering draws the cpu kernel's dropout masks, bit for bit).
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaAttention, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <cmath>

#include "backends/xla_test_util.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/attention.h"
#include "lockstep/nn/layers_1d.h"

using namespace lockstep;

namespace {

Model transformer() {
  using namespace layers;
  KTensor ids = Input({8}, "ids");
  KTensor e = Embedding(12, 16)(ids);
  KTensor a = attend(MultiHeadAttention(2, 8, {.dropout = 0.1}), e, e, {.use_causal_mask = true});
  KTensor h = LayerNormalization({.epsilon = 1e-6})(Add()({e, a}));
  KTensor f = Dense(16)(Dense(32, {.activation = "relu"})(h));
  h = LayerNormalization({.epsilon = 1e-6})(Add()({h, f}));
  h = attend(GroupQueryAttention(4, 4, 2), h, h);
  return Model(ids, Dense(3)(GlobalAveragePooling1D()(h)), "transformer");
}

CompileConfig step_config(const std::string& backend) {
  return CompileConfig{.optimizer = optimizers::SGD(0.05, 0.9),
                       .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                       .backend = backend};
}

}  // namespace

TEST(XlaAttention, TransformerStepMatchesTheCpuBackendFor20Steps) {
  if (!xla_test::shared_client().client)
    GTEST_SKIP() << "no PJRT CPU plugin: " << xla_test::shared_client().why_not;
  // The same names and seed for both: an attention layer keys its dropout by its seed, which
  // mixes in its name.
  reset_layer_names();
  set_random_seed(21);
  Model cpu = transformer();
  reset_layer_names();
  set_random_seed(21);
  Model xla = transformer();
  const int64_t N = 160, T = 8;
  Tensor x = Tensor::zeros(Shape{N, T});
  std::vector<int32_t> labels(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < T; ++t)
      x.data<float>()[n * T + t] = float((n * 7 + t * 3 + n / 5) % 12);
    labels[size_t(n)] = int32_t((n * 5 + n / 3) % 3);
  }
  Tensor y = Tensor::from_vector_i32({N}, labels);
  xla.set_weights(cpu.get_weights());
  cpu.compile(step_config("cpu"));
  xla.compile(step_config("xla"));
  std::vector<double> want, got;
  for (auto [m, losses] : {std::pair{&cpu, &want}, std::pair{&xla, &got}}) {
    auto cb = callbacks::LambdaCallback(LambdaHooks{
        .on_train_batch_end = [l = losses](int, const Logs& g) { l->push_back(g.at("loss")); }});
    m->fit(x, y,
           {.batch_size = 8,
            .epochs = 1,
            .verbose = 0,
            .callbacks = {cb},
            .shuffle = false,
            .seed = 3});
  }
  ASSERT_EQ(got.size(), 20u);
  ASSERT_EQ(want.size(), 20u);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << "loss of step " << i + 1;
  const std::vector<Tensor> gw = xla.get_weights(), ww = cpu.get_weights();
  ASSERT_EQ(gw.size(), ww.size());
  double worst = 0;
  for (size_t k = 0; k < gw.size(); ++k) {
    auto g = gw[k].to_vector(), w = ww[k].to_vector();
    for (size_t i = 0; i < g.size(); ++i)
      worst = std::max(worst, std::fabs(double(g[i]) - w[i]) / (1 + std::fabs(double(w[i]))));
  }
  std::printf("transformer, 20 steps: worst weight difference xla vs cpu %.3g\n", worst);
  EXPECT_LE(worst, 1e-4);
}
#endif
