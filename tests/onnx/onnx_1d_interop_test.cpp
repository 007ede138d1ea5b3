// ONNX export of the 1D layers against the real onnxruntime (tests/interop/onnx_interop.py, as
// onnx_interop_test.cpp): Conv1D (valid, same with strides and groups, causal with dilation),
// MaxPooling1D, AveragePooling1D (same), GlobalAveragePooling1D / GlobalMaxPooling1D (keepdims
// too), ZeroPadding1D, Permute and SpatialDropout1D export, pass onnx.checker and agree with
// Lockstep's predict to <= 1e-4 at opsets 17 and 21.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/onnx/export.h"
#include "onnx_test_models.h"
#include "test_util.h"

using namespace lockstep;
namespace L = lockstep::layers;
namespace fs = std::filesystem;

namespace {

Model conv1d_stack() {
  return Sequential(
      {L::Input({20, 4}),
       L::Conv1D(6, 3, {.padding = "causal", .dilation_rate = 2, .activation = "relu"}),
       L::Conv1D(4, 3, {.strides = 2, .padding = "same", .groups = 2}), L::MaxPooling1D(2),
       L::AveragePooling1D(2, {.strides = 1, .padding = "same"}), L::ZeroPadding1D({1, 2}),
       L::SpatialDropout1D(0.2), L::Conv1D(5, 2, {.activation = "tanh"}),
       L::GlobalAveragePooling1D(), L::Dense(3)});
}

Model pools_and_permute() {
  KTensor x = L::Input({9, 3});
  KTensor a = L::GlobalMaxPooling1D(true)(L::Conv1D(4, 2, {.use_bias = false})(x));  // [N, 1, 4]
  KTensor p = L::Permute({2, 1})(x);                                                 // [N, 3, 9]
  KTensor b = L::GlobalAveragePooling1D()(L::MaxPooling1D(3, {.strides = 2})(p));    // [N, 9]
  KTensor m = L::Concatenate()({L::Flatten()(a), b});
  return Model(x, L::Dense(2)(m));
}

void write_f32(const fs::path& p, const Tensor& t) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

}  // namespace

TEST(OnnxInterop, The1DLayersAgreeWithOnnxRuntime) {
  const char* py = std::getenv("LOCKSTEP_ONNX_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs onnxruntime: run `ctest -L interop` (tests/interop/run_onnx_interop.sh)";
  const fs::path dir = test_util::temp_dir("onnx_1d_interop", /*fresh=*/true);
  struct Case {
    std::string name;
    Model model;
    onnx::ExportOptions options;
  };
  std::vector<Case> cases;
  cases.push_back({"conv1d_stack", conv1d_stack(), {}});
  cases.push_back({"conv1d_stack_opset21", conv1d_stack(), {.opset = 21}});
  cases.push_back({"pools_and_permute", pools_and_permute(), {}});
  json manifest = json::array();
  uint64_t seed = 1;
  for (Case& c : cases) {
    onnx_test::randomize(c.model, 1000 * seed);
    Shape s = c.model.inputs()[0].shape();
    s[0] = 3;
    const Tensor x = onnx_test::fixed_values(s, seed++);
    const Tensor y = c.model.predict(x, 3);
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
  const json results = json::parse(std::ifstream(dir / "results.json"));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(results.contains(c.name));
    const json& r = results[c.name];
    EXPECT_TRUE(r.at("checker_ok").get<bool>()) << r.dump();
    EXPECT_LE(r.at("max_abs_diff").get<double>(), 1e-4) << r.dump();
    EXPECT_GT(r.at("max_abs_output").get<double>(), 1e-3) << "outputs should not be all zero";
  }
}
