// Interop with real Keras 3 (on JAX): Lockstep writes .keras files that Keras loads and
// predicts identically (including an augmentation stack), and loads the .keras files Keras writes
// (a small CNN, a functional model with Add / Concatenate / Multiply and a branch) and predicts
// identically (1e-5). Compiled files carry the optimizer both ways: each side continues the
// other's training one epoch and lands on the same predictions (1e-4). Keras's model.to_json()
// builds in Lockstep and trains through `lockstep train`. Nested models (a Sequential and a
// functional model used as layers) go both ways (1e-5), and so does a decoder of
// Conv2DTranspose and UpSampling2D layers (1e-5 relative). On Fashion-MNIST (when installed): the
// reference CNN Lockstep trained for an epoch scores the same test accuracy in Keras (+-0.001),
// and Keras's JSON of it trained by `lockstep train` on an image folder reaches the accuracy of
// the same model built in C++ and trained on the same folder (+-0.02, see check_reference_json).
// Runs when LOCKSTEP_INTEROP_PYTHON names a
// python with keras (ctest keras_interop, label interop, sets it via
// tests/interop/run_keras_interop.sh); skipped otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../../examples/reference_cnn.h"
#include "lockstep/lockstep.h"
#include "lockstep/tools/export.h"
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

// The remaining layers Lockstep shares with Keras: rescaling with an offset, resizing,
// depthwise and separable convolutions, Activation, ReLU, global max pooling, Multiply and
// Reshape. (RandomCrop is left out: Keras 3.15 returns its input uncropped at inference,
// against its own documentation and output shape; docs/keras_compat.md.)
Model lockstep_layers() {
  KTensor in = Input({10, 10, 3}, "img");
  KTensor z = Resizing(6, 5)(Rescaling(0.5, 0.1)(in));
  KTensor d = Activation("softplus")(DepthwiseConv2D({3, 3}, {.padding = "same"})(z));
  KTensor g = GlobalMaxPooling2D()(SeparableConv2D(4, {3, 3}, {.activation = "relu"})(d));
  KTensor m = Multiply()({Dense(6)(g), ReLU()(Dense(6)(g))});
  return Model(in, Dense(2)(Flatten()(Reshape({3, 2})(m))), "ls_layers");
}

// GroupNormalization, PReLU (per channel and per position), SpatialDropout2D and
// RandomContrast (the identity at inference), LeakyReLU, ELU and the "elu" activation.
Model lockstep_extra() {
  KTensor in = Input({6, 6, 4}, "img");
  KTensor h = Conv2D(8, {3, 3}, {.padding = "same"})(RandomContrast(0.2)(in));
  h = PReLU({.shared_axes = {1, 2}})(GroupNormalization({.groups = 4})(h));
  h = LeakyReLU()(Conv2D(6, {3, 3})(SpatialDropout2D(0.3)(h)));
  h = GroupNormalization({.groups = 3, .epsilon = 1e-2, .center = false})(ELU(0.7)(h));
  KTensor g = PReLU()(GlobalAveragePooling2D()(h));
  return Model(in, Dense(3, {.activation = "elu"})(g), "ls_extra");
}

// A decoder: Conv2DTranspose ("same" with stride 2, "valid" with output_padding, dilated) and
// UpSampling2D (bilinear and nearest).
Model lockstep_decoder() {
  return Sequential(
      {Input({5, 4, 3}, "code"),
       Conv2DTranspose(4, 3, {.strides = {2, 2}, .padding = "same", .activation = "relu"}),
       UpSampling2D({2, 1}, "bilinear"),
       Conv2DTranspose(3, {2, 3}, {.strides = {2, 3}, .output_padding = {1, 0}}),
       Conv2DTranspose(2, 3, {.padding = "same", .dilation_rate = {2, 2}, .use_bias = false}),
       UpSampling2D({1, 2}), Flatten(), Dense(2)},
      "ls_decoder");
}

// A Sequential (with BatchNormalization) and a functional model used as layers.
Model lockstep_nested() {
  Model inner = Sequential(
      {Input({6}), Dense(5, {.activation = "relu"}), BatchNormalization(), Dense(4)}, "ls_inner");
  KTensor fi = Input({4});
  Model inner_fn(fi, Dense(3, {.activation = "tanh"})(Dense(4)(fi)), "ls_inner_fn");
  KTensor x = Input({6}, "x");
  KTensor h = inner_fn(inner(x));
  return Model(x, Dense(2)(Concatenate()({h, x})), "ls_nested");
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

// ---- Fashion-MNIST ------------------------------------------------------------------------
// One epoch on the first 12k training images (of 60k: enough for ~80% test accuracy, and a
// few seconds on two cores), batch 128, then Lockstep's evaluate on the 10k test set, whose
// exact float inputs Keras evaluates the saved file on. Returns Lockstep's accuracy (< 0: no
// Fashion-MNIST here).
double write_fashion_mnist_model(const fs::path& dir) {
  if (!fs::exists(fs::path(data::fashion_mnist_dir()) / "t10k-images-idx3-ubyte.gz")) return -1;
  auto data = data::load_fashion_mnist();
  reset_layer_names();
  set_random_seed(42);
  Model m = reference_cnn();
  m.compile({.optimizer = optimizers::Adam(1e-3),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  m.fit(data.x_train.slice(0, 12000), data.y_train.slice(0, 12000),
        {.batch_size = 128, .epochs = 1, .verbose = 0, .seed = 42});
  const double acc =
      m.evaluate(data.x_test, data.y_test, {.batch_size = 500, .verbose = 0}).at("accuracy");
  m.save((dir / "fmnist_lockstep.keras").string());
  write_f32(dir / "fmnist_test.x.f32", data.x_test);
  std::ofstream(dir / "fmnist_test.y.i32", std::ios::binary)
      .write(static_cast<const char*>(data.y_test.raw()), std::streamsize(data.y_test.nbytes()));
  std::printf(
      "lockstep trained the reference CNN for one epoch on 12000 images: test accuracy %.4f\n",
      acc);
  return acc;
}

// The test images as raw 0..255 floats [N, 28, 28, 1] (what an image folder's decoder gives).
Tensor fashion_mnist_test_pixels() {
  const fs::path d = data::fashion_mnist_dir();
  Tensor u8 = data::read_idx((d / "t10k-images-idx3-ubyte.gz").string());
  Tensor x = Tensor::zeros(Shape{u8.dim(0), 28, 28, 1});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(u8.data<uint8_t>()[i]);
  return x;
}

// Keras's model.to_json() of the reference CNN (Rescaling(1/255) first, as image folders give
// 0..255 pixels) through `lockstep train`, against the same architecture built in C++ and trained
// on the same folder with the CLI's own pipeline (image_dataset_from_directory, seed, batch 32,
// one epoch, Adam 1e-3, from_logits), both scored on the 10k test set. The tolerance: the two
// builders name and initialise the layers independently (the JSON's names come from Keras, the
// initial weights from Lockstep's seeded initializers for those names), so the runs are
// different draws of the same training; on 5000 images for one epoch (~78% accuracy) such draws
// differ by up to ~1 point, so 0.02 separates "the same training" from a real difference (a
// missing Rescaling, a wrong loss or activation cost 5-70 points).
void check_reference_json(const fs::path& dir, const Tensor& y_test) {
  const std::string bin = std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep";
  if (!fs::exists(bin) || !fs::exists(dir / "reference_cnn.json")) return;
  const fs::path fm = data::fashion_mnist_dir(), folder = dir / "fmnist_images";
  tools::export_idx_image_folder((fm / "train-images-idx3-ubyte.gz").string(),
                                 (fm / "train-labels-idx1-ubyte.gz").string(),
                                 /*class_names: "0".."9", so the folder's sorted class order
                                    is Fashion-MNIST's label order*/
                                 {}, folder.string(), {.limit_per_class = 500, .format = "png"});
  const std::string cmd = bin + " train --model " + (dir / "reference_cnn.json").string() +
                          " --data-dir " + folder.string() +
                          " --epochs 1 --batch-size 32 --validation-split 0 --seed 42 --out " +
                          (dir / "from_reference_json.keras").string() + " > " +
                          (dir / "reference_train.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << cmd << "\n"
      << test_util::read_text_file((dir / "reference_train.log").string());
  Tensor x = fashion_mnist_test_pixels();
  Model from_json = load_model((dir / "from_reference_json.keras").string());
  const double json_acc =
      from_json.evaluate(x, y_test, {.batch_size = 500, .verbose = 0}).at("accuracy");
  // The C++ model, trained the way run_train trains (examples/cli/train.h).
  set_random_seed(42);
  Model cpp =
      Sequential({Input({28, 28, 1}), Rescaling(1.0 / 255), Conv2D(32, 3, {.activation = "relu"}),
                  Conv2D(64, 3, {.activation = "relu"}), MaxPooling2D({2, 2}), Dropout(0.25),
                  Flatten(), Dense(128, {.activation = "relu"}), Dropout(0.5), Dense(10)},
                 "reference_cnn_cpp");
  cpp.compile({.optimizer = optimizers::Adam(1e-3),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
               .metrics = {"accuracy"}});
  auto train = data::image_dataset_from_directory(folder.string(), {.color_mode = "grayscale",
                                                                    .seed = 42,
                                                                    .image_size = {28, 28},
                                                                    .batch_size = 32,
                                                                    .verbose = false});
  cpp.fit(train.cache().prefetch(data::AUTOTUNE), {.epochs = 1, .verbose = 0, .seed = 42});
  const double cpp_acc = cpp.evaluate(x, y_test, {.batch_size = 500, .verbose = 0}).at("accuracy");
  std::printf(
      "reference CNN, one epoch on 5000 PNGs: keras JSON via lockstep train %.4f, C++-built %.4f "
      "test accuracy (diff %.4f)\n",
      json_acc, cpp_acc, std::abs(json_acc - cpp_acc));
  EXPECT_GT(cpp_acc, 0.6) << "the C++ model did not learn: the comparison would mean nothing";
  EXPECT_NEAR(json_acc, cpp_acc, 0.02);
  EXPECT_EQ(from_json.count_params(), cpp.count_params());
}

// A model trained on the xla backend (issue 22): lockstep_cnn (conv, batch norm, dropout,
// softmax) fit for 8 steps through the CPU PJRT plugin, its predictions made on xla too, then
// saved. keras_interop.py loads it like the others, at a tolerance of 1e-4 ("atol"): Lockstep
// and Keras (JAX) compile different XLA programs for the same arithmetic. Nothing is written
// when the build or the machine has no xla backend.
void write_xla_trained(const fs::path& dir) {
  Model m = lockstep_cnn();
  randomize(m, 900);
  try {
    m.compile({.optimizer = optimizers::Adam(1e-2),
               .loss = losses::SparseCategoricalCrossentropy(),
               .backend = "xla"});
  } catch (const Error& e) {
    std::printf("no model trained on xla: %s\n", e.what());
    return;
  }
  Tensor x = fixed_inputs(Shape{32, 12, 12, 1}, 901);
  std::vector<int32_t> labels(32);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 7) % 5);
  Tensor y = Tensor::from_vector_i32({32}, labels);
  History h = m.fit(x, y, {.batch_size = 8, .epochs = 2, .verbose = 0, .shuffle = false});
  Tensor probe = fixed_inputs(Shape{5, 12, 12, 1}, 902);
  Tensor pred = m.predict(probe);
  std::printf("trained on xla: loss %.4f -> %.4f over 8 steps\n", h.history["loss"].front(),
              h.history["loss"].back());
  m.save((dir / "lockstep_xla_trained.keras").string());
  write_f32(dir / "lockstep_xla_trained.input.f32", probe);
  write_f32(dir / "lockstep_xla_trained.pred.f32", pred);
  std::ofstream(dir / "lockstep_xla_trained.json") << json{
      {"input", shape_json(probe.shape())},
      {"output", shape_json(pred.shape())},
      {"atol", 1e-4}}.dump();
}

}  // namespace

TEST(KerasInterop, BothDirectionsAgainstRealKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -L interop` (tests/interop/run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("keras_interop", /*fresh=*/true);
  // Lockstep -> Keras.
  int seed = 1;
  for (Model* mp :
       {new Model(lockstep_cnn()), new Model(lockstep_functional()),
        new Model(lockstep_augmented()), new Model(lockstep_nested()), new Model(lockstep_layers()),
        new Model(lockstep_extra()), new Model(lockstep_decoder())}) {
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
  write_xla_trained(dir);
  write_lockstep_resume(dir);
  const double fmnist_acc = write_fashion_mnist_model(dir);
  std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                    "/tests/interop/keras_interop.py " + dir.string();
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "Keras did not load Lockstep's files identically (see above)";
  // Keras -> Lockstep.
  for (std::string n : {"small_cnn", "branchy", "nested", "layers", "extra", "decoder"}) {
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
    // The decoder's outputs reach |y| ~ 10 (three transposed convolutions of random weights):
    // 1e-5 relative to its largest output.
    float tol = 1e-5f;
    if (n == "decoder")
      for (float v : want.to_vector()) tol = std::max(tol, 1e-5f * std::abs(v));
    EXPECT_LE(d, tol) << n;
  }
  check_keras_resume(dir);
  check_keras_json(dir);
  if (fmnist_acc < 0) {
    std::printf("Fashion-MNIST not installed: skipping its checks\n");
    return;
  }
  std::ifstream keras_acc_file(dir / "fmnist_keras_accuracy.txt");
  double keras_acc = -1;
  keras_acc_file >> keras_acc;
  ASSERT_GE(keras_acc, 0.0) << "Keras did not evaluate fmnist_lockstep.keras (see above)";
  std::printf("Fashion-MNIST test accuracy: lockstep %.4f, keras %.4f\n", fmnist_acc, keras_acc);
  EXPECT_NEAR(keras_acc, fmnist_acc, 0.001);
  Tensor y_test = data::load_fashion_mnist().y_test;
  check_reference_json(dir, y_test);
}
