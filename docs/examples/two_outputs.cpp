// A functional model with two inputs and two outputs (docs/models.md): an image and four numbers
// in, a class and a size out, trained on synthetic data with Keras's list and dict forms.
//   build/bin/two_outputs [--epochs N]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <lockstep/lockstep.h>
#include <lockstep/tools/example_args.h>
namespace ls = lockstep;
using namespace ls::layers;

// docs: begin data
// Synthetic data: the class is the brightest quarter of the image; the size is the mean of meta.
struct Data {
  ls::Tensor image, meta, digit, size;
};
Data make_data(int64_t n, uint64_t seed) {
  Data d{ls::Tensor::empty({n, 28, 28, 1}), ls::Tensor::empty({n, 4}),
         ls::Tensor::empty({n}, ls::DType::i32), ls::Tensor::empty({n, 1})};
  ls::Philox rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const int c = int(rng.next_u32() % 4);
    d.digit.data<int32_t>()[i] = c;
    for (int64_t p = 0; p < 28 * 28; ++p) {
      const int quarter = int((p / 28) / 14) * 2 + int((p % 28) / 14);
      d.image.data<float>()[i * 784 + p] = (quarter == c ? 0.6f : 0.f) + 0.4f * rng.uniform();
    }
    float sum = 0;
    for (int k = 0; k < 4; ++k) sum += d.meta.data<float>()[i * 4 + k] = rng.uniform();
    d.size.data<float>()[i] = sum / 4;
  }
  return d;
}
// docs: end data

int main(int argc, char** argv) {
  const auto args = ls::tools::parse_example_args(
      argc, argv,
      "usage: two_outputs [--epochs N]\n"
      "Trains a two-input, two-output model (docs/models.md) on generated data.\n"
      "  --epochs N  epochs to train (default 3)\n",
      {"--epochs"});
  const int epochs = int(args.integer("--epochs", 3, 0, 1000000));
  ls::set_random_seed(1);
  Data train = make_data(512, 1), test = make_data(128, 2);

  // docs: begin model
  auto image = Input({28, 28, 1}, "image"), meta = Input({4}, "meta");
  auto x = Conv2D(8, 3, {.padding = "same", .activation = "relu"})(image);
  auto y = Conv2D(8, 3, {.padding = "same"})(x);
  x = ReLU()(Add()({x, y}));  // a residual connection
  auto h = Concatenate()({Flatten()(MaxPooling2D({4, 4})(x)), meta});
  h = Dense(32, {.activation = "relu"})(h);
  ls::Model model({image, meta}, {Dense(4, {.name = "digit"})(h), Dense(1, {.name = "size"})(h)});
  // docs: end model

  // docs: begin lists
  model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                 .losses = {ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                            ls::losses::get("mse")},
                 .loss_weights = {1.0, 0.2},
                 .output_metrics = {{"accuracy"}, {"mae"}}});
  ls::History hist = model.fit({train.image, train.meta}, {train.digit, train.size},
                               {.batch_size = 64, .epochs = epochs, .verbose = 2});
  // hist.history holds loss, digit_loss, size_loss, digit_accuracy, size_mae
  std::vector<ls::Tensor> preds = model.predict({test.image, test.meta});  // one per output
  // docs: end lists
  std::printf("digit_accuracy %.3f, predictions %s and %s\n",
              hist.history["digit_accuracy"].back(), preds[0].shape().str().c_str(),
              preds[1].shape().str().c_str());

  // docs: begin dicts
  model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                 .losses = {{"digit", ls::losses::SparseCategoricalCrossentropy(
                                          {.from_logits = true})},
                            {"size", ls::losses::get("mse")}},
                 .loss_weights = {{"size", 0.2}},
                 .output_metrics = ls::PerOutput<std::vector<std::string>>::by_name(
                     {{"digit", {"accuracy"}}})});
  model.fit(ls::TensorDict{{"image", train.image}, {"meta", train.meta}},
            ls::TensorDict{{"digit", train.digit}, {"size", train.size}},
            {.batch_size = 64, .epochs = epochs, .verbose = 0});
  ls::Logs result = model.evaluate(ls::TensorDict{{"image", test.image}, {"meta", test.meta}},
                                   ls::TensorDict{{"digit", test.digit}, {"size", test.size}},
                                   {.verbose = 0});
  // docs: end dicts
  std::printf("test: digit_accuracy %.3f, size_loss %.4f\n", result["digit_accuracy"],
              result["size_loss"]);
  return 0;
}
