// A .keras file saved under ModelParallel loads in real Keras 3 (on JAX, with keras-hub): the
// small GPT of examples/gpt_model.h trains 4 Adam steps under ModelParallel on a 2x2 mesh of the
// PJRT CPU plugin (gpt_layout_map: attention kernels split on their heads, feed-forward kernels on
// the model axis), so each device holds shards of the weights and of Adam's slots; save gathers
// them into one ordinary .keras file. Keras loads it (weights, optimizer step and slots) and
// predicts within 1e-4 of Lockstep's prediction under the distribution; Keras saves it again, and
// Lockstep loads Keras's file under ModelParallel on a (model, batch) mesh and predicts within
// 1e-4 of Keras.
// Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras-hub (ctest keras_mesh_interop,
// label interop, through tests/interop/run_keras_interop.sh) and the build has the xla backend;
// skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../../examples/gpt_model.h"
#include "lockstep/distribute/distribution.h"
#include "lockstep/distribute/xla_strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ld = lockstep::distribution;
namespace fs = std::filesystem;

namespace {

void write_raw(const fs::path& p, const Tensor& t) {
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

// Removes the process's distribution when the test ends, passed or not.
struct DistributionGuard {
  explicit DistributionGuard(const ld::Distribution& d) { ld::set_distribution(d); }
  ~DistributionGuard() { ld::clear_distribution(); }
};

}  // namespace

TEST(KerasMeshInterop, AGptSavedUnderModelParallelLoadsInKerasAndBack) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs Keras: run `ctest -L interop` (tests/interop/run_keras_interop.sh)";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer build: the PJRT plugin is not instrumented";
#endif
  try {
    distribute::XlaClusterResolver::connect("cpu", 4, false);
  } catch (const Error& e) {
    GTEST_SKIP() << "no PJRT CPU plugin with 4 devices (run scripts/setup_xla.sh): " << e.what();
  }
  const fs::path dir = test_util::temp_dir("keras_mesh_interop", /*fresh=*/true);
  const GptConfig c = gpt_preset("tiny");
  const std::string text = test_util::read_text_file(std::string(tools::kFortunesDir) + "/science");
  const auto [x, y] = byte_windows(text, 32, c.seq_len, true, 5);
  const Tensor ids = x.slice(0, 4);
  write_raw(dir / "ids.i32", ids);
  {
    std::ofstream(dir / "meta.json")
        << "{\"batch\": 4, \"seq_len\": " << c.seq_len << ", \"steps\": 4}";
  }
  Tensor mine;
  {
    DistributionGuard guard(
        ld::ModelParallel(gpt_layout_map(ld::DeviceMesh({2, 2}, {"batch", "model"})), "batch"));
    reset_layer_names();
    set_random_seed(31);
    Model m = gpt_model(c);
    m.compile({.optimizer = optimizers::Adam(3e-3),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
               .backend = "xla"});
    m.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
    m.save((dir / "gpt_model_parallel.keras").string());
    mine = m.predict(ids, {.batch_size = 4});
  }
  write_raw(dir / "lockstep.pred.f32", mine);
  const std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                          "/tests/interop/keras_mesh_interop.py " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "Keras did not load the ModelParallel file (above)";
  // Keras's file back into Lockstep, under another mesh: the axes swapped, so each shard lives
  // on other devices than it trained on (the tiny GPT's 2 heads do not split 4 ways).
  const Tensor keras_pred = read_f32(dir / "keras.pred.f32", mine.shape());
  DistributionGuard guard(
      ld::ModelParallel(gpt_layout_map(ld::DeviceMesh({2, 2}, {"model", "batch"})), "batch"));
  Model back = load_model((dir / "keras_resaved.keras").string(), false);
  CompileConfig config;
  config.backend = "xla";
  back.compile(config);
  const float d = test_util::max_abs_diff(back.predict(ids, {.batch_size = 4}), keras_pred);
  std::printf(
      "lockstep loads keras's file under ModelParallel (model=2, batch=2): max abs diff "
      "%.3g\n",
      d);
  EXPECT_LE(d, 1e-4f);
}
