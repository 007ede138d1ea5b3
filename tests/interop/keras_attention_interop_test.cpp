// The attention layers against real Keras 3 (on JAX), both ways (issue 36): Keras builds one
// small model per case of tests/interop/keras_attention_interop.py (MultiHeadAttention with and
// without a causal mask, with an attention_mask, cross-attention with its own key and lengths,
// returning the scores, after a masked Embedding; GroupQueryAttention; Attention; a small
// transformer classifier), with random weights and biases, and saves it; Lockstep loads each
// .keras file and predicts within 1e-4 of Keras on the same inputs, on the reference and cpu
// backends, then saves it again, and Keras loads Lockstep's file and predicts within 1e-4 of
// Lockstep. A transformer classifier Lockstep builds itself goes to Keras the same way.
// Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras (ctest keras_attention_interop,
// label interop, through tests/interop/run_keras_interop.sh); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/lockstep.h"
#include "lockstep/nn/attention.h"
#include "lockstep/nn/layers_1d.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

namespace {

const char* const kCases[] = {"mha_self",
                              "mha_causal",
                              "mha_attention_mask",
                              "mha_cross",
                              "mha_scores",
                              "mha_masked",
                              "gqa",
                              "gqa_causal",
                              "attention_dot",
                              "attention_scale_causal",
                              "attention_masked",
                              "transformer"};

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

Shape parse_shape(const std::string& line) {
  std::istringstream in(line);
  std::vector<int64_t> d;
  for (int64_t v; in >> v;) d.push_back(v);
  return Shape(d);
}

std::vector<Tensor> read_inputs(const fs::path& dir, const std::string& name) {
  std::ifstream f(dir / (name + ".inputs"));
  std::vector<Tensor> xs;
  std::string line;
  for (int k = 0; std::getline(f, line); ++k)
    xs.push_back(read_f32(dir / (name + ".in" + std::to_string(k) + ".f32"), parse_shape(line)));
  return xs;
}

Shape read_shape(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return parse_shape(line);
}

ModelData data_of(const std::vector<Tensor>& xs) {
  return xs.size() == 1 ? ModelData(xs[0]) : ModelData(xs);
}

}  // namespace

TEST(KerasAttentionInterop, AttentionLayersBothWaysAgainstRealKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -R keras_attention_interop` "
                    "(tests/interop/run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("keras_attention_interop", /*fresh=*/true);
  const std::string script =
      std::string(py) + " " + LOCKSTEP_SOURCE_DIR + "/tests/interop/keras_attention_interop.py ";
  ASSERT_EQ(std::system((script + "make " + dir.string()).c_str()), 0) << "Keras failed (above)";
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const std::vector<Tensor> xs = read_inputs(dir, name);
    const Shape ys = read_shape(dir / (std::string(name) + ".shape"));
    const Tensor want = read_f32(dir / (std::string(name) + ".out.f32"), ys);
    Model m = load_model((dir / (std::string(name) + ".keras")).string(), /*compile=*/false);
    for (const char* backend : {"reference", "cpu"}) {
      m.compile(
          {.optimizer = optimizers::get("sgd"), .loss = losses::get("mse"), .backend = backend});
      const float d = test_util::max_abs_diff(m.predict(data_of(xs)), want);
      std::printf("%s (%s): lockstep loads keras's file, max abs diff %.3g\n", name, backend, d);
      EXPECT_LE(d, 1e-4f) << backend;
    }
    write_f32(dir / (std::string(name) + ".lockstep.out.f32"), m.predict(data_of(xs)));
    m.save((dir / (std::string(name) + ".lockstep.keras")).string());
  }
  EXPECT_EQ(std::system((script + "check " + dir.string()).c_str()), 0)
      << "Keras did not load Lockstep's files or predicted differently (above)";
}

// A transformer classifier Lockstep builds: Keras loads it and predicts what Lockstep predicts.
TEST(KerasAttentionInterop, LockstepBuiltTransformerLoadsInKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "needs Keras: run `ctest -R keras_attention_interop`";
  fs::path dir = test_util::temp_dir("keras_attention_interop_built", /*fresh=*/true);
  reset_layer_names();
  const uint64_t seed = random_seed();
  set_random_seed(3);
  KTensor ids = Input({6}, "in0");
  // No mask_zero: Keras's MultiHeadAttention clears its inputs' masks, after which Keras's
  // GroupQueryAttention below attends unmasked while Lockstep's would apply the mask (the masked
  // cases are the Keras-made mha_masked and attention_masked).
  KTensor e = Embedding(20, 16)(ids);
  KTensor a = attend(MultiHeadAttention(2, 8), e, e, {.use_causal_mask = true});
  KTensor h = LayerNormalization({.epsilon = 1e-6})(Add()({e, a}));
  KTensor f = Dense(16)(Dense(32, {.activation = "relu"})(h));
  h = LayerNormalization({.epsilon = 1e-6})(Add()({h, f}));
  KTensor g = attend(GroupQueryAttention(4, 4, 2), h, h);
  KTensor y = Dense(3, {.name = "head"})(GlobalAveragePooling1D()(g));
  Model m(ids, y, "transformer_built");
  Tensor x = Tensor::zeros(Shape{3, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 7 + 3) % 20);
  x.data<float>()[5] = 0;  // padding at the end of row 0
  write_f32(dir / "built.in0.f32", x);
  std::ofstream(dir / "built.inputs") << "3 6\n";
  write_f32(dir / "built.lockstep.out.f32", m.predict(x));
  m.save((dir / "built.lockstep.keras").string());
  set_random_seed(seed);
  const std::string check = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                            "/tests/interop/keras_attention_interop.py check " + dir.string() +
                            " built";
  EXPECT_EQ(std::system(check.c_str()), 0) << "Keras did not match Lockstep (above)";
}
