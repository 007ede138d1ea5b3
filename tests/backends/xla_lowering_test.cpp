// The op table (tests/ops/*_cases.cpp) on the xla lowering: each case whose nodes all have a
// StableHLO lowering runs through lower_graph + the CPU PJRT plugin against the reference
// kernels on the same random inputs, in float32 (the case's fwd_tol, at least 1e-4: XLA's CPU
// code has its own exp/log/tanh approximations and summation order) and with bfloat16 inputs
// (2e-2, as the op table's bf16 check). Plus: the ops of a Dense MLP train step all lower, and
// an op without a lowering is an error naming it and the node.
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaLowering, NeedsTheXlaBuild) {
  GTEST_SKIP() << "built without LOCKSTEP_XLA (no pjrt_c_api.h)";
}
#else
#include <cmath>
#include <sstream>

#include "backends/xla/lowering.h"
#include "backends/xla/xla_program.h"
#include "backends/xla_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/executable.h"
#include "lockstep/graph/op_registry.h"
#include "ops/internal/schedule_math.h"
#include "ops/op_harness.h"
#include "test_util.h"

using namespace lockstep;
using lockstep::testing::op_cases;
using lockstep::testing::OpCase;

namespace {

// As tests/ops/op_harness.cpp makes a case's inputs (same seeds, so the same values).
Tensor make_input(const lockstep::testing::OpInput& in, uint64_t seed) {
  Tensor t = Tensor::empty(in.shape, in.dtype);
  Philox rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = in.values.empty() ? rng.uniform(in.lo, in.hi) : in.values[size_t(i)];
    if (in.dtype == DType::f32)
      t.data<float>()[i] = v;
    else if (in.dtype == DType::i32)
      t.data<int32_t>()[i] = int32_t(std::floor(v));
    else if (in.dtype == DType::u8)
      t.data<uint8_t>()[i] = uint8_t(std::floor(v));
    else
      LS_FAIL("unsupported dtype in op case");
  }
  return t;
}

struct Built {
  Graph g;
  std::vector<Value> inputs, outs;
};

// The case's node(s); with bf16, float inputs pass through a cast to bf16 and bf16 outputs are
// cast back (the op table's mixed-precision form).
Built build(const OpCase& c, bool bf16) {
  Built b;
  std::vector<Value> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    b.inputs.push_back(b.g.input({c.inputs[i].dtype, c.inputs[i].shape}, "in" + std::to_string(i)));
    // f32 inputs pass through a node either way (an identity for f32), so the op node has the
    // same id in both forms: dropout's masks are keyed by it.
    if (c.inputs[i].dtype != DType::f32)
      ins.push_back(b.inputs.back());
    else if (bf16)
      ins.push_back(
          b.g.add(op::cast, {b.inputs.back()}, Attrs{{"dtype", std::string("bfloat16")}}));
    else
      ins.push_back(b.g.add(op::identity, {b.inputs.back()}));
  }
  std::vector<Value> outs =
      c.build ? std::vector<Value>{c.build(b.g, ins)} : b.g.add_multi(c.op, ins, c.attrs, c.name);
  for (Value v : outs)
    b.outs.push_back(b.g.type(v).dtype == DType::bf16
                         ? b.g.add(op::cast, {v}, Attrs{{"dtype", std::string("float32")}})
                         : v);
  return b;
}

// The first op of the case's graph without a lowering ("" when all have one).
std::string missing_lowering(const OpCase& c) {
  Built b = build(c, false);
  for (const Node& n : b.g.nodes())
    if (n.op != op::input && n.op != op::variable && !xla::find_lowering(n.op)) return n.op;
  return "";
}

std::string compare(const std::vector<float>& got, const std::vector<float>& want, float tol,
                    const std::string& what) {
  if (got.size() != want.size()) return what + ": size mismatch";
  for (size_t i = 0; i < got.size(); ++i)
    if (std::isnan(got[i]) && std::isnan(want[i])) {
      continue;  // NaN where the reference has NaN (the op table's *_nan cases)
    } else if (!(std::fabs(got[i] - want[i]) <= tol * (1.f + std::fabs(want[i])))) {
      std::ostringstream os;
      os << what << ": element " << i << " got " << got[i] << " want " << want[i];
      return os.str();
    }
  return "";
}

std::string run_case(const OpCase& c, bool bf16) {
  std::vector<Tensor> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ins.push_back(make_input(c.inputs[i], 1000 + i));
    if (!bf16 || ins.back().dtype() != DType::f32) continue;
    float* p = ins.back().data<float>();
    for (int64_t k = 0; k < ins.back().numel(); ++k) p[k] = bf16_to_f32(f32_to_bf16(p[k]));
  }
  Built want = build(c, false), got = build(c, bf16);
  auto ref = lockstep::testing::run_graph(want.g, want.inputs, want.outs, ins, "reference");
  xla::XlaProgram program(xla_test::shared_client().client, got.g, got.inputs, got.outs);
  auto out = program.run(ins);
  const float tol = bf16 ? std::max(c.fwd_tol, 2e-2f) : std::max(c.fwd_tol, 1e-4f);
  for (size_t k = 0; k < ref.size(); ++k) {
    std::string err = compare(out[k].to_vector(), ref[k].to_vector(), tol,
                              std::string(bf16 ? "bf16 " : "") + "output " + std::to_string(k));
    if (!err.empty()) return err;
  }
  return "";
}

std::vector<int> lowered_cases() {
  std::vector<int> r;
  for (int i = 0; i < int(op_cases().size()); ++i)
    if (missing_lowering(op_cases()[size_t(i)]).empty()) r.push_back(i);
  return r;
}

std::string case_name(const ::testing::TestParamInfo<int>& info) {
  std::string n = op_cases()[size_t(info.param)].name;
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

class XlaOpTable : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!xla_test::shared_client().client)
      GTEST_SKIP() << "no PJRT CPU plugin: " << xla_test::shared_client().why_not;
  }
};

}  // namespace

// float32, and for an op that computes in bfloat16 (OpDef::bf16) also with bf16 inputs against
// the f32 reference on the same rounded values (one process per case: the plugin loads once).
TEST_P(XlaOpTable, MatchesReference) {
  const OpCase& c = op_cases()[size_t(GetParam())];
  EXPECT_EQ(run_case(c, false), "") << c.name;
  if (!c.build && OpRegistry::get().op(c.op).bf16) {
    EXPECT_EQ(run_case(c, true), "") << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(All, XlaOpTable, ::testing::ValuesIn(lowered_cases()), case_name);

// What the table covers, and which ops still have no lowering (printed, for the backlog).
TEST(XlaLowering, CoversTheDenseAndConvTrainingOps) {
  for (const char* op : {"matmul",
                         "bias_add",
                         "add",
                         "sub",
                         "mul",
                         "div",
                         "neg",
                         "relu",
                         "relu_grad",
                         "sparse_softmax_cross_entropy",
                         "sparse_softmax_cross_entropy_grad",
                         "softmax_cross_entropy",
                         "softmax_cross_entropy_grad",
                         "reduce_sum",
                         "reduce_mean",
                         "reduce_sum_grad",
                         "reduce_mean_grad",
                         "scale_shift",
                         "sgd_update",
                         "conv2d",
                         "conv2d_backward_input",
                         "conv2d_backward_filter",
                         "max_pool2d",
                         "max_pool2d_grad",
                         "batch_norm_train",
                         "batch_norm_train_grad",
                         "batch_norm_infer",
                         "ones_like",
                         "zeros_like",
                         "constant",
                         "reshape",
                         "cast",
                         "assign_add"})
    EXPECT_TRUE(xla::find_lowering(OpId::named(op))) << op;
}

// The problems of one op's StableHLO fact (OpDef::xla) against the lowering table: an op
// without a lowering must say why, and an op that says why must have none. Sources (input,
// variable) are lower_graph's arguments.
std::string xla_fact_problem(const OpDef& d, bool has_lowering) {
  if (d.source != Source::none) return "";
  if (!has_lowering && d.xla.lowered())
    return d.name +
           ": no StableHLO lowering and no reason (register one in "
           "src/backends/xla/lowering_*.cpp, or set .xla = {.none = \"why\"} on its OpDef)";
  if (has_lowering && !d.xla.lowered())
    return d.name + ": has a StableHLO lowering yet declares none (\"" + d.xla.none +
           "\"): drop the reason";
  return "";
}

// The completeness check of issue 22: every declared op is lowered or says why not.
TEST(XlaLowering, EveryOpIsLoweredOrSaysWhyNot) {
  std::string problems;
  int lowered = 0, reasons = 0;
  for (const std::string& name : OpRegistry::get().op_names()) {
    const OpDef& d = OpRegistry::get().op(OpId::named(name));
    const bool has = xla::find_lowering(OpId::named(name)) != nullptr;
    const std::string p = xla_fact_problem(d, has);
    if (!p.empty()) problems += p + "\n";
    lowered += has;
    reasons += !d.xla.lowered();
  }
  EXPECT_EQ(problems, "");
  EXPECT_GE(lowered, 90);  // of the 106 declared ops
  EXPECT_LE(reasons, 14);
  std::cout << "[ xla ] " << lowered << " ops lowered, " << reasons << " say why not\n";
}

// The check itself: an op with neither fails it, and so does an op with both.
TEST(XlaLowering, TheCompletenessCheckCatchesBothMistakes) {
  OpDef neither{.name = op::abs};  // a fixture declaration (borrowing an id)
  EXPECT_NE(xla_fact_problem(neither, false).find("abs: no StableHLO lowering and no reason"),
            std::string::npos);
  EXPECT_EQ(xla_fact_problem(neither, true), "");
  OpDef both{.name = op::abs, .xla = {.none = "host only"}};
  EXPECT_NE(xla_fact_problem(both, true).find("declares none (\"host only\")"), std::string::npos);
  EXPECT_EQ(xla_fact_problem(both, false), "");
  OpDef source{.name = op::input, .source = Source::placeholder};
  EXPECT_EQ(xla_fact_problem(source, false), "");
}

TEST(XlaLowering, AnOpWithoutALoweringNamesItAndTheNode) {
  Graph g;
  Value x = g.input({DType::f32, Shape{4}}, "x");
  Value y = g.add(op::all_reduce_start, {x}, Attrs{{"group", 0}, {"bucket", 0}, {"replica", 0}},
                  "bucket_1");
  const std::string err = test_util::error_of([&] { xla::lower_graph(g, {x}, {y}); });
  EXPECT_NE(err.find("xla: op 'all_reduce_start' 'bucket_1' (node 1) has no StableHLO lowering "
                     "(the host strategies' bucketed all-reduce"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("run it on \"cpu\""), std::string::npos) << err;
}

// Synchronized batch norm's cross_replica_sum: the identity on one replica, one all_reduce
// over every replica (replica_groups) on several.
TEST(XlaLowering, CrossReplicaSumIsAnAllReduceOverTheReplicas) {
  Graph g;
  Value x = g.input({DType::f32, Shape{3}}, "x");
  Value y = g.add(op::cross_replica_sum, {x}, Attrs{{"group", 0}, {"replica", 0}}, "sum_1");
  EXPECT_EQ(xla::lower_graph(g, {x}, {y}).mlir.find("all_reduce"), std::string::npos);
  const std::string two = xla::lower_graph(g, {x}, {y}, {.num_replicas = 2}).mlir;
  EXPECT_NE(two.find("stablehlo.all_reduce"), std::string::npos) << two;
  EXPECT_NE(two.find("replica_groups = dense<[[0, 1]]>"), std::string::npos) << two;
}

// mixed_bfloat16 on the matrix units: matmul and the three convolutions take their bf16
// operands as they are and accumulate in float32 (JAX's preferred_element_type), instead of
// widening them first; a float32 contraction stays float32. The values are the op table's
// (XlaOpTable.MatchesReference runs every bf16 case through this path).
TEST(XlaLowering, Bf16ContractionsTakeBf16OperandsAndAccumulateInFloat32) {
  for (DType dt : {DType::bf16, DType::f32}) {
    Graph g;
    Value x = g.input({dt, Shape{2, 8}}, "x"), w = g.input({dt, Shape{8, 3}}, "w");
    Value img = g.input({dt, Shape{1, 6, 6, 2}}, "img"), k = g.input({dt, Shape{3, 3, 2, 4}}, "k");
    Value y = g.add(op::matmul, {x, w});
    Attrs conv{{"strides", std::vector<int64_t>{1, 1}},
               {"dilations", std::vector<int64_t>{1, 1}},
               {"groups", int64_t(1)},
               {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    Value c = g.add(op::conv2d, {img, k}, conv);
    const std::string mlir = xla::lower_graph(g, {x, w, img, k}, {y, c}).mlir;
    const std::string e = dt == DType::bf16 ? "bf16" : "f32";
    for (const std::string want :
         {"(tensor<2x8x" + e + ">, tensor<8x3x" + e + ">) -> tensor<2x3xf32>",
          "(tensor<1x6x6x2x" + e + ">, tensor<3x3x2x4x" + e + ">) -> tensor<1x6x6x4xf32>"})
      EXPECT_NE(mlir.find(want), std::string::npos) << want << " in\n" << mlir;
    if (dt == DType::bf16) EXPECT_EQ(mlir.find("x2x8xf32>"), std::string::npos) << mlir;
  }
}

TEST(XlaLowering, AnUnknownBatchDimIsAnError) {
  Graph g;
  Value x = g.input({DType::f32, Shape{-1, 4}}, "images");
  Value y = g.add(op::relu, {x});
  const std::string err = test_util::error_of([&] { xla::lower_graph(g, {x}, {y}); });
  EXPECT_NE(err.find("input 'images' has an unknown dim"), std::string::npos) << err;
  EXPECT_NE(err.find("specialise_batch"), std::string::npos) << err;
}

// Every learning-rate schedule of the op table over steps 0..60 (restarts, warmup ends, cycles,
// staircase jumps) against the double-precision formulas: within 1e-5 relative.
TEST(XlaLowering, LearningRateSchedulesOverManySteps) {
  auto client = XLA_CLIENT_OR_SKIP();
  int schedules = 0;
  for (const OpCase& c : op_cases()) {
    if (c.op != op::lr_schedule) continue;
    ++schedules;
    Graph g;
    Value it = g.input({DType::f32, Shape{}}, "iterations");
    Value lr = g.add(op::lr_schedule, {it}, c.attrs);
    xla::XlaProgram program(client, g, {it}, {lr});
    for (int step = 0; step <= 60; ++step) {
      const double want = ops::compile_schedule(c.attrs)(step);
      const float got = program.run({Tensor::full(Shape{}, float(step))})[0].item();
      ASSERT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-9) << c.name << " at step " << step;
    }
  }
  EXPECT_GE(schedules, 7);
}

// dropout draws the reference kernel's masks bit for bit, for the same model seed and step.
TEST(XlaLowering, DropoutMasksAreTheReferenceKernels) {
  auto client = XLA_CLIENT_OR_SKIP();
  Graph g;
  Value x = g.input({DType::f32, Shape{3, 7, 5}}, "x");
  auto y = g.add_multi(op::dropout, {x}, Attrs{{"rate", 0.3}, {"seed", 11}}, "drop");
  Executable exe(g, {x}, y, CompileOptions{.backend = "reference", .seed = 99});
  xla::XlaProgram program(client, g, {x}, y, {.seed = 99});
  Tensor in = Tensor::full(Shape{3, 7, 5}, 2.f);
  for (int step = 0; step < 3; ++step) {
    exe.input(0).copy_from(in);
    exe.run();
    auto out = program.run({in});
    EXPECT_EQ(out[1].to_vector(), exe.output(1).to_vector()) << "mask of step " << step;
    EXPECT_EQ(out[0].to_vector(), exe.output(0).to_vector()) << "y of step " << step;
  }
  EXPECT_EQ(program.step(), 3u);
}

// A verify error from the plugin names the Lockstep node through the op's loc().
TEST(XlaLowering, PluginErrorsNameTheNode) {
  auto client = XLA_CLIENT_OR_SKIP();
  xla::StablehloBuilder b;
  xla::HloValue x = b.argument({xla::ElemType::f32, {2, 3}});
  b.set_location("relu 'dense_1/relu' #7");
  // A transpose whose declared result type is wrong: the verifier, not the parser, rejects it.
  xla::HloValue y = b.op("stablehlo.transpose", {x}, {{xla::ElemType::f32, {2, 3}}},
                         "permutation = array<i64: 1, 0>")[0];
  b.ret({y});
  const std::string err = test_util::error_of([&] { client->compile(b.module_text()); });
  EXPECT_NE(err.find("relu 'dense_1/relu' #7"), std::string::npos) << err;
}

#endif  // LOCKSTEP_XLA
