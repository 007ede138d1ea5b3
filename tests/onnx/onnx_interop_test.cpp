// ONNX export against the real onnxruntime: each test model (the reference CNN, a ResNet-style
// block with BatchNormalization and a residual Add, a branchy functional model with
// Concatenate, a preprocessing stack, models holding nested models) is exported, and
// onnxruntime's output on fixed inputs agrees with Lockstep's predict to <= 1e-4, with
// onnx.checker.check_model(full_check=True) passing. Runs when LOCKSTEP_ONNX_PYTHON names a
// python with onnx and onnxruntime (ctest onnx_interop, label interop, via
// tests/interop/run_onnx_interop.sh); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/onnx/export.h"
#include "onnx_test_models.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

void write_f32(const fs::path& p, const Tensor& t) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

struct Case {
  std::string name;
  Model model;
  onnx::ExportOptions options;
};

}  // namespace

TEST(OnnxInterop, OnnxRuntimeAgreesWithPredict) {
  const char* py = std::getenv("LOCKSTEP_ONNX_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs onnxruntime: run `ctest -L interop` (tests/interop/run_onnx_interop.sh)";
  fs::path dir = test_util::temp_dir("onnx_interop", /*fresh=*/true);
  std::vector<Case> cases;
  cases.push_back({"reference_cnn", reference_cnn(), {}});
  cases.push_back({"resnet_block", onnx_test::resnet_block(), {}});
  cases.push_back({"resnet_block_unfolded", onnx_test::resnet_block(), {.fold_batch_norm = false}});
  cases.push_back({"branchy", onnx_test::branchy(), {}});
  cases.push_back({"branchy_opset21", onnx_test::branchy(), {.opset = 21}});
  cases.push_back({"preprocessing", onnx_test::preprocessing_stack(), {}});
  cases.push_back({"inverted_residual", onnx_test::inverted_residual(), {}});
  cases.push_back({"extra_layers", onnx_test::extra_layers(), {}});
  cases.push_back({"extra_layers_opset21", onnx_test::extra_layers(), {.opset = 21}});
  cases.push_back({"decoder", onnx_test::decoder(), {}});
  // Nested models, inlined: a Sequential (with a BatchNormalization) in a functional model, a
  // functional block holding a Sequential in a Sequential, one nested model called twice.
  cases.push_back({"nested_sequential_in_functional", onnx_test::sequential_in_functional(), {}});
  cases.push_back({"nested_functional_in_sequential", onnx_test::functional_in_sequential(), {}});
  cases.push_back({"nested_functional_in_sequential_unfolded",
                   onnx_test::functional_in_sequential(),
                   {.fold_batch_norm = false}});
  cases.push_back({"nested_shared", onnx_test::shared_nested(), {}});
  json manifest = json::array();
  uint64_t seed = 1;
  for (Case& c : cases) {
    onnx_test::randomize(c.model, 1000 * seed);
    Shape s = c.model.inputs()[0].shape();
    s[0] = 3;
    Tensor x = onnx_test::fixed_values(s, seed++);
    Tensor y = c.model.predict(x, 3);
    onnx::ExportReport r =
        onnx::export_model(c.model, (dir / (c.name + ".onnx")).string(), c.options);
    write_f32(dir / (c.name + ".input.f32"), x);
    write_f32(dir / (c.name + ".expected.f32"), y);
    manifest.push_back({{"name", c.name},
                        {"onnx", c.name + ".onnx"},
                        {"input_name", r.input_names.at(0)},
                        {"input_shape", x.shape().vec()},
                        {"output_shape", y.shape().vec()}});
  }
  std::ofstream(dir / "manifest.json") << manifest.dump(1);
  const std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                          "/tests/interop/onnx_interop.py " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "onnx_interop.py failed (see above): " << cmd;
  json results = json::parse(std::ifstream(dir / "results.json"));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(results.contains(c.name));
    const json& r = results[c.name];
    EXPECT_TRUE(r.at("checker_ok").get<bool>()) << r.dump();
    EXPECT_EQ(r.at("output_shape").get<std::vector<int64_t>>(),
              c.model.outputs()[0].shape().with_dim(0, 3).vec());
    EXPECT_LE(r.at("max_abs_diff").get<double>(), 1e-4) << r.dump();
    EXPECT_GT(r.at("max_abs_output").get<double>(), 1e-3) << "outputs should not be all zero";
  }
}
