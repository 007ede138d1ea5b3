// ONNX export without Python: the files pass the ONNX library's own checker and shape
// inference (libonnx), hold the nodes the header promises (layout Transposes, BatchNorm folded
// or kept, training-only layers gone, the folded numbers; nested models inlined under their
// names, weights of a model called twice stored once), and bad layers or options are errors
// naming them. Numbers against onnxruntime: tests/onnx/onnx_interop_test.cpp.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lockstep/onnx/export.h"
#include "onnx_test_models.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;
namespace lsx = lockstep::onnx;

namespace {

::onnx::ModelProto exported(const Network& m, lsx::ExportOptions o = {},
                            lsx::ExportReport* report = nullptr) {
  ::onnx::ModelProto proto;
  EXPECT_TRUE(proto.ParseFromString(lsx::export_model_to_bytes(m, o, report)));
  return proto;
}

std::vector<std::string> op_types(const ::onnx::ModelProto& p) {
  std::vector<std::string> ops;
  for (const auto& n : p.graph().node()) ops.push_back(n.op_type());
  return ops;
}

int count(const std::vector<std::string>& v, const std::string& x) {
  return int(std::count(v.begin(), v.end(), x));
}

const ::onnx::TensorProto& initializer(const ::onnx::ModelProto& p, const std::string& name) {
  for (const auto& t : p.graph().initializer())
    if (t.name() == name) return t;
  throw std::runtime_error("no initializer " + name);
}

std::vector<float> floats(const ::onnx::TensorProto& t) {
  std::vector<float> v(t.raw_data().size() / sizeof(float));
  std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
  return v;
}

// A layer ONNX export does not know (a user's registered class).
class Doubler : public Layer {
 public:
  using Layer::Layer;
  std::string class_name() const override { return "Doubler"; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {ctx.graph.add(op::add, {in[0], in[0]})};
  }
};

}  // namespace

TEST(OnnxExport, ReferenceCnnIsCheckedAndKeepsNhwcAtTheEdges) {
  Model m = reference_cnn();
  lsx::ExportReport report;
  ::onnx::ModelProto p = exported(m, {}, &report);
  EXPECT_NO_THROW(::onnx::checker::check_model(p));
  EXPECT_EQ(p.opset_import(0).version(), 17);
  EXPECT_EQ(p.ir_version(), 8);
  // One Transpose after the input, one before Flatten; Dropout gone.
  EXPECT_EQ(op_types(p),
            (std::vector<std::string>{"Transpose", "Conv", "Relu", "Conv", "Relu", "MaxPool",
                                      "Transpose", "Flatten", "Gemm", "Relu", "Gemm", "Identity"}));
  EXPECT_EQ(report.transposes, 2);
  EXPECT_EQ(report.removed.size(), 2u);
  EXPECT_EQ(report.parameters, m.count_params());
  const auto& in = p.graph().input(0).type().tensor_type().shape();
  ASSERT_EQ(in.dim_size(), 4);
  EXPECT_EQ(in.dim(0).dim_param(), "batch");
  EXPECT_EQ(in.dim(1).dim_value(), 28);
  EXPECT_EQ(in.dim(3).dim_value(), 1);
  // ONNX's shape inference reaches the output: (batch, 10).
  ::onnx::shape_inference::InferShapes(p);
  const auto& out = p.graph().output(0).type().tensor_type().shape();
  EXPECT_EQ(out.dim(1).dim_value(), 10);
  bool inferred_flatten = false;
  for (const auto& vi : p.graph().value_info())
    if (vi.type().tensor_type().shape().dim_size() == 2 &&
        vi.type().tensor_type().shape().dim(1).dim_value() == 12 * 12 * 64)
      inferred_flatten = true;
  EXPECT_TRUE(inferred_flatten) << "Flatten's output should be (batch, 9216)";
}

TEST(OnnxExport, ConvKernelIsOihwOfTheKerasHwioKernel) {
  Model m = reference_cnn();
  onnx_test::randomize(m, 3);
  ::onnx::ModelProto p = exported(m);
  LayerPtr conv;
  for (const auto& l : m.layers())
    if (!conv && l->class_name() == "Conv2D") conv = l;
  ASSERT_TRUE(conv);
  const auto& k = initializer(p, conv->name() + "/kernel");  // first conv: HWIO (3, 3, 1, 32)
  ASSERT_EQ(k.dims_size(), 4);
  EXPECT_EQ(k.dims(0), 32);
  EXPECT_EQ(k.dims(1), 1);
  std::vector<float> oihw = floats(k);
  const Tensor& hwio = conv->weights()[0]->value;
  const float* w = hwio.data<float>();
  for (int64_t o : {0, 5, 31})
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t x = 0; x < 3; ++x)
        EXPECT_EQ(oihw[size_t((o * 3 + h) * 3 + x)], w[(h * 3 + x) * 32 + o]);
}

TEST(OnnxExport, BatchNormFoldsIntoConvAndDenseElseStaysAnInferenceNode) {
  Model m = onnx_test::resnet_block();
  onnx_test::randomize(m, 11);
  lsx::ExportReport report;
  ::onnx::ModelProto p = exported(m, {}, &report);
  EXPECT_NO_THROW(::onnx::checker::check_model(p));
  // stem/res_a/res_b/down fold; post_add_bn (after Add) and fc_bn (after a relu) stay.
  EXPECT_EQ(report.folded, (std::vector<std::string>{"stem_bn into stem", "res_a_bn into res_a",
                                                     "res_b_bn into res_b", "down_bn into down"}));
  std::vector<std::string> ops = op_types(p);
  EXPECT_EQ(count(ops, "BatchNormalization"), 2);
  EXPECT_EQ(count(ops, "Conv"), 4);
  EXPECT_EQ(count(ops, "Transpose"), 1);  // NCHW from the input to the global pool
  // The folded stem kernel: w * gamma / sqrt(var + eps), bias = beta - mean * gamma / sqrt(...).
  auto bn = m.get_layer("stem_bn");
  const float* gamma = bn->weights()[0]->value.data<float>();
  const float* beta = bn->weights()[1]->value.data<float>();
  const float* mean = bn->weights()[2]->value.data<float>();
  const float* var = bn->weights()[3]->value.data<float>();
  const float* w = m.get_layer("stem")->weights()[0]->value.data<float>();  // (3, 3, 3, 8)
  std::vector<float> k = floats(initializer(p, "stem/kernel"));
  std::vector<float> b = floats(initializer(p, "stem/bias"));
  for (int o = 0; o < 8; ++o) {
    const double s = gamma[o] / std::sqrt(double(var[o]) + 1e-3);
    EXPECT_NEAR(k[size_t(o * 27)], w[o] * s, 1e-6) << o;  // (h, w, i) = (0, 0, 0)
    EXPECT_NEAR(b[size_t(o)], beta[o] - mean[o] * s, 1e-6) << o;
  }
  // Without folding every BatchNormalization is a node.
  ::onnx::ModelProto unfolded = exported(m, {.fold_batch_norm = false});
  EXPECT_NO_THROW(::onnx::checker::check_model(unfolded));
  EXPECT_EQ(count(op_types(unfolded), "BatchNormalization"), 6);
}

TEST(OnnxExport, EveryTestModelPassesTheCheckerAndShapeInference) {
  for (auto make : {onnx_test::resnet_block, onnx_test::branchy, onnx_test::preprocessing_stack,
                    onnx_test::inverted_residual, onnx_test::extra_layers, onnx_test::decoder}) {
    Model m = make();
    SCOPED_TRACE(m.name());
    lsx::ExportReport report;
    ::onnx::ModelProto p = exported(m, {.batch_size = 2}, &report);
    EXPECT_NO_THROW(::onnx::checker::check_model(p));
    ::onnx::shape_inference::InferShapes(p);
    const auto& out = p.graph().output(0).type().tensor_type().shape();
    const Shape want = m.outputs()[0].shape();
    ASSERT_EQ(out.dim_size(), want.rank());
    EXPECT_EQ(out.dim(0).dim_value(), 2);
    for (int d = 1; d < want.rank(); ++d) EXPECT_EQ(out.dim(d).dim_value(), want[d]);
    for (const auto& n : p.graph().node()) EXPECT_NE(n.op_type(), "Dropout");
  }
  lsx::ExportReport report;
  exported(onnx_test::preprocessing_stack(), {}, &report);
  EXPECT_EQ(report.removed.size(), 4u);  // RandomFlip, RandomRotation, RandomContrast, Dropout
}

std::vector<std::string> node_names(const ::onnx::ModelProto& p) {
  std::vector<std::string> names;
  for (const auto& n : p.graph().node()) names.push_back(n.name());
  return names;
}

std::vector<std::string> initializer_names(const ::onnx::ModelProto& p) {
  std::vector<std::string> names;
  for (const auto& t : p.graph().initializer()) names.push_back(t.name());
  return names;
}

TEST(OnnxExport, NestedSequentialIsInlinedWithItsBatchNormFolded) {
  Model m = onnx_test::sequential_in_functional();
  onnx_test::randomize(m, 21);
  lsx::ExportReport report;
  ::onnx::ModelProto p = exported(m, {}, &report);
  EXPECT_NO_THROW(::onnx::checker::check_model(p));
  EXPECT_EQ(node_names(p), (std::vector<std::string>{"image_nchw/Transpose", "features/conv/Conv",
                                                     "features/relu/Relu", "features/pool/MaxPool",
                                                     "gap/GlobalAveragePool", "gap/Flatten",
                                                     "head/Gemm", "head/Identity"}));
  EXPECT_EQ(initializer_names(p),
            (std::vector<std::string>{"features/conv/kernel", "features/conv/bias", "head/kernel",
                                      "head/bias"}));
  EXPECT_EQ(report.folded, std::vector<std::string>{"features/bn into features/conv"});
  EXPECT_EQ(report.transposes, 1);
  EXPECT_EQ(report.parameters, m.count_params() - 4 * 6 + 6);  // BN's 4 x 6 -> 6 conv biases
  // The folded kernel and bias, as for a flat model.
  const Network& features = *nested_network(*m.get_layer("features"));
  auto bn = features.get_layer("bn");
  const float* gamma = bn->weights()[0]->value.data<float>();
  const float* beta = bn->weights()[1]->value.data<float>();
  const float* mean = bn->weights()[2]->value.data<float>();
  const float* var = bn->weights()[3]->value.data<float>();
  const float* w = features.get_layer("conv")->weights()[0]->value.data<float>();  // (3,3,3,6)
  std::vector<float> k = floats(initializer(p, "features/conv/kernel"));
  std::vector<float> b = floats(initializer(p, "features/conv/bias"));
  for (int o = 0; o < 6; ++o) {
    const double scale = gamma[o] / std::sqrt(double(var[o]) + 1e-3);
    EXPECT_NEAR(k[size_t(o * 27)], w[o] * scale, 1e-6) << o;
    EXPECT_NEAR(b[size_t(o)], beta[o] - mean[o] * scale, 1e-6) << o;
  }
  // Unfolded, the BatchNormalization is a node of the nested scope.
  ::onnx::ModelProto unfolded = exported(m, {.fold_batch_norm = false});
  EXPECT_NO_THROW(::onnx::checker::check_model(unfolded));
  EXPECT_EQ(count(node_names(unfolded), "features/bn/BatchNormalization"), 1);
}

TEST(OnnxExport, NestedFunctionalTwoLevelsDeepIsInlined) {
  Model m = onnx_test::functional_in_sequential();
  lsx::ExportReport report;
  ::onnx::ModelProto p = exported(m, {.batch_size = 2}, &report);
  EXPECT_NO_THROW(::onnx::checker::check_model(p));
  EXPECT_EQ(node_names(p), (std::vector<std::string>{
                               "x_nchw/Transpose", "stem/Conv", "block/mini/conv/Conv",
                               "block/add/Add", "block/relu/Relu", "block/relu_nhwc/Transpose",
                               "flatten/Flatten", "head/Gemm", "head/Softmax", "head/Identity"}));
  EXPECT_EQ(initializer_names(p),
            (std::vector<std::string>{"stem/kernel", "stem/bias", "block/mini/conv/kernel",
                                      "block/mini/conv/bias", "head/kernel", "head/bias"}));
  EXPECT_EQ(report.folded, std::vector<std::string>{"block/mini/bn into block/mini/conv"});
  EXPECT_EQ(report.transposes, 2);  // NCHW from the input through the block to Flatten
  ::onnx::shape_inference::InferShapes(p);
  const auto& out = p.graph().output(0).type().tensor_type().shape();
  ASSERT_EQ(out.dim_size(), 2);
  EXPECT_EQ(out.dim(0).dim_value(), 2);
  EXPECT_EQ(out.dim(1).dim_value(), 3);
}

TEST(OnnxExport, NestedModelCalledTwiceStoresItsWeightsOnce) {
  Model m = onnx_test::shared_nested();
  lsx::ExportReport report;
  ::onnx::ModelProto p = exported(m, {}, &report);
  EXPECT_NO_THROW(::onnx::checker::check_model(p));
  EXPECT_EQ(initializer_names(p),
            (std::vector<std::string>{"tower/conv/kernel", "tower/conv/bias", "tower/dense/kernel",
                                      "tower/dense/bias", "rescale/scale", "rescale/offset",
                                      "head/kernel", "head/bias"}));
  EXPECT_EQ(report.initializers, 8);
  EXPECT_EQ(report.parameters, m.count_params() + 2);  // + Rescaling's scale and offset
  std::vector<std::string> names = node_names(p);
  EXPECT_EQ(count(names, "tower/conv/Conv"), 1);
  EXPECT_EQ(count(names, "tower_1/conv/Conv"), 1);
  EXPECT_EQ(count(names, "tower_1/dense/Gemm"), 1);
  int convs = 0, gemms = 0;
  for (const auto& n : p.graph().node()) {
    if (n.op_type() == "Conv") {
      ++convs;
      EXPECT_EQ(n.input(1), "tower/conv/kernel") << n.name();
    }
    if (n.op_type() == "Gemm" && n.name() != "head/Gemm") {
      ++gemms;
      EXPECT_EQ(n.input(1), "tower/dense/kernel") << n.name();
    }
  }
  EXPECT_EQ(convs, 2);
  EXPECT_EQ(gemms, 2);
}

TEST(OnnxExport, NestedModelWithTwoOutputsGivesTheGraphOutputs) {
  using namespace layers;
  KTensor i = Input({5});
  KTensor a = Dense(2, {.name = "a"})(i);
  KTensor b = Dense(3, {.activation = "softmax", .name = "b"})(i);
  Model heads({i}, {a, b}, "heads");
  KTensor x = Input({5}, "x");
  KTensors ys = heads(std::vector<KTensor>{x});
  ASSERT_EQ(ys.size(), 2u);
  Model m({x}, {ys[0], ys[1]}, "two_heads");
  lsx::ExportReport report;
  ::onnx::ModelProto p = exported(m, {}, &report);
  EXPECT_NO_THROW(::onnx::checker::check_model(p));
  EXPECT_EQ(report.output_names, (std::vector<std::string>{"heads", "heads_1"}));
  EXPECT_EQ(node_names(p),
            (std::vector<std::string>{"heads/a/Gemm", "heads/b/Gemm", "heads/b/Softmax",
                                      "heads/Identity", "heads_1/Identity"}));
  ::onnx::shape_inference::InferShapes(p);
  ASSERT_EQ(p.graph().output_size(), 2);
  EXPECT_EQ(p.graph().output(1).type().tensor_type().shape().dim(1).dim_value(), 3);
}

TEST(OnnxExport, LayerInsideANestedModelThatCannotBeExportedIsNamedWithItsScope) {
  KTensor x = layers::Input({4});
  KTensor y = LayerHandle(std::make_shared<Doubler>("my_doubler"))(x);
  Model inner({x}, {y}, "inner");
  Model outer = Sequential({layers::Input({4}), inner, layers::Dense(2)}, "outer");
  std::string e = test_util::error_of([&] { lsx::export_model_to_bytes(outer); });
  EXPECT_NE(e.find("Doubler 'inner/my_doubler'"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot be exported to ONNX"), std::string::npos) << e;
}

TEST(OnnxExport, HigherOpsetsAreDeclared) {
  ::onnx::ModelProto p = exported(reference_cnn(), {.opset = 21});
  EXPECT_EQ(p.opset_import(0).version(), 21);
  EXPECT_EQ(p.ir_version(), 10);
}

TEST(OnnxExport, UnsupportedLayersAndOptionsAreErrorsNamingThem) {
  KTensor x = layers::Input({4});
  KTensor y = LayerHandle(std::make_shared<Doubler>("my_doubler"))(x);
  Model custom({x}, {layers::Dense(2)(y)});
  std::string e = test_util::error_of([&] { lsx::export_model_to_bytes(custom); });
  EXPECT_NE(e.find("Doubler 'my_doubler'"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot be exported to ONNX"), std::string::npos) << e;

  Model area = Sequential({layers::Input({8, 8, 3}),
                           layers::Resizing(4, 4, {.interpolation = "area", .name = "shrink"})});
  e = test_util::error_of([&] { lsx::export_model_to_bytes(area); });
  EXPECT_NE(e.find("Resizing 'shrink'"), std::string::npos) << e;
  EXPECT_NE(e.find("area"), std::string::npos) << e;

  e = test_util::error_of([&] { lsx::export_model_to_bytes(reference_cnn(), {.opset = 16}); });
  EXPECT_NE(e.find("opset must be in 17..21, got 16"), std::string::npos) << e;
}

TEST(OnnxExport, WritesAtomicallyAndNamesABadPath) {
  fs::path dir = test_util::temp_dir("onnx_export", /*fresh=*/true);
  Model m = reference_cnn();
  lsx::ExportReport r = lsx::export_model(m, (dir / "m.onnx").string());
  EXPECT_GT(r.nodes, 0);
  ::onnx::ModelProto p;
  std::ifstream f(dir / "m.onnx", std::ios::binary);
  ASSERT_TRUE(p.ParseFromIstream(&f));
  EXPECT_EQ(p.graph().node_size(), r.nodes);
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "no temporary file is left behind";
  std::string e = test_util::error_of([&] { lsx::export_model(m, dir.string()); });
  EXPECT_NE(e.find(dir.string()), std::string::npos) << e;
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
  e = test_util::error_of([&] { lsx::export_model(m, (dir / "missing" / "m.onnx").string()); });
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
}

TEST(OnnxExport, CommandExportsAKerasFile) {
  fs::path dir = test_util::temp_dir("onnx_command", /*fresh=*/true);
  Model m = onnx_test::resnet_block();
  m.save((dir / "m.keras").string());
  testing::internal::CaptureStdout();
  int rc =
      lsx::export_command({(dir / "m.keras").string(), (dir / "m.onnx").string(), "--opset", "18"});
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("folded: stem_bn into stem"), std::string::npos) << out;
  ::onnx::ModelProto p;
  std::ifstream f(dir / "m.onnx", std::ios::binary);
  ASSERT_TRUE(p.ParseFromIstream(&f));
  EXPECT_EQ(p.opset_import(0).version(), 18);
  // A .keras file holding nested models (written and read back as Keras nests them).
  Model nested = onnx_test::functional_in_sequential();
  nested.save((dir / "nested.keras").string());
  testing::internal::CaptureStdout();
  rc = lsx::export_command({(dir / "nested.keras").string(), (dir / "nested.onnx").string()});
  out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("folded: block/mini/bn into block/mini/conv"), std::string::npos) << out;
  ::onnx::ModelProto np;
  std::ifstream nf(dir / "nested.onnx", std::ios::binary);
  ASSERT_TRUE(np.ParseFromIstream(&nf));
  EXPECT_NO_THROW(::onnx::checker::check_model(np));
  EXPECT_EQ(node_names(np), node_names(exported(nested)));
  testing::internal::CaptureStderr();
  EXPECT_EQ(lsx::export_command({"only_one.keras"}), 2);
  EXPECT_EQ(lsx::export_command({"a.keras", "b.onnx", "--bogus"}), 2);
  testing::internal::GetCapturedStderr();
  std::string e = test_util::error_of([&] {
    lsx::export_command({"a.keras", "b.onnx", "--opset", "99"});
  });
  EXPECT_NE(e.find("--opset"), std::string::npos) << e;
  e = test_util::error_of([&] { lsx::export_command({(dir / "nope.keras").string(), "b.onnx"}); });
  EXPECT_NE(e.find("nope.keras"), std::string::npos) << e;
}
