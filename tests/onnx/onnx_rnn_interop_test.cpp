// LSTM and GRU exported as ONNX's LSTM and GRU operators, run in the real onnxruntime: each
// model's output on fixed inputs agrees with Lockstep's predict to <= 1e-4 and passes
// onnx.checker (full_check), through tests/interop/onnx_interop.py as the other ONNX models do
// (ctest onnx_interop). Covers both GRU forms (linear_before_reset), go_backwards (ONNX's
// "reverse", flipped back to Keras's order), return_sequences and a stack ending in Dense. A
// masked input and Bidirectional are refused by name (checked without onnxruntime).
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

Model rnn_model(const std::string& name, const std::function<KTensor(KTensor)>& body) {
  KTensor x = L::Input({7, 3}, "x");
  return Model(x, body(x), name);
}

std::vector<std::pair<std::string, Model>> rnn_models() {
  std::vector<std::pair<std::string, Model>> m;
  m.emplace_back("lstm_seq", rnn_model("lstm_seq", [](KTensor x) {
                   return L::LSTM(4, {.return_sequences = true})(x);
                 }));
  m.emplace_back("lstm_backwards", rnn_model("lstm_backwards", [](KTensor x) {
                   return L::LSTM(4, {.return_sequences = true, .go_backwards = true})(x);
                 }));
  m.emplace_back("gru_last", rnn_model("gru_last", [](KTensor x) { return L::GRU(5)(x); }));
  m.emplace_back(
      "gru_reset_before_backwards", rnn_model("gru_reset_before_backwards", [](KTensor x) {
        return L::GRU(3, {.return_sequences = true, .go_backwards = true, .reset_after = false})(x);
      }));
  m.emplace_back("stacked", rnn_model("stacked", [](KTensor x) {
                   KTensor h = L::LSTM(4, {.return_sequences = true})(x);
                   return L::Dense(2)(L::GRU(3, {.go_backwards = true})(h));
                 }));
  return m;
}

void write_f32(const fs::path& p, const Tensor& t) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

}  // namespace

TEST(OnnxInterop, RecurrentLayersAgreeWithOnnxRuntime) {
  const char* py = std::getenv("LOCKSTEP_ONNX_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs onnxruntime: run `ctest -L interop` (tests/interop/run_onnx_interop.sh)";
  fs::path dir = test_util::temp_dir("onnx_rnn_interop", /*fresh=*/true);
  auto models = rnn_models();
  json manifest = json::array();
  uint64_t seed = 40;
  for (auto& [name, model] : models) {
    onnx_test::randomize(model, 1000 * seed);
    Tensor x = onnx_test::fixed_values(Shape{3, 7, 3}, seed++);
    Tensor y = model.predict(x, 3);
    onnx::ExportReport r = onnx::export_model(model, (dir / (name + ".onnx")).string(), {});
    write_f32(dir / (name + ".input.f32"), x);
    write_f32(dir / (name + ".expected.f32"), y);
    manifest.push_back({{"name", name},
                        {"onnx", name + ".onnx"},
                        {"input_name", r.input_names.at(0)},
                        {"input_shape", x.shape().vec()},
                        {"output_shape", y.shape().vec()}});
  }
  std::ofstream(dir / "manifest.json") << manifest.dump(1);
  const std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                          "/tests/interop/onnx_interop.py " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "onnx_interop.py failed (see above): " << cmd;
  json results = json::parse(std::ifstream(dir / "results.json"));
  for (auto& [name, model] : models) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(results.contains(name));
    const json& r = results[name];
    EXPECT_TRUE(r.at("checker_ok").get<bool>()) << r.dump();
    EXPECT_LE(r.at("max_abs_diff").get<double>(), 1e-4) << r.dump();
    EXPECT_GT(r.at("max_abs_output").get<double>(), 1e-3) << "outputs should not be all zero";
  }
}

TEST(OnnxRecurrentExport, RefusesBidirectionalAndSimpleRnnByName) {
  fs::path dir = test_util::temp_dir("onnx_rnn_refusals", /*fresh=*/true);
  Model bi = rnn_model("bi", [](KTensor x) { return L::Bidirectional(L::LSTM(2))(x); });
  test_util::expect_has(
      test_util::error_of([&] { onnx::export_model(bi, (dir / "bi.onnx").string(), {}); }),
      {"Bidirectional"});
  Model s = rnn_model("s", [](KTensor x) { return L::SimpleRNN(2)(x); });
  test_util::expect_has(
      test_util::error_of([&] { onnx::export_model(s, (dir / "s.onnx").string(), {}); }),
      {"SimpleRNN"});
}
