// ONNX export of EinsumDense (Einsum), RMSNormalization, UnitNormalization and Softmax against
// the real onnxruntime (issue 36): a small per-head projection block, onnxruntime's output on
// fixed inputs within 1e-5 of Lockstep's predict and onnx.checker.check_model(full_check=True)
// passing, at the default opset and at 21. Runs when LOCKSTEP_ONNX_PYTHON names a python with
// onnx and onnxruntime (ctest onnx_einsum_interop, label interop, via
// tests/interop/run_onnx_interop.sh); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/onnx/export.h"
#include "onnx_test_models.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

namespace {

void write_f32(const fs::path& p, const Tensor& t) {
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

struct Case {
  std::string name;
  Model model;
  int64_t opset = 17;
};

Model block() {
  KTensor x = Input({5, 8}, "x");
  KTensor h = EinsumDense("btd,dhk->bthk", {-1, 2, 4}, {.bias_axes = "hk"})(x);
  h = EinsumDense("bthk,hkd->btd", {-1, 8}, {.activation = "gelu", .bias_axes = "d"})(h);
  h = RMSNormalization({.epsilon = 1e-5})(h);
  h = EinsumDense("...d,de->...e", {3}, {.activation = "tanh"})(h);
  return Model(x, Softmax()(UnitNormalization()(h)));
}

}  // namespace

TEST(OnnxEinsumInterop, EinsumDenseAndNormalisationsInOnnxRuntime) {
  const char* py = std::getenv("LOCKSTEP_ONNX_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs onnxruntime: run `ctest -L interop` (tests/interop/run_onnx_interop.sh)";
  fs::path dir = test_util::temp_dir("onnx_einsum_interop", /*fresh=*/true);
  std::vector<Case> cs;
  cs.push_back({"einsum_block", block()});
  cs.push_back({"einsum_block_21", block(), 21});
  const Tensor x = onnx_test::fixed_values({3, 5, 8}, 5);
  json manifest = json::array();
  uint64_t seed = 1;
  for (Case& c : cs) {
    onnx_test::randomize(c.model, 1000 * seed++);
    Tensor y = c.model.predict(x, 3);
    onnx::ExportReport r =
        onnx::export_model(c.model, (dir / (c.name + ".onnx")).string(), {.opset = c.opset});
    write_f32(dir / (c.name + ".input.f32"), x);
    write_f32(dir / (c.name + ".expected.f32"), y);
    manifest.push_back({{"name", c.name},
                        {"onnx", c.name + ".onnx"},
                        {"input_name", r.input_names.at(0)},
                        {"input_shape", x.shape().vec()},
                        {"input_dtype", "float32"},
                        {"output_shape", y.shape().vec()}});
  }
  std::ofstream(dir / "manifest.json") << manifest.dump(1);
  const std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                          "/tests/interop/onnx_interop.py " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "onnx_interop.py failed (see above): " << cmd;
  json results = json::parse(std::ifstream(dir / "results.json"));
  for (const Case& c : cs) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(results.contains(c.name));
    const json& r = results[c.name];
    EXPECT_TRUE(r.at("checker_ok").get<bool>()) << r.dump();
    EXPECT_LE(r.at("max_abs_diff").get<double>(), 1e-5) << r.dump();
    EXPECT_GT(r.at("max_abs_output").get<double>(), 1e-3) << "outputs should not be all zero";
  }
}

TEST(OnnxEinsumExport, AMultiAxisSoftmaxIsRefusedNamingTheLayer) {
  KTensor x = Input({5, 8}, "x");
  Model m(x, Softmax({1, 2}, "sm2")(x));
  const std::string e = test_util::error_of([&] {
    onnx::export_model(m, (test_util::temp_dir("onnx_einsum_refuse", true) / "m.onnx").string());
  });
  test_util::expect_has(e, {"Softmax 'sm2'", "several axes"});
}
