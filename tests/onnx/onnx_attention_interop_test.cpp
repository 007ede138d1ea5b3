// ONNX export of the attention layers against the real onnxruntime (issue 36): a transformer
// classifier (Embedding, causal MultiHeadAttention + residual + LayerNormalization, a Dense
// feed-forward block, GroupQueryAttention, GlobalAveragePooling1D, Dense) and Attention with a
// scale weight and a causal mask, as MatMul + Softmax graphs; onnxruntime's output on fixed
// inputs agrees with Lockstep's predict to <= 1e-4 and onnx.checker.check_model(full_check=True)
// passes. Runs when LOCKSTEP_ONNX_PYTHON names a python with onnx and onnxruntime (ctest
// onnx_attention_interop, label interop, via tests/interop/run_onnx_interop.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/nn/attention.h"
#include "lockstep/nn/layers_1d.h"
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
};

std::vector<Case> cases() {
  std::vector<Case> r;
  KTensor ids = Input({7}, "ids", DType::i32);
  KTensor e = Embedding(30, 16)(ids);
  KTensor a = attend(MultiHeadAttention(2, 8), e, e, {.use_causal_mask = true});
  KTensor h = LayerNormalization({.epsilon = 1e-6})(Add()({e, a}));
  KTensor f = Dense(16)(Dense(32, {.activation = "relu"})(h));
  h = LayerNormalization({.epsilon = 1e-6})(Add()({h, f}));
  h = attend(GroupQueryAttention(4, 4, 2), h, h);
  KTensor y = Dense(3)(GlobalAveragePooling1D()(h));
  std::vector<int32_t> v;
  for (int i = 0; i < 3 * 7; ++i) v.push_back((5 * i + 1) % 30);
  r.push_back({"transformer", Model(ids, y), Tensor::from_vector_i32({3, 7}, v)});
  KTensor q = Input({5, 6}, "q");
  KTensor o = attend(Attention({.use_scale = true}), q, q, {.use_causal_mask = true});
  r.push_back({"attention_dot", Model(q, Dense(2)(o)), onnx_test::fixed_values({3, 5, 6}, 3)});
  return r;
}

}  // namespace

TEST(OnnxAttentionInterop, TransformerAsMatMulSoftmaxInOnnxRuntime) {
  const char* py = std::getenv("LOCKSTEP_ONNX_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs onnxruntime: run `ctest -L interop` (tests/interop/run_onnx_interop.sh)";
  fs::path dir = test_util::temp_dir("onnx_attention_interop", /*fresh=*/true);
  std::vector<Case> cs = cases();
  json manifest = json::array();
  uint64_t seed = 1;
  for (Case& c : cs) {
    onnx_test::randomize(c.model, 1000 * seed++);
    Tensor y = c.model.predict(c.x, 3);
    onnx::ExportReport r = onnx::export_model(c.model, (dir / (c.name + ".onnx")).string());
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
    EXPECT_LE(r.at("max_abs_diff").get<double>(), 1e-4) << r.dump();
    EXPECT_GT(r.at("max_abs_output").get<double>(), 1e-3) << "outputs should not be all zero";
  }
}
