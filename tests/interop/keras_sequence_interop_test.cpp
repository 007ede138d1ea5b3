// Interop with real Keras 3 (on JAX) for the sequence-input layers (issue 35): Embedding (with
// and without mask_zero, under a Dense) and Masking. Lockstep writes .keras files that Keras
// loads and predicts identically (1e-5), and loads the ones Keras writes and predicts
// identically (1e-5); an int32 keras.Input goes both ways. The loss of Keras's
// Embedding(mask_zero=True) model, over its unmasked steps only, is Lockstep's too (1e-5). The
// Python half is tests/interop/keras_sequence_interop.py. Runs when LOCKSTEP_INTEROP_PYTHON
// names a python with keras (ctest keras_sequence_interop, label interop, sets it via
// tests/interop/run_keras_interop.sh); skipped otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

namespace {

void write_f32(const fs::path& p, const Tensor& t) {
  Tensor f = t.dtype() == DType::f32 ? t : Tensor::from_vector(t.shape(), t.to_vector());
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(f.raw()), std::streamsize(f.nbytes()));
}

Tensor read_f32(const fs::path& p, const Shape& s) {
  Tensor t = Tensor::zeros(s);
  std::ifstream f(p, std::ios::binary);
  f.read(static_cast<char*>(t.raw()), std::streamsize(t.nbytes()));
  EXPECT_TRUE(f.good()) << p;
  return t;
}

Shape shape_of(const json& j) { return Shape(j.get<std::vector<int64_t>>()); }

Tensor as_i32(const Tensor& t) {
  std::vector<int32_t> v;
  for (float f : t.to_vector()) v.push_back(int32_t(f));
  return Tensor::from_vector_i32(t.shape(), v);
}

void randomize(Model& m, uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : m.weights()) {
    std::vector<float> v(size_t(w->value.numel()));
    for (auto& f : v) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      f = float((x >> 40) % 2001) / 2000.0f - 0.5f;
    }
    w->value.copy_from(Tensor::from_vector(w->value.shape(), v));
  }
}

// Ids [5, 6] in [1, 20) with trailing zeros (row i keeps 6 - i steps).
Tensor padded_ids() {
  std::vector<int32_t> v;
  for (int i = 0; i < 5; ++i)
    for (int t = 0; t < 6; ++t) v.push_back(t < 6 - i ? 1 + (7 * i + 3 * t) % 19 : 0);
  return Tensor::from_vector_i32({5, 6}, v);
}

std::vector<Model> lockstep_models() {
  std::vector<Model> r;
  KTensor a = Input({6}, "ids", DType::i32);
  r.emplace_back(a, Embedding(20, 4)(a), "ls_embedding");
  KTensor b = Input({6}, "ids", DType::i32);
  KTensor h = Dense(3, {.activation = "tanh"})(Embedding(20, 4, {.mask_zero = true})(b));
  r.emplace_back(b, Dense(2)(h), "ls_embedding_mask_dense");
  KTensor c = Input({5, 3}, "x");
  r.emplace_back(c, Dense(2)(Masking(0.0)(c)), "ls_masking");
  return r;
}

void write_lockstep_files(const fs::path& dir) {
  uint64_t seed = 11;
  for (Model& m : lockstep_models()) {
    randomize(m, seed++);
    const bool ids = m.inputs()[0].dtype() == DType::i32;
    Tensor x = padded_ids();
    if (!ids) {
      std::vector<float> v(30);
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = (i / 3) % 4 == 1 ? 0.f : 0.1f * float(i % 7) - 0.3f;
      x = Tensor::from_vector({2, 5, 3}, v);
    }
    Tensor y = m.predict(x);
    const std::string n = m.name();
    m.save((dir / ("lockstep_" + n + ".keras")).string());
    write_f32(dir / ("lockstep_" + n + ".input.f32"), x);
    write_f32(dir / ("lockstep_" + n + ".pred.f32"), y);
    std::ofstream(dir / ("lockstep_" + n + ".json")) << json{
        {"input", x.shape().vec()},
        {"output", y.shape().vec()},
        {"input_dtype", ids ? "int32" : "float32"}}.dump();
  }
}

}  // namespace

TEST(KerasSequenceInterop, EmbeddingAndMaskingBothWays) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -L interop` (tests/interop/run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("keras_sequence_interop", /*fresh=*/true);
  write_lockstep_files(dir);
  const std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                          "/tests/interop/keras_sequence_interop.py " + dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "Keras did not load Lockstep's files identically";
  for (std::string n : {"embedding", "embedding_mask_dense", "masking"}) {
    SCOPED_TRACE(n);
    json meta;
    std::ifstream(dir / ("keras_" + n + ".json")) >> meta;
    Tensor x = read_f32(dir / ("keras_" + n + ".input.f32"), shape_of(meta["input"]));
    if (meta["input_dtype"] == "int32") x = as_i32(x);
    Tensor want = read_f32(dir / ("keras_" + n + ".pred.f32"), shape_of(meta["output"]));
    Model m = load_model((dir / ("keras_" + n + ".keras")).string(), /*compile=*/false);
    EXPECT_EQ(m.inputs()[0].dtype(), meta["input_dtype"] == "int32" ? DType::i32 : DType::f32);
    const auto got = m.predict(x).to_vector(), w = want.to_vector();
    ASSERT_EQ(got.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[i], w[i], 1e-5) << i;
    if (n != "embedding_mask_dense") continue;
    // The loss over the unmasked steps, as Keras's evaluate() computed it.
    m.compile({.optimizer = optimizers::Adam(1e-3), .loss = losses::get("mse")});
    Tensor y = read_f32(dir / ("keras_" + n + ".y.f32"), shape_of(meta["output"]));
    double keras_loss = 0;
    std::ifstream(dir / "keras_masked_loss.txt") >> keras_loss;
    EXPECT_NEAR(m.evaluate(x, y, {.batch_size = 5, .verbose = 0}).at("loss"), keras_loss, 1e-5);
  }
}
