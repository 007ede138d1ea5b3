// EinsumDense, RMSNormalization, UnitNormalization, Softmax and AdditiveAttention against real
// Keras 3 (on JAX), both ways (issue 36): Keras builds one small model per case of
// tests/interop/keras_einsum_interop.py with random weights and saves it; Lockstep loads each
// .keras file and predicts within 1e-4 of Keras on the same batch, on the reference and cpu
// backends, then saves it again, and Keras loads Lockstep's file and predicts within 1e-4 of
// Lockstep. A model Lockstep builds itself (EinsumDense heads, RMSNormalization, Softmax,
// AdditiveAttention) goes to Keras the same way.
// Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras (ctest keras_einsum_interop,
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

constexpr int64_t kBatch = 3, kT = 5, kF = 6;

const char* const kCases[] = {"einsum_dense",
                              "einsum_dense_heads",
                              "einsum_dense_ellipsis",
                              "einsum_dense_no_bias",
                              "einsum_dense_out_proj",
                              "rms_norm",
                              "rms_norm_eps",
                              "unit_norm",
                              "unit_norm_axes",
                              "softmax",
                              "softmax_axes",
                              "additive_attention",
                              "additive_attention_dropout",
                              "additive_attention_key",
                              "additive_attention_masked"};

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

Shape read_shape(const fs::path& p) {
  std::ifstream f(p);
  std::vector<int64_t> d;
  for (int64_t v; f >> v;) d.push_back(v);
  return Shape(d);
}

std::string script(const char* py) {
  return std::string(py) + " " + LOCKSTEP_SOURCE_DIR + "/tests/interop/keras_einsum_interop.py ";
}

}  // namespace

TEST(KerasEinsumInterop, EinsumNormAndAttentionLayersBothWaysAgainstRealKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -R keras_einsum_interop` "
                    "(tests/interop/run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("keras_einsum_interop", /*fresh=*/true);
  ASSERT_EQ(std::system((script(py) + "make " + dir.string()).c_str()), 0)
      << "Keras failed (above)";
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Tensor x = read_f32(dir / (std::string(name) + ".in.f32"), Shape{kBatch, kT, kF});
    const Shape ys = read_shape(dir / (std::string(name) + ".shape"));
    const Tensor want = read_f32(dir / (std::string(name) + ".out.f32"), ys);
    Model m = load_model((dir / (std::string(name) + ".keras")).string(), /*compile=*/false);
    for (const char* backend : {"reference", "cpu"}) {
      m.compile(
          {.optimizer = optimizers::get("sgd"), .loss = losses::get("mse"), .backend = backend});
      const float d = test_util::max_abs_diff(m.predict(x), want);
      std::printf("%s (%s): lockstep loads keras's file, max abs diff %.3g\n", name, backend, d);
      EXPECT_LE(d, 1e-4f) << backend;
    }
    write_f32(dir / (std::string(name) + ".lockstep.out.f32"), m.predict(x));
    m.save((dir / (std::string(name) + ".lockstep.keras")).string());
  }
  EXPECT_EQ(std::system((script(py) + "check " + dir.string()).c_str()), 0)
      << "Keras did not load Lockstep's files or predicted differently (above)";
}

// A model Lockstep builds: Keras loads it and predicts what Lockstep predicts.
TEST(KerasEinsumInterop, LockstepBuiltModelLoadsInKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "needs Keras: run `ctest -R keras_einsum_interop`";
  fs::path dir = test_util::temp_dir("keras_einsum_interop_built", /*fresh=*/true);
  reset_layer_names();
  const uint64_t seed = random_seed();
  set_random_seed(3);
  KTensor in = Input({kT, kF}, "x");
  KTensor h = EinsumDense("btd,dhk->bthk", {-1, 2, 3}, {.bias_axes = "hk"})(in);
  h = EinsumDense("bthk,hkd->btd", {-1, 4}, {.activation = "gelu", .bias_axes = "d"})(h);
  h = RMSNormalization({.epsilon = 1e-5})(h);
  KTensor v = Dense(4, {.name = "v"})(in);
  KTensor a = AdditiveAttention()({h, v});
  KTensor s = Softmax()(a);
  Model m(in, UnitNormalization({1, 2})(s), "built");
  const Tensor x = test_util::lcg_inputs(Shape{kBatch, kT, kF}, 11);
  write_f32(dir / "built.in.f32", x);
  write_f32(dir / "built.lockstep.out.f32", m.predict(x));
  m.save((dir / "built.lockstep.keras").string());
  set_random_seed(seed);
  const std::string check = std::string(py) + " -c \"import sys; sys.path.insert(0, '" +
                            LOCKSTEP_SOURCE_DIR +
                            "/tests/interop'); import keras_einsum_interop as k; "
                            "sys.exit(k.check(sys.argv[1], ['built']))\" " +
                            dir.string();
  EXPECT_EQ(std::system(check.c_str()), 0) << "Keras did not match Lockstep (above)";
}
