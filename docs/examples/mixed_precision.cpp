// Mixed precision (docs/mixed-precision.md): compute in bfloat16, keep the variables in float32.
//   build/bin/mixed_precision [float32|mixed_bfloat16]     (default mixed_bfloat16)
#include <algorithm>
#include <cstdio>
#include <string>

#include <lockstep/lockstep.h>
#include <lockstep/tools/example_args.h>
namespace ls = lockstep;
using namespace ls::layers;

int main(int argc, char** argv) {
  const auto args = ls::tools::parse_example_args(
      argc, argv,
      "usage: mixed_precision [float32|mixed_bfloat16]\n"
      "Trains a small CNN on Fashion-MNIST under the dtype policy (default mixed_bfloat16).\n",
      {}, 1);
  const std::string policy = args.positional_or(0, "mixed_bfloat16");
  // docs: begin policy
  ls::mixed_precision::set_global_policy(policy);  // before the layers are created
  std::printf("native bf16 on this CPU: %s\n", ls::mixed_precision::cpu_has_bf16() ? "yes" : "no");
  ls::Model model = ls::Sequential({
      Input({28, 28, 1}), Conv2D(32, 3, {.activation = "relu"}), MaxPooling2D(), Flatten(),
      Dense(128, {.activation = "relu"}), Dense(10, {.name = "logits"})});
  for (const ls::LayerPtr& layer : model.layers())
    std::printf("  %-14s %-16s computes in %s\n", layer->name().c_str(),
                layer->dtype_policy().name.c_str(), ls::dtype_name(layer->compute_dtype()));
  // docs: end policy
  model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  auto data = ls::data::load_fashion_mnist();
  const int64_t n = std::min<int64_t>(8192, data.x_train.dim(0));
  ls::History hist = model.fit(data.x_train.slice(0, n), data.y_train.slice(0, n),
                               {.batch_size = 128, .epochs = 1, .verbose = 2});
  ls::Logs test = model.evaluate(data.x_test, data.y_test, {.verbose = 0});
  std::printf("%s: test accuracy %.4f, %.0f img/s, weights stored as %s\n", policy.c_str(),
              test["accuracy"], hist.images_per_second,
              ls::dtype_name(model.weights()[0]->value.dtype()));
  return 0;
}
