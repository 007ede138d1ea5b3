// Train a small CNN on Fashion-MNIST and print its test accuracy (docs/getting-started.md).
#include <cstdio>
#include <lockstep/lockstep.h>
#include <lockstep/tools/example_args.h>
namespace ls = lockstep;
using namespace ls::layers;

int main(int argc, char** argv) {
  ls::tools::parse_example_args(argc, argv, "usage: quickstart   (no options)\n");  // --help
  auto data = ls::data::load_fashion_mnist();  // $LOCKSTEP_FASHION_MNIST_DIR or Debian's copy
  ls::Model model = ls::Sequential({
      Input({28, 28, 1}),
      Conv2D(32, 3, {.activation = "relu"}), Conv2D(64, 3, {.activation = "relu"}),
      MaxPooling2D({2, 2}), Dropout(0.25), Flatten(),
      Dense(128, {.activation = "relu"}), Dropout(0.5), Dense(10)});
  model.summary();
  model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  model.fit(data.x_train, data.y_train, {.batch_size = 128, .epochs = 5, .validation_split = 0.1});
  ls::Logs result = model.evaluate(data.x_test, data.y_test);
  std::printf("test accuracy: %.4f\n", result["accuracy"]);
}
