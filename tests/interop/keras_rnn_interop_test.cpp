// The recurrent layers against real Keras 3 (on JAX), both ways (issue 35): Keras builds one
// small model per case of tests/interop/keras_rnn_interop.py (LSTM, GRU with reset_after true
// and false, SimpleRNN, Bidirectional with every merge mode; return_sequences, return_state,
// go_backwards), with random weights and biases, and saves it; Lockstep loads each .keras file
// and predicts within 1e-4 of Keras on the same batch, on the reference and cpu backends, then
// saves it again, and Keras loads Lockstep's file and predicts within 1e-4 of Lockstep. A model
// Lockstep builds itself (a Bidirectional LSTM classifier) goes to Keras the same way.
// Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras (ctest keras_rnn_interop, label
// interop, through tests/interop/run_keras_interop.sh); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kBatch = 4, kT = 6, kF = 3;

const char* const kCases[] = {"lstm_seq",
                              "lstm_state",
                              "lstm_backwards",
                              "lstm_no_bias",
                              "gru",
                              "gru_reset_before",
                              "gru_state",
                              "gru_state_h",
                              "simple_rnn",
                              "simple_rnn_relu",
                              "bidi_concat",
                              "bidi_sum",
                              "bidi_mul",
                              "bidi_ave",
                              "bidi_none",
                              "bidi_state",
                              "bidi_gru_reset_before",
                              "stacked"};

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

}  // namespace

TEST(KerasRnnInterop, RecurrentLayersBothWaysAgainstRealKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -R keras_rnn_interop` "
                    "(tests/interop/run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("keras_rnn_interop", /*fresh=*/true);
  const std::string script =
      std::string(py) + " " + LOCKSTEP_SOURCE_DIR + "/tests/interop/keras_rnn_interop.py ";
  ASSERT_EQ(std::system((script + "make " + dir.string()).c_str()), 0) << "Keras failed (above)";
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
  EXPECT_EQ(std::system((script + "check " + dir.string()).c_str()), 0)
      << "Keras did not load Lockstep's files or predicted differently (above)";
}

// A model Lockstep builds: Keras loads it and predicts what Lockstep predicts.
TEST(KerasRnnInterop, LockstepBuiltBidirectionalLstmLoadsInKeras) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "needs Keras: run `ctest -R keras_rnn_interop`";
  fs::path dir = test_util::temp_dir("keras_rnn_interop_built", /*fresh=*/true);
  reset_layer_names();
  const uint64_t seed = random_seed();
  set_random_seed(3);
  KTensor in = Input({kT, kF}, "x");
  KTensor h = Bidirectional(LSTM(4, {.return_sequences = true}))(in);
  h = GRU(3, {.reset_after = false})(h);
  Model m(in, Dense(2, {.name = "head"})(h), "built");
  const Tensor x = test_util::lcg_inputs(Shape{kBatch, kT, kF}, 11);
  write_f32(dir / "built.in.f32", x);
  write_f32(dir / "built.lockstep.out.f32", m.predict(x));
  m.save((dir / "built.lockstep.keras").string());
  set_random_seed(seed);
  const std::string check =
      std::string(py) +
      " -c \"import os, sys, numpy as np; "
      "os.environ.setdefault('KERAS_BACKEND', 'jax'); import keras; "
      "d = sys.argv[1]; m = keras.saving.load_model(d + '/built.lockstep.keras'); "
      "x = np.fromfile(d + '/built.in.f32', np.float32).reshape(4, 6, 3); "
      "w = np.fromfile(d + '/built.lockstep.out.f32', np.float32); "
      "e = np.max(np.abs(m.predict(x, verbose=0).reshape(-1) - w)); "
      "print('keras loads the lockstep-built model, max abs diff', e); "
      "sys.exit(0 if e <= 1e-4 else 1)\" " +
      dir.string();
  EXPECT_EQ(std::system(check.c_str()), 0) << "Keras did not match Lockstep (above)";
}
