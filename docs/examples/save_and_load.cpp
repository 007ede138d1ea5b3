// Saving, loading and moving a model (docs/saving-and-interop.md): train a little, keep the best
// checkpoint, log to TensorBoard, save a Keras 3 .keras file, load it and train on, save and load
// weights, rebuild from the model JSON, export ONNX.
//   build/bin/save_and_load [OUT_DIR]     (default saved/)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <lockstep/lockstep.h>
#include <lockstep/tools/example_args.h>
namespace ls = lockstep;
using namespace ls::layers;

static ls::Model small_cnn() {
  return ls::Sequential({Input({28, 28, 1}), Conv2D(16, 3), BatchNormalization(), ReLU(),
                         MaxPooling2D(), Flatten(), Dropout(0.2), Dense(10)},
                        "small_cnn");
}

static float max_diff(const ls::Tensor& a, const ls::Tensor& b) {
  float d = 0;
  auto va = a.to_vector(), vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) d = std::fmax(d, std::fabs(va[i] - vb[i]));
  return d;
}

int main(int argc, char** argv) {
  const auto args = ls::tools::parse_example_args(
      argc, argv,
      "usage: save_and_load [OUT_DIR]\n"
      "Trains a small CNN, then saves, loads and exports it into OUT_DIR (default saved/).\n",
      {}, 1);
  const std::string out = args.positional_or(0, "saved");
  std::filesystem::create_directories(out);
  auto data = ls::data::load_fashion_mnist();
  const int64_t n = std::min<int64_t>(2048, data.x_train.dim(0));
  ls::Tensor x = data.x_train.slice(0, n), y = data.y_train.slice(0, n);
  ls::Tensor x_test = data.x_test.slice(0, std::min<int64_t>(512, data.x_test.dim(0)));

  ls::set_random_seed(7);
  ls::Model model = small_cnn();
  model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  // docs: begin callbacks
  model.fit(x, y, {.epochs = 2, .verbose = 2, .callbacks = {
      ls::callbacks::ModelCheckpoint(out + "/best.keras",
                                     {.monitor = "val_accuracy", .save_best_only = true}),
      ls::callbacks::TensorBoard({.log_dir = out + "/logs"}),
      ls::callbacks::CSVLogger(out + "/log.csv")}, .validation_split = 0.2});
  // docs: end callbacks

  // docs: begin save
  model.save(out + "/model.keras");                    // config, weights, optimizer state
  ls::Model loaded = ls::load_model(out + "/model.keras");  // compiled, Adam state restored
  std::printf("load_model: predictions differ by %g\n",
              max_diff(model.predict(x_test), loaded.predict(x_test)));
  loaded.fit(x, y, {.epochs = 1, .verbose = 2});       // training goes on where it stopped

  model.save_weights(out + "/model.weights.h5");       // Keras's HDF5 layout
  ls::Model twin = small_cnn();
  twin.load_weights(out + "/model.weights.h5");
  std::printf("load_weights: predictions differ by %g\n",
              max_diff(model.predict(x_test), twin.predict(x_test)));

  ls::Model rebuilt = ls::model_from_json(model.to_json());  // architecture only, new weights
  std::printf("model_from_json: %zu layers\n", rebuilt.layers().size());

  ls::onnx::ExportReport onnx = ls::onnx::export_model(model, out + "/model.onnx");
  std::printf("ONNX: %lld nodes, folded: %s\n", (long long)onnx.nodes,
              onnx.folded.empty() ? "none" : onnx.folded[0].c_str());
  // docs: end save
  return 0;
}
