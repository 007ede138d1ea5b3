// Every op is declared completely: kernels on the backends it declares (or reference only, with
// a reason), a case in the op table, a well-formed declaration, and docs/ops.md generated from
// it. Each check is also run on a copy with one entry removed, to show it names what is missing.
// Then what the declarations drive: attribute defaults and checks, and the executable's report
// (or, in strict mode, refusal) of a reference kernel in a cpu program.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "lockstep/graph/executable.h"
#include "lockstep/ops/op_docs.h"
#include "ops/op_harness.h"
#include "ops/registry_check.h"
#include "test_util.h"

namespace lockstep::testing {
namespace {

using test_util::error_of;

// Ops the op table cannot build and compare, and where they are tested instead.
const std::map<std::string, std::string> kNotInOpTable = {
    {"variable", "needs a Variable the table does not make; every layer test reads variables"},
    {"assign", "writes into a variable and has no output to compare (tests/io, tests/train)"},
    {"assign_add",
     "writes into a variable and has no output to compare; "
     "tests/train/metric_test.cpp runs it on both backends"},
    {"sgd_update",
     "in-place update without outputs; tests/train/optimizer_test.cpp checks both "
     "backends against Keras's formulas"},
    {"adam_update", "in-place update without outputs; tests/train/optimizer_test.cpp"},
    {"rmsprop_update", "in-place update without outputs; tests/train/optimizer_test.cpp"},
    {"all_reduce_start", "needs a running distribute strategy (tests/distribute/strategy_*)"},
    {"all_reduce_wait", "needs a running distribute strategy (tests/distribute/strategy_*)"},
    {"cross_replica_sum", "needs a running distribute strategy (tests/distribute/strategy_*)"},
};

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& line : v) s += line + "\n";
  return s;
}

bool names(const std::vector<std::string>& problems, const std::string& op) {
  for (const std::string& p : problems)
    if (p.find("'" + op + "'") != std::string::npos) return true;
  return false;
}

KernelLookup registered() {
  return [](const std::string& op) { return OpRegistry::get().kernel_backends(OpId::named(op)); };
}

std::set<std::string> case_ops() {
  std::set<std::string> ops;
  for (const OpCase& c : op_cases()) ops.insert(c.op);
  ops.insert("input");  // every case feeds its inputs through placeholders
  return ops;
}

std::string docs_path() { return std::string(LOCKSTEP_SOURCE_DIR) + "/docs/ops.md"; }

}  // namespace

TEST(OpRegistry, EveryOpHasItsDeclaredKernels) {
  auto problems = kernel_coverage_problems(OpRegistry::get(), registered());
  EXPECT_TRUE(problems.empty()) << lines(problems);
}

TEST(OpRegistry, RemovingACpuKernelOrAReferenceKernelFails) {
  auto without = [](std::string op, std::string backend) -> KernelLookup {
    return [op, backend](const std::string& name) {
      auto v = OpRegistry::get().kernel_backends(OpId::named(name));
      if (name == op) std::erase(v, backend);
      return v;
    };
  };
  auto relu = kernel_coverage_problems(OpRegistry::get(), without("relu", "cpu"));
  EXPECT_TRUE(names(relu, "relu")) << lines(relu);
  EXPECT_NE(lines(relu).find("no 'cpu' kernel and no reference_only reason"), std::string::npos);
  auto concat = kernel_coverage_problems(OpRegistry::get(), without("concat", "reference"));
  EXPECT_TRUE(names(concat, "concat")) << lines(concat);
  // A kernel for a backend the op does not declare is caught too.
  auto extra = kernel_coverage_problems(OpRegistry::get(), [](const std::string& name) {
    auto v = OpRegistry::get().kernel_backends(OpId::named(name));
    if (name == "concat") v.push_back("cpu");
    return v;
  });
  EXPECT_TRUE(names(extra, "concat")) << lines(extra);
}

TEST(OpRegistry, AReferenceOnlyReasonIsWhatLetsAnOpGoWithoutACpuKernel) {
  OpRegistry fixture;
  // Fixture declarations borrow real ids: abs stands for a plain op, add for an explained one.
  fixture.add({.name = op::abs, .signature = "(x) -> y", .doc = "d", .infer = {}});
  fixture.add({.name = op::add,
               .signature = "(x) -> y",
               .doc = "d",
               .infer = {},
               .reference_only = "a reason"});
  auto reference_kernel_only = [](const std::string&) {
    return std::vector<std::string>{kReferenceBackend};
  };
  auto problems = kernel_coverage_problems(fixture, reference_kernel_only);
  EXPECT_TRUE(names(problems, "abs")) << lines(problems);
  EXPECT_FALSE(names(problems, "add")) << lines(problems);
}

TEST(OpRegistry, EveryOpHasACaseInTheOpTable) {
  auto problems = op_table_problems(OpRegistry::get().op_names(), case_ops(), kNotInOpTable);
  EXPECT_TRUE(problems.empty()) << lines(problems);
}

TEST(OpRegistry, RemovingAnOpsCasesFails) {
  std::set<std::string> ops = case_ops();
  ops.erase("softmax");
  auto problems = op_table_problems(OpRegistry::get().op_names(), ops, kNotInOpTable);
  EXPECT_TRUE(names(problems, "softmax")) << lines(problems);
  EXPECT_EQ(problems.size(), 1u) << lines(problems);
  // And an exemption cannot cover an op that has cases (it would hide a removal later).
  auto exempt = kNotInOpTable;
  exempt["relu"] = "no reason";
  EXPECT_TRUE(names(op_table_problems(OpRegistry::get().op_names(), case_ops(), exempt), "relu"));
}

std::vector<std::string> all_op_ids() {
  std::vector<std::string> ids;
  for (OpId id : kAllOpIds) ids.push_back(id);
  return ids;
}

TEST(OpRegistry, EveryOpDeclaresItsFactsAndHasAnId) {
  auto problems = fact_problems(OpRegistry::get(), all_op_ids());
  EXPECT_TRUE(problems.empty()) << lines(problems);
}

TEST(OpRegistry, AMisspeltIdOrAnOpWithoutAnIdFails) {
  std::vector<std::string> ids = all_op_ids();
  ids.push_back("rleu");  // an id no op declares
  ids.erase(std::find(ids.begin(), ids.end(), "softmax"));
  auto problems = fact_problems(OpRegistry::get(), ids);
  EXPECT_TRUE(names(problems, "rleu")) << lines(problems);
  EXPECT_TRUE(names(problems, "softmax")) << lines(problems);
  EXPECT_EQ(problems.size(), 2u) << lines(problems);
}

TEST(OpRegistry, AnOpWithoutADeclaredFactFails) {
  OpRegistry fixture;
  auto add = [&](OpDef d) {
    d.signature = "(x) -> y";
    d.doc = "d";
    fixture.add(std::move(d));
  };
  // Each fixture declaration borrows a real op's id (a declaration needs one); the fixture
  // registry holds only these.
  add({.name = op::abs, .onnx = {.op = "Relu"}});                                 // complete
  add({.name = op::add});                                                         // no ONNX form
  add({.name = op::assign, .onnx = {.op = "Relu", .none = "x"}});                 // two ONNX forms
  add({.name = op::bias_add, .rows = RowRule::by_attrs, .onnx = {.none = "n"}});  // no rule
  add({.name = op::cast,  // a fusable activation that says not which one it is
       .fusion = kFuseActivation,
       .keras_activations = {"x"},
       .onnx = {.none = "n"}});
  add({.name = op::concat, .keras_activations = {"dup"}, .onnx = {.none = "n"}});
  add({.name = op::constant, .keras_activations = {"dup"}, .onnx = {.none = "n"}});
  add({.name = op::div,  // fusable, but no Keras activation names it
       .fusion = kFuseActivation,
       .fused_as = FusedActivation::relu,
       .onnx = {.none = "n"}});
  add({.name = op::dropout, .fusion = kFuseTakesActivation, .onnx = {.none = "n"}});  // takes none
  auto problems = fact_problems(fixture, fixture.op_names());
  for (const char* op : {"add", "assign", "bias_add", "cast", "constant", "div", "dropout"})
    EXPECT_TRUE(names(problems, op)) << op << "\n" << lines(problems);
  EXPECT_FALSE(names(problems, "abs")) << lines(problems);
  EXPECT_EQ(problems.size(), 7u) << lines(problems);
}

// Every fused activation is one op's, and some producer takes it; a registry where one is
// declared by no op, or taken by no producer, fails.
TEST(OpRegistry, EveryFusedActivationIsAnOpsAndTakenBySomeProducer) {
  auto problems = fused_activation_problems(OpRegistry::get());
  EXPECT_TRUE(problems.empty()) << lines(problems);
  OpRegistry fixture;
  for (const OpDef* d : OpRegistry::get().ops())
    if (d->name != op::gelu) fixture.add(*d);  // gelu undeclared: its activation is no op's
  problems = fused_activation_problems(fixture);
  EXPECT_TRUE(names(problems, "gelu")) << lines(problems);
  EXPECT_EQ(problems.size(), 1u) << lines(problems);
}

TEST(OpRegistry, ActivationsAndOnnxFormsComeFromTheDeclarations) {
  const OpRegistry& r = OpRegistry::get();
  ASSERT_NE(r.activation_op("silu"), nullptr);
  EXPECT_EQ(r.activation_op("silu")->name, op::swish);
  EXPECT_EQ(r.activation_op("exponential")->name, op::exp);
  EXPECT_EQ(r.activation_op("relu")->onnx.op, "Relu");
  EXPECT_EQ(r.activation_op("nope"), nullptr);
  const auto names_list = r.activation_names();
  EXPECT_NE(std::find(names_list.begin(), names_list.end(), "gelu"), names_list.end());
  EXPECT_TRUE(r.op(op::relu).layout_agnostic);
  EXPECT_FALSE(r.op(op::softplus).layout_agnostic);
  EXPECT_EQ(r.op(op::conv2d).rows, RowRule::per_row);
  EXPECT_TRUE(r.op(op::adam_update).fusion & kFuseUpdateStep);
}

TEST(OpRegistry, DeclarationsAreComplete) {
  auto problems = declaration_problems(OpRegistry::get());
  EXPECT_TRUE(problems.empty()) << lines(problems);
}

// LOCKSTEP_UPDATE_DOCS=1 rewrites docs/ops.md (as `lockstep ops-doc > docs/ops.md` does).
TEST(OpRegistry, DocsAreGeneratedFromTheDeclarations) {
  const std::string generated = render_ops_markdown();
  const char* update = std::getenv("LOCKSTEP_UPDATE_DOCS");
  if (update && std::string(update) == "1") std::ofstream(docs_path()) << generated;
  const std::string diff = first_difference(test_util::read_text_file(docs_path()), generated);
  EXPECT_EQ(diff, "") << "docs/ops.md differs from the op declarations; regenerate it with "
                         "`build/bin/lockstep ops-doc > docs/ops.md`";
  // A stale line is found (the check can fail).
  std::string stale = generated;
  stale.replace(stale.find("### relu\n"), 9, "### relu_old\n");
  EXPECT_NE(first_difference(stale, generated).find("relu_old"), std::string::npos);
  // Every op, its attributes and defaults are in there.
  EXPECT_NE(generated.find("### batch_norm_train"), std::string::npos);
  EXPECT_NE(generated.find("| epsilon | float | `0.001` |"), std::string::npos);
  EXPECT_NE(generated.find("Kernels: reference only — "), std::string::npos);
}

// ---- attributes: declared defaults, unknown names and wrong types ----

TEST(OpAttrs, DefaultsComeFromTheDeclaration) {
  Graph g;
  Value x = g.input({DType::f32, Shape{4, 3}}, "x");
  Value c = g.input({DType::f32, Shape{3}}, "c");
  const Node& bn = g.node(g.add_multi(op::batch_norm_train, {x, c, c})[0].node);
  EXPECT_EQ(attr_f(bn, "epsilon"), 1e-3);
  const Node& lr = g.node(g.add(op::leaky_relu, {x}, Attrs{{"alpha", 0.5}}).node);
  EXPECT_EQ(attr_f(lr, "alpha"), 0.5);
  std::string e = error_of([&] { attr_f(bn, "momentum"); });
  EXPECT_NE(e.find("batch_norm_train"), std::string::npos) << e;
  EXPECT_NE(e.find("epsilon"), std::string::npos) << e;  // lists what it does declare
  e = error_of([&] { attr_ints(g.node(x.node), "size"); });
  EXPECT_NE(e.find("input"), std::string::npos) << e;
}

TEST(OpAttrs, AnUndeclaredAttributeIsAnErrorNamingTheOpAndTheValidOnes) {
  Graph g;
  Value x = g.input({DType::f32, Shape{1, 4, 4, 2}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 2, 2}}, "w");
  std::string e = error_of([&] { g.add(op::conv2d, {x, w}, Attrs{{"paddin", "same"}}, "c1"); });
  EXPECT_NE(e.find("conv2d 'c1'"), std::string::npos) << e;
  EXPECT_NE(e.find("'paddin'"), std::string::npos) << e;
  EXPECT_NE(e.find("padding"), std::string::npos) << e;
  e = error_of([&] { g.add(op::relu, {x}, Attrs{{"alpha", 0.1}}); });
  EXPECT_NE(e.find("relu"), std::string::npos) << e;
  e = error_of([&] { g.add(op::conv2d, {x, w}, Attrs{{"padding", int64_t(1)}}); });
  EXPECT_NE(e.find("'padding' must be string"), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { g.add(op::conv2d, {x, w}, Attrs{{"strides", int64_t(1)}}); }), "");
}

// ---- the executable: a reference kernel in a cpu program is reported, or refused ----

namespace {

struct Program {
  Graph g;
  Value x;
  Value y;
};

// concat is declared reference only; add of [2, 1, 3] and [4, 1] needs general broadcasting,
// which the cpu add kernel hands to the reference kernel.
Program reference_only_op() {
  Program p;
  p.x = p.g.input({DType::f32, Shape{2, 3}}, "x");
  p.y = p.g.add(op::concat, {p.x, p.x}, Attrs{{"axis", int64_t(0)}}, "joined");
  return p;
}
Program general_broadcast() {
  Program p;
  p.x = p.g.input({DType::f32, Shape{2, 1, 3}}, "x");
  p.y = p.g.add(op::add,
                {p.x, p.g.add(op::constant, {},
                              Attrs{{"value", 1.0}, {"shape", std::vector<int64_t>{4, 1}}})});
  return p;
}

std::string fallback_line(const Executable& exe, const std::string& op) {
  for (const std::string& line : exe.report())
    if (line.rfind("fallback: " + op + " ", 0) == 0) return line;
  return "";
}

}  // namespace

TEST(KernelFallback, AReferenceOnlyOpIsReportedWithItsDeclaredReason) {
  Program p = reference_only_op();
  Executable exe(p.g, {p.x}, {p.y}, CompileOptions{.backend = "cpu"});
  const std::string line = fallback_line(exe, "concat");
  EXPECT_NE(line.find(OpRegistry::get().op(op::concat).reference_only), std::string::npos) << line;
  EXPECT_NE(line.find("'cpu'"), std::string::npos) << line;
  Executable ref(p.g, {p.x}, {p.y}, CompileOptions{.backend = "reference"});
  EXPECT_EQ(fallback_line(ref, "concat"), "");
}

TEST(KernelFallback, ShapesACpuKernelDoesNotCoverAreReported) {
  Program p = general_broadcast();
  Executable exe(p.g, {p.x}, {p.y}, CompileOptions{.backend = "cpu"});
  EXPECT_NE(fallback_line(exe, "add").find("general broadcasting"), std::string::npos);
  EXPECT_EQ(fallback_line(exe, "constant"), "");  // constant has a cpu kernel
}

TEST(KernelFallback, StrictModeRefusesAndNamesTheOpAndTheBackend) {
  for (Program p : {reference_only_op(), general_broadcast()}) {
    const std::string op = p.g.node(p.y.node).op;
    CompileOptions strict{.backend = "cpu"};
    strict.strict_kernels = true;
    std::string e = error_of([&] { Executable exe(p.g, {p.x}, {p.y}, strict); });
    EXPECT_NE(e.find("op '" + op + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("backend 'cpu'"), std::string::npos) << e;
    EXPECT_NE(e.find("LOCKSTEP_STRICT_KERNELS"), std::string::npos) << e;
    strict.backend = "reference";  // the reference program has nothing to fall back from
    EXPECT_EQ(error_of([&] { Executable exe(p.g, {p.x}, {p.y}, strict); }), "");
  }
}

TEST(KernelFallback, ABuildWithEveryDeclaredCpuKernelReportsNoFallbackForThem) {
  // matmul, bias_add, relu, softmax: the dense classifier's ops have cpu kernels.
  Graph g;
  Value x = g.input({DType::f32, Shape{8, 4}}, "x");
  Value w = g.input({DType::f32, Shape{4, 3}}, "w");
  Value b = g.input({DType::f32, Shape{3}}, "b");
  Value y =
      g.add(op::softmax, {g.add(op::relu, {g.add(op::bias_add, {g.add(op::matmul, {x, w}), b})})});
  CompileOptions strict{.backend = "cpu"};
  strict.strict_kernels = true;
  Executable exe(g, {x, w, b}, {y}, strict);
  for (const std::string& line : exe.report())
    EXPECT_EQ(line.find("fallback"), std::string::npos) << line;
}

TEST(Backends, TheListIsOneDeclaration) {
  ASSERT_GE(known_backends().size(), 2u);
  EXPECT_EQ(known_backends().front().name, kReferenceBackend);
  EXPECT_TRUE(is_known_backend("cpu"));
  EXPECT_FALSE(is_known_backend("gpu"));
  EXPECT_EQ(host_backends(), (std::vector<std::string>{"reference", "cpu"}));
  EXPECT_NE(known_backend_names().find("\"cpu\""), std::string::npos);
}

}  // namespace lockstep::testing
