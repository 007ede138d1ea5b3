// Interop with real Keras 3 (on JAX): Lockstep writes .keras files that Keras loads and
// predicts identically (including an augmentation stack), and loads the .keras files Keras writes
// (a small CNN, a functional model with Add / Concatenate / Multiply and a branch) and predicts
// identically (1e-5). Compiled files carry the optimizer both ways: each side continues the
// other's training one epoch and lands on the same predictions (1e-4). Keras's model.to_json()
// builds in Lockstep and trains through `lockstep train`. Runs when LOCKSTEP_INTEROP_PYTHON names a
// python with keras (ctest keras_interop, label interop, sets it via
// tests/interop/run_keras_interop.sh); skipped otherwise.
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

// Adam on a small Dense model, batch 8, no shuffle: the data both sides train on.
std::pair<Tensor, Tensor> resume_data() {
  Tensor x = fixed_inputs(Shape{48, 6}, 77);
  Tensor y = Tensor::zeros(Shape{48}, DType::i32);
  for (int64_t i = 0; i < 48; ++i) y.data<int32_t>()[i] = int32_t((i * 5 + i / 7) % 4);
  return {x, y};
}

const FitConfig kResumeFit{.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false};

void write_lockstep_resume(const fs::path& dir) {
  auto [x, y] = resume_data();
  write_f32(dir / "resume.x.f32", x);
  std::ofstream(dir / "resume.y.i32", std::ios::binary)
      .write(static_cast<const char*>(y.raw()), std::streamsize(y.nbytes()));
  Model m = Sequential({Input({6}), Dense(10, {.activation = "relu"}), Dense(4)}, "resume_ls");
  m.compile({.optimizer = optimizers::Adam(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  m.fit(x, y, kResumeFit);
  m.save((dir / "resume_lockstep.keras").string());
  m.fit(x, y, kResumeFit);
  write_f32(dir / "resume_lockstep.after.f32", m.predict(x));
}

void check_keras_resume(const fs::path& dir) {
  auto [x, y] = resume_data();
  Model m = load_model((dir / "resume_keras.keras").string());
  ASSERT_TRUE(m.compile_config().optimizer) << "Keras's compiled file loads compiled";
  EXPECT_EQ(m.compile_config().optimizer->iterations()->value.item(), 6.0f);
  m.fit(x, y, kResumeFit);
  Tensor want = read_f32(dir / "resume_keras.after.f32", Shape{48, 4});
  float d = max_abs_diff(m.predict(x), want);
  std::printf("lockstep resumes resume_keras.keras: max abs diff after one more epoch %.3g\n", d);
  EXPECT_LE(d, 1e-4f);
}

void check_keras_json(const fs::path& dir) {
  std::ifstream f(dir / "keras_cnn.json");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Model m = model_from_json(text);
  int64_t params = 0;
  std::ifstream(dir / "keras_cnn.params") >> params;
  EXPECT_EQ(m.count_params(), params);
  const std::string bin = std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep";
  if (!fs::exists(bin)) return;
  for (int c = 0; c < 2; ++c) {  // a tiny two-class image folder
    fs::create_directories(dir / "imgs" / std::to_string(c));
    for (int i = 0; i < 6; ++i) {
      Tensor img = Tensor::zeros(Shape{12, 12, 3}, DType::u8);
      for (int64_t k = 0; k < img.numel(); ++k)
        img.data<uint8_t>()[k] = uint8_t(c * 150 + (k * 7 + i) % 90);
      data::write_image((dir / "imgs" / std::to_string(c) / (std::to_string(i) + ".png")).string(),
                        img);
    }
  }
  const std::string cmd = bin + " train --model " + (dir / "keras_cnn.json").string() +
                          " --data-dir " + (dir / "imgs").string() +
                          " --epochs 2 --batch-size 4 --out " +
                          (dir / "from_keras_json.keras").string() + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_TRUE(fs::exists(dir / "from_keras_json.keras"));
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
  write_lockstep_resume(dir);
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
  check_keras_resume(dir);
  check_keras_json(dir);
}
