// keras.applications backbones against real Keras 3 (on JAX), both ways
// (tests/interop/applications_interop.py is the Python half):
// - Keras builds MobileNetV2 (two configurations), ResNet50 and EfficientNetB0 with
//   weights=None, seeded, with non-trivial BatchNormalization (and EfficientNet's Normalization)
//   statistics, and saves .keras; Lockstep loads each and
//   predicts within 1e-4 of Keras on the same batch.
// - Lockstep's own build of each (lockstep/applications/applications.h) has Keras's layer names,
//   classes and weight shapes, and model.weights' paths, position by position; its .keras
//   file (random weights) loads in Keras, whose predictions agree within 1e-4 and whose layers'
//   configs equal a fresh keras.applications build's.
// - applications::preprocess_input equals keras.applications' preprocess_input (caffe, tf,
//   identity) within 1e-4 on a 0..255 batch.
// Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras (ctest applications_interop, label
// interop, through tests/interop/run_keras_interop.sh); skipped otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

struct Backbone {
  std::string name;
  applications::Options options;
  Model (*build)(applications::Options);
};

// The same arguments as BACKBONES in applications_interop.py.
std::vector<Backbone> backbones() {
  return {{"mobilenet_v2",
           {.input_shape = {32, 32, 3}, .classes = 10, .classifier_activation = "linear"},
           applications::MobileNetV2},
          {"mobilenet_v2_alpha",
           {.include_top = false, .input_shape = {40, 48, 3}, .pooling = "max", .alpha = 0.5},
           applications::MobileNetV2},
          {"resnet50",
           {.include_top = false, .input_shape = {32, 32, 3}, .pooling = "avg"},
           applications::ResNet50},
          {"efficientnet_b0",
           {.input_shape = {32, 32, 3}, .classes = 7, .classifier_activation = "linear"},
           applications::EfficientNetB0}};
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

float max_abs_diff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// BatchNormalization statistics away from (1, 0, 0, 1), as the Python side does for Keras's,
// and EfficientNet's Normalization statistics of pixels in [0, 1].
void randomize_batch_norm(Model& m, uint64_t seed) {
  Philox rng(seed);
  for (const auto& w : m.weights()) {
    const std::string& n = w->name;
    auto ends = [&](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (n.rfind("normalization/", 0) == 0 && w->value.dtype() == DType::f32) {
      const bool mean = ends("/mean");
      for (int64_t i = 0; i < w->value.numel(); ++i)
        w->value.data<float>()[i] = mean ? 0.45f - 0.03f * float(i) : 0.05f + 0.01f * float(i);
      continue;
    }
    float lo = 0, hi = 0;
    if (ends("/gamma")) lo = 0.7f, hi = 1.3f;
    if (ends("/beta") || ends("/moving_mean")) lo = -0.15f, hi = 0.15f;
    if (ends("/moving_variance")) lo = 0.5f, hi = 1.5f;
    if (lo == hi) continue;
    Tensor t = w->value.clone();
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(lo, hi);
    w->value.copy_from(t);
  }
}

// Lockstep's layers against Keras's list (name, class, weight shapes), position by position:
// model.layers() in Keras's order (ResNet50's blocks too: main branch's 1_conv ... 2_relu, then
// 0_conv, 3_conv, 0_bn, 3_bn by depth), so position-based weight files line up.
void expect_same_layers(const Model& m, const json& keras_layers, const std::string& what) {
  ASSERT_EQ(m.layers().size(), keras_layers.size()) << what;
  const std::vector<LayerPtr>& ours = m.layers();
  for (size_t i = 0; i < keras_layers.size(); ++i) {
    const Layer& l = *ours[i];
    const json& k = keras_layers[i];
    EXPECT_EQ(l.name(), k["name"].get<std::string>()) << what << " layer " << i;
    EXPECT_EQ(l.class_name(), k["class"].get<std::string>()) << what << " " << l.name();
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& w : l.weights()) shapes.push_back(w->value.shape().vec());
    EXPECT_EQ(json(shapes), k["weights"]) << what << " " << l.name();
  }
}

void check_keras_file(const fs::path& dir, const Backbone& b) {
  json meta = json::parse(std::ifstream(dir / ("keras_" + b.name + ".json")));
  Tensor x = read_f32(dir / ("keras_" + b.name + ".input.f32"),
                      Shape(meta["input"].get<std::vector<int64_t>>()));
  Tensor want = read_f32(dir / ("keras_" + b.name + ".pred.f32"),
                         Shape(meta["output"].get<std::vector<int64_t>>()));
  Model m = load_model((dir / ("keras_" + b.name + ".keras")).string());
  Tensor got = m.predict(x);
  ASSERT_EQ(got.shape(), want.shape()) << b.name;
  const float d = max_abs_diff(got, want);
  std::printf("lockstep loads keras_%s.keras (%zu layers): max abs diff %.3g\n", b.name.c_str(),
              m.layers().size(), d);
  EXPECT_LE(d, 1e-4f) << b.name;
  // Lockstep's own build: Keras's layers, names, classes and weight shapes, in order.
  reset_layer_names();
  Model own = b.build(b.options);
  EXPECT_EQ(own.name(), meta["model_name"].get<std::string>());
  expect_same_layers(own, meta["layers"], b.name);
  // model.weights in Keras's order: the same variable paths ("conv1_conv/kernel"), in order.
  std::vector<std::string> paths;
  for (const auto& w : own.weights()) paths.push_back(w->name);
  EXPECT_EQ(json(paths), meta["weight_paths"]) << b.name;
  EXPECT_EQ(own.count_params(), m.count_params()) << b.name;
  randomize_batch_norm(own, 31);
  Tensor y = own.predict(x);
  own.save((dir / ("lockstep_" + b.name + ".keras")).string());
  write_f32(dir / ("lockstep_" + b.name + ".input.f32"), x);
  write_f32(dir / ("lockstep_" + b.name + ".pred.f32"), y);
  std::ofstream(dir / ("lockstep_" + b.name + ".json"))
      << json{{"input", x.shape().vec()}, {"output", y.shape().vec()}}.dump();
}

// applications::preprocess_input against keras.applications.<module>.preprocess_input on the
// same 0..255 batch (ResNet50's caffe mode flips RGB to BGR and subtracts the means).
void check_preprocess(const fs::path& dir, const std::string& name) {
  json meta = json::parse(std::ifstream(dir / ("preprocess_" + name + ".json")));
  const Shape in_shape(meta["input"].get<std::vector<int64_t>>());
  Tensor x = read_f32(dir / ("preprocess_" + name + ".input.f32"), in_shape);
  Tensor want = read_f32(dir / ("preprocess_" + name + ".output.f32"),
                         Shape(meta["output"].get<std::vector<int64_t>>()));
  KTensor in = layers::Input({in_shape[1], in_shape[2], in_shape[3]});
  // (Rescaling(1): an exact copy, so EfficientNet's identity still makes a model)
  Model m(in, layers::Rescaling(1.0)(applications::preprocess_input(name, in)));
  Tensor got = m.predict(x);
  ASSERT_EQ(got.shape(), want.shape()) << name;
  const float d = max_abs_diff(got, want);
  std::printf("preprocess_input(%s) against Keras's: max abs diff %.3g\n", name.c_str(), d);
  EXPECT_LE(d, 1e-4f) << name;
}

}  // namespace

TEST(ApplicationsInterop, BackbonesBothWaysAgainstKerasApplications) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -R applications_interop` (run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("applications_interop", /*fresh=*/true);
  const std::string script =
      std::string(py) + " " + LOCKSTEP_SOURCE_DIR + "/tests/interop/applications_interop.py ";
  ASSERT_EQ(std::system((script + "keras " + dir.string()).c_str()), 0);
  for (const Backbone& b : backbones()) check_keras_file(dir, b);
  for (const std::string name : {"resnet50", "mobilenet_v2", "efficientnet_b0"})
    check_preprocess(dir, name);
  EXPECT_EQ(std::system((script + "check " + dir.string()).c_str()), 0)
      << "Keras did not load Lockstep's backbones identically (see above)";
}
