// Trains a tiny classifier for a few steps through the installed library and checks that the
// loss went down; exit status 0 on success.
#include <lockstep/lockstep.h>

#include <cstdio>

namespace ls = lockstep;
using namespace ls::layers;

int main() {
  // Two Gaussian blobs in 4-D, labels 0 and 1.
  const int n = 256;
  std::vector<float> xs(n * 4);
  std::vector<int32_t> ys(n);
  ls::Philox rng(7);
  for (int i = 0; i < n; ++i) {
    ys[i] = i % 2;
    for (int j = 0; j < 4; ++j) xs[i * 4 + j] = (ys[i] ? 1.f : -1.f) + rng.normal();
  }
  ls::Tensor x = ls::Tensor::from_vector({n, 4}, xs);
  ls::Tensor y = ls::Tensor::from_vector_i32({n}, ys);
  ls::Model model = ls::Sequential({Input({4}), Dense(8, {.activation = "relu"}), Dense(2)});
  model.compile({.optimizer = ls::optimizers::SGD(0.1),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  double before = model.evaluate(x, y, {.verbose = 0}).at("loss");
  model.fit(x, y, {.batch_size = 32, .epochs = 3, .verbose = 0});
  auto after = model.evaluate(x, y, {.verbose = 0});
  std::printf("consumer: loss %.4f -> %.4f, accuracy %.3f\n", before, after.at("loss"),
              after.at("accuracy"));
  return after.at("loss") < before && after.at("accuracy") > 0.8 ? 0 : 1;
}
