// Interop with real Keras 3 (on JAX): Lockstep writes .keras files that Keras loads and
// predicts identically (including an augmentation stack), and loads the .keras files Keras writes
// (a small CNN, a functional model with Add / Concatenate / Multiply and a branch) and predicts
// identically (1e-5). Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras (ctest
// keras_interop, label interop, sets it via tests/interop/run_keras_interop.sh); skipped otherwise.
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

Tensor fixed_inputs(Shape s, uint64_t seed) {
  std::vector<float> v(s.numel());
  uint64_t x = seed;
  for (auto& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = float((x >> 40) % 2001) / 1000.0f - 1.0f;
  }
  return Tensor::from_vector(s, v);
}

void write_f32(const fs::path& p, const Tensor& t) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

Tensor read_f32(const fs::path& p, const Shape& s) {
  Tensor t = Tensor::zeros(s);
  std::ifstream f(p, std::ios::binary);
  f.read(static_cast<char*>(t.raw()), std::streamsize(t.nbytes()));
  EXPECT_TRUE(f.good()) << p;
  return t;
}

json shape_json(const Shape& s) { return s.vec(); }

// Non-trivial weights: BN variances in [0.5, 1.5], everything else ~N(0, 0.3)-ish.
void randomize(Model& m, uint64_t seed) {
  for (auto& w : m.weights()) {
    Tensor t = fixed_inputs(w->value.shape(), seed++);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& v = t.data<float>()[i];
      v = w->name.find("variance") != std::string::npos ? 1.0f + 0.5f * v : 0.3f * v;
    }
    w->value.copy_from(t);
  }
}

Model lockstep_cnn() {
  return Sequential({Input({12, 12, 1}), Conv2D(4, 3, {.activation = "relu"}), BatchNormalization(),
                     MaxPooling2D(), Conv2D(6, 3, {.padding = "same"}), GlobalAveragePooling2D(),
                     Dropout(0.2), Dense(5, {.activation = "softmax"})},
                    "ls_cnn");
}

Model lockstep_functional() {
  KTensor in = Input({9, 9, 3}, "img");
  KTensor a = Conv2D(4, 3, {.padding = "same", .activation = "relu"})(in);
  KTensor b = BatchNormalization()(Conv2D(4, 1)(in));
  KTensor s = Add()({a, b});
  KTensor c = Concatenate()({s, in});
  KTensor p = AveragePooling2D({3, 3})(c);
  KTensor f = Flatten()(p);
  KTensor d = Dense(8, {.activation = "tanh"})(f);
  KTensor out = Dense(2)(LayerNormalization()(d));
  return Model(in, out, "ls_functional");
}

// The augmentation layers are the identity at inference; CenterCrop is not.
Model lockstep_augmented() {
  return Sequential({Input({12, 12, 3}), RandomFlip("horizontal", 3), RandomRotation(0.1),
                     RandomZoom(0.1), RandomTranslation(0.1, {-0.2, 0.1}), RandomBrightness(0.2),
                     CenterCrop(10, 10), Conv2D(3, 3), Flatten(), Dense(2)},
                    "ls_augmented");
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

}  // namespace

TEST(KerasInterop, BothDirectionsAgainstRealKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -L interop` (tests/interop/run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("keras_interop", /*fresh=*/true);
  // Lockstep -> Keras.
  int seed = 1;
  for (Model* mp : {new Model(lockstep_cnn()), new Model(lockstep_functional()),
                    new Model(lockstep_augmented())}) {
    std::unique_ptr<Model> m(mp);
    randomize(*m, 100 * seed++);
    Shape s = m->inputs()[0].shape();
    s[0] = 5;
    Tensor x = fixed_inputs(s, seed);
    Tensor y = m->predict(x);
    std::string n = m->name();
    m->save((dir / ("lockstep_" + n + ".keras")).string());
    write_f32(dir / ("lockstep_" + n + ".input.f32"), x);
    write_f32(dir / ("lockstep_" + n + ".pred.f32"), y);
    std::ofstream(dir / ("lockstep_" + n + ".json"))
        << json{{"input", shape_json(x.shape())}, {"output", shape_json(y.shape())}}.dump();
  }
  std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                    "/tests/interop/keras_interop.py " + dir.string();
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "Keras did not load Lockstep's files identically (see above)";
  // Keras -> Lockstep.
  for (std::string n : {"small_cnn", "branchy"}) {
    fs::path file = dir / ("keras_" + n + ".keras");
    ASSERT_TRUE(fs::exists(file)) << file;
    json meta = json::parse(std::ifstream(dir / ("keras_" + n + ".json")));
    Tensor x = read_f32(dir / ("keras_" + n + ".input.f32"),
                        Shape(meta["input"].get<std::vector<int64_t>>()));
    Tensor want = read_f32(dir / ("keras_" + n + ".pred.f32"),
                           Shape(meta["output"].get<std::vector<int64_t>>()));
    Model m = load_model(file.string());
    Tensor got = m.predict(x);
    ASSERT_EQ(got.shape(), want.shape()) << n;
    float d = max_abs_diff(got, want);
    std::printf("lockstep loads keras_%s.keras (%zu layers): max abs diff %.3g\n", n.c_str(),
                m.layers().size(), d);
    EXPECT_LE(d, 1e-5f) << n;
  }
}
