// ONNX export of the sequence-input layers against the real onnxruntime (issue 35): Embedding
// as Gather (int32 ids in, with and without mask_zero, under a Dense with tanh) and Masking;
// onnxruntime's output on fixed inputs agrees with Lockstep's predict to <= 1e-5 and
// onnx.checker.check_model(full_check=True) passes, at the default opset and at 21. Runs when
// LOCKSTEP_ONNX_PYTHON names a python with onnx and onnxruntime (ctest onnx_sequence_interop,
// label interop, via tests/interop/run_onnx_interop.sh); skipped otherwise.
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
  Tensor f = t.dtype() == DType::f32 ? t : Tensor::from_vector(t.shape(), t.to_vector());
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(f.raw()), std::streamsize(f.nbytes()));
}

struct Case {
  std::string name;
  Model model;
  Tensor x;
  int64_t opset = 17;
};

Tensor ids() {
  std::vector<int32_t> v;
  for (int i = 0; i < 3 * 7; ++i) v.push_back(i % 7 > 4 ? 0 : (5 * i + 1) % 30);
  return Tensor::from_vector_i32({3, 7}, v);
}

std::vector<Case> cases() {
  std::vector<Case> r;
  KTensor a = Input({7}, "ids", DType::i32);
  r.push_back({"embedding", Model(a, Embedding(30, 5)(a)), ids()});
  KTensor b = Input({7}, "ids", DType::i32);
  KTensor h = Embedding(30, 5, {.mask_zero = true})(b);
  r.push_back({"embedding_mask_dense", Model(b, Dense(4, {.activation = "tanh"})(h)), ids(), 21});
  KTensor c = Input({4, 3}, "x");
  Tensor x = onnx_test::fixed_values({3, 4, 3}, 5);
  for (int f = 0; f < 3; ++f) x.data<float>()[3 + f] = 0.f, x.data<float>()[30 + f] = 0.f;
  r.push_back({"masking", Model(c, Dense(2)(Masking(0.0)(c))), x});
  return r;
}

}  // namespace

TEST(OnnxSequenceInterop, EmbeddingAsGatherAndMaskingInOnnxRuntime) {
  const char* py = std::getenv("LOCKSTEP_ONNX_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs onnxruntime: run `ctest -L interop` (tests/interop/run_onnx_interop.sh)";
  fs::path dir = test_util::temp_dir("onnx_sequence_interop", /*fresh=*/true);
  std::vector<Case> cs = cases();
  json manifest = json::array();
  uint64_t seed = 1;
  for (Case& c : cs) {
    onnx_test::randomize(c.model, 1000 * seed++);
    Tensor y = c.model.predict(c.x, 3);
    onnx::ExportReport r =
        onnx::export_model(c.model, (dir / (c.name + ".onnx")).string(), {.opset = c.opset});
    write_f32(dir / (c.name + ".input.f32"), c.x);
    write_f32(dir / (c.name + ".expected.f32"), y);
    manifest.push_back({{"name", c.name},
                        {"onnx", c.name + ".onnx"},
                        {"input_name", r.input_names.at(0)},
                        {"input_shape", c.x.shape().vec()},
                        {"input_dtype", c.x.dtype() == DType::i32 ? "int32" : "float32"},
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
