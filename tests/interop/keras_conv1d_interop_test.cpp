// The 1D layers against real Keras 3 (on JAX), both ways: tests/interop/keras_conv1d_interop.py
// builds its MODELS (Conv1D valid / same / causal with strides, dilation and groups, the 1D
// pools, UpSampling1D, ZeroPadding1D, Cropping1D, SpatialDropout1D, Permute, RepeatVector,
// TimeDistributed) with seeded random weights and saves them; Lockstep loads each .keras file
// and predicts within 1e-4 of Keras. Lockstep then builds the same models itself (below, layer
// for layer), takes those weights, saves its own .keras files, and Keras loads them and predicts
// within 1e-4 of Lockstep. Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras (ctest
// keras_conv1d_interop, label interop, through tests/interop/run_keras_interop.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

namespace {

// keras_conv1d_interop.py's conv_stack(), layer for layer.
Model conv_stack() {
  return Sequential(
      {Input({16, 4}),
       Conv1D(6, 3, {.padding = "causal", .dilation_rate = 2, .activation = "relu"}),
       Conv1D(4, 3, {.strides = 2, .padding = "same", .groups = 2}), MaxPooling1D(2),
       AveragePooling1D(2, {.strides = 1, .padding = "same"}),
       Conv1D(5, 2, {.activation = "tanh", .use_bias = false}), GlobalAveragePooling1D(), Dense(3)},
      "conv_stack");
}

// keras_conv1d_interop.py's sequence_stack().
Model sequence_stack() {
  return Sequential(
      {Input({6, 3}), Conv1D(4, 2), UpSampling1D(2), ZeroPadding1D({1, 2}), Cropping1D({2, 1}),
       SpatialDropout1D(0.3), Permute({2, 1}), MaxPooling1D(2, {.padding = "same"}),
       Permute({2, 1}), TimeDistributed(Dense(5, {.activation = "relu"})), GlobalMaxPooling1D(true),
       Flatten(), RepeatVector(3), AveragePooling1D(3, {.strides = 2}), GlobalAveragePooling1D(),
       Dense(2)},
      "sequence_stack");
}

Tensor read_f32(const fs::path& p, const Shape& s) {
  Tensor t = Tensor::zeros(s);
  std::ifstream f(p, std::ios::binary);
  f.read(static_cast<char*>(t.raw()), std::streamsize(t.nbytes()));
  EXPECT_TRUE(f.good()) << p;
  return t;
}

void write_f32(const fs::path& p, const Tensor& t) {
  std::ofstream(p, std::ios::binary)
      .write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

Shape shape_of(const json& j) {
  std::vector<int64_t> d;
  for (const json& v : j) d.push_back(v.get<int64_t>());
  return Shape(d);
}

}  // namespace

TEST(KerasConv1DInterop, The1DLayersBothWaysAgainstRealKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -L interop` (tests/interop/run_keras_interop.sh)";
  const fs::path dir = test_util::temp_dir("keras_conv1d_interop", /*fresh=*/true);
  const std::string script =
      std::string(py) + " " + LOCKSTEP_SOURCE_DIR + "/tests/interop/keras_conv1d_interop.py ";
  ASSERT_EQ(std::system((script + "keras " + dir.string()).c_str()), 0)
      << "Keras did not write its models (above)";
  const std::vector<std::pair<std::string, Model (*)()>> models = {
      {"conv_stack", conv_stack}, {"sequence_stack", sequence_stack}};
  for (const auto& [name, make] : models) {
    SCOPED_TRACE(name);
    std::ifstream meta_file(dir / (name + ".json"));
    const std::string meta_text((std::istreambuf_iterator<char>(meta_file)),
                                std::istreambuf_iterator<char>());
    const json meta = parse_json(meta_text, name + ".json");
    const Tensor x = read_f32(dir / (name + ".input.f32"), shape_of(meta["input"]));
    const Tensor want = read_f32(dir / ("keras_" + name + ".pred.f32"), shape_of(meta["output"]));
    Model keras_model = load_model((dir / ("keras_" + name + ".keras")).string(), false);
    const float d = test_util::max_abs_diff(keras_model.predict(x), want);
    std::printf("lockstep loads keras_%s.keras: max abs diff %.3g\n", name.c_str(), d);
    EXPECT_LE(d, 1e-4f);
    // Lockstep's own build, with Keras's weights, saved for Keras.
    reset_layer_names();
    Model mine = make();
    mine.set_weights(keras_model.get_weights());
    const Tensor pred = mine.predict(x);
    EXPECT_LE(test_util::max_abs_diff(pred, want), 1e-4f);
    mine.save((dir / ("lockstep_" + name + ".keras")).string());
    write_f32(dir / ("lockstep_" + name + ".pred.f32"), pred);
  }
  EXPECT_EQ(std::system((script + "check " + dir.string()).c_str()), 0)
      << "Keras did not load Lockstep's files within 1e-4 (above)";
}
