// Pretrained weight files against real Keras 3 (on JAX), both ways (issue 23): a small CNN with
// BatchNormalization and keras.applications-style names. Keras's model.save_weights
// (.weights.h5), its legacy whole-model model.save("x.h5") (weights under model_weights/), and a
// Keras 2 style backbone-only file written with h5py as the published keras.applications files
// are (fixed-length names, "kernel:0") load into Lockstep's build and predict within 1e-4 of
// Keras; Lockstep's .weights.h5 and legacy .h5 load in Keras (in order and by_name) within 1e-4.
// Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras (ctest keras_weights_interop,
// label interop, through tests/interop/run_keras_interop.sh); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kBatch = 6;

// keras_weights_interop.py's small_cnn(), layer for layer.
Model small_cnn(bool include_top = true) {
  std::vector<SequentialItem> items{Input({10, 10, 3}),
                                    Conv2D(4, 3, {.name = "block1_conv"}),
                                    BatchNormalization({.name = "block1_bn"}),
                                    ReLU("block1_relu"),
                                    Conv2D(6, 1, {.padding = "same", .name = "block2_conv"}),
                                    BatchNormalization({.name = "block2_bn"}),
                                    GlobalAveragePooling2D(false, "avg_pool")};
  if (include_top) items.push_back(Dense(3, {.activation = "softmax", .name = "predictions"}));
  return Sequential(items, "small_cnn");
}

void write_f32(const fs::path& p, const Tensor& t) {
  std::ofstream(p, std::ios::binary)
      .write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

Tensor read_f32(const fs::path& p, const Shape& s) {
  Tensor t = Tensor::zeros(s);
  std::ifstream f(p, std::ios::binary);
  f.read(static_cast<char*>(t.raw()), std::streamsize(t.nbytes()));
  EXPECT_TRUE(f.good()) << p;
  return t;
}

void randomize(Model& m) {
  uint64_t seed = 500;
  for (auto& w : m.weights()) {
    Tensor t = test_util::lcg_inputs(w->value.shape(), seed++);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& v = t.data<float>()[i];
      v = w->name.find("variance") != std::string::npos ? 1.0f + 0.5f * v : 0.4f * v;
    }
    w->value.copy_from(t);
  }
}

void expect_close(const std::string& what, const Tensor& got, const Tensor& want) {
  const float d = test_util::max_abs_diff(got, want);
  std::printf("%s: max abs diff %.3g\n", what.c_str(), d);
  EXPECT_LE(d, 1e-4f) << what;
}

}  // namespace

TEST(KerasWeightsInterop, WeightFilesBothWaysAgainstRealKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -L interop` (tests/interop/run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("keras_weights_interop", /*fresh=*/true);
  reset_layer_names();
  const Tensor x = test_util::lcg_inputs(Shape{kBatch, 10, 10, 3}, 17);
  write_f32(dir / "input.f32", x);
  // Lockstep -> Keras.
  Model mine = small_cnn();
  randomize(mine);
  write_f32(dir / "lockstep.pred.f32", mine.predict(x));
  mine.save_weights((dir / "lockstep.weights.h5").string());
  mine.save_weights((dir / "lockstep.h5").string());
  const std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                          "/tests/interop/keras_weights_interop.py " + dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "Keras did not load Lockstep's weight files (above)";
  // Keras -> Lockstep.
  const Tensor want = read_f32(dir / "keras.pred.f32", Shape{kBatch, 3});
  for (const char* file : {"keras.weights.h5", "keras_model.h5"}) {
    Model m = small_cnn();
    LoadWeightsReport r = m.load_weights((dir / file).string());
    EXPECT_TRUE(r.skipped.empty() && r.not_in_file.empty()) << file;
    expect_close(std::string("lockstep loads ") + file, m.predict(x), want);
  }
  Model in_order = small_cnn();
  in_order.load_weights((dir / "keras_model.h5").string(), {.by_name = false});
  expect_close("lockstep loads keras_model.h5 in order", in_order.predict(x), want);
  // The published-file shape: a backbone's weights under a model with a new head.
  Model transfer = small_cnn();
  LoadWeightsReport r = transfer.load_weights((dir / "keras2_no_top.h5").string());
  EXPECT_EQ(r.loaded.size(), 4u);
  EXPECT_EQ(r.not_in_file, std::vector<std::string>{"predictions"});
  Model backbone = small_cnn(/*include_top=*/false);  // keras.applications' include_top=False
  EXPECT_EQ(backbone.load_weights((dir / "keras2_no_top.h5").string()).loaded.size(), 4u);
  expect_close("lockstep loads keras2_no_top.h5 (backbone features)", backbone.predict(x),
               read_f32(dir / "keras.features.f32", Shape{kBatch, 6}));
}
