// Fused activations are declarations, not lists: every op declared kFuseActivation (with its
// OpDef::fused_as) that conv2d declares in takes_activations fuses into the conv on the cpu
// backend, runs in every backend's conv kernel and lowers on xla, with no activation named in
// the fusion pass. gelu is the case that was added this way. A gradient that needs the value
// before the activation (gelu's, swish's) keeps the two apart in training, an activation with a
// non-default attribute (gelu's tanh approximation) stays apart, and an activation the producer
// does not declare is refused by name.
#include <gtest/gtest.h>

#include <set>

#include "graph/graph_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/backend.h"
#include "lockstep/graph/executable.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {
namespace {

struct Program {
  Graph g;
  std::vector<Value> feeds, fetch;
};

// act(conv2d(x, w) [+ b]) with activation op `act` (its attributes `attrs`); training adds
// loss = sum(y * r) and the gradients of x, w (and b).
Program conv_then(OpId act, bool bias, bool training, Attrs attrs = {}) {
  Program p;
  Graph& g = p.g;
  Value x = g.input({DType::f32, Shape{2, 6, 6, 3}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 3, 8}}, "w");
  p.feeds = {x, w};
  Value y = g.add(op::conv2d, {x, w}, Attrs{{"padding", std::string("same")}}, "conv");
  if (bias) {
    Value b = g.input({DType::f32, Shape{8}}, "b");
    p.feeds.push_back(b);
    y = g.add(op::bias_add, {y, b});
  }
  y = g.add(act, {y}, attrs, "act");
  p.fetch = {y};
  if (training) {
    Value r = g.input(g.type(y), "r");
    p.feeds.push_back(r);
    Value loss = g.add(op::reduce_sum, {g.add(op::mul, {y, r})},
                       Attrs{{"axes", std::vector<int64_t>{0, 1, 2, 3}}, {"keepdims", false}});
    p.fetch.push_back(loss);
    std::vector<Value> wrt(p.feeds.begin(), p.feeds.end() - 1);
    for (Value d : gradients(g, loss, wrt)) p.fetch.push_back(d);
  }
  return p;
}

std::vector<std::vector<float>> feed_values(const Graph& g, const std::vector<Value>& feeds) {
  Philox rng(31);
  std::vector<std::vector<float>> in;
  for (Value f : feeds) {
    in.emplace_back(size_t(g.type(f).shape.numel()));
    for (float& v : in.back()) v = rng.uniform(-2.f, 2.f);
  }
  return in;
}

bool has_line(const std::vector<std::string>& report, const std::string& line) {
  for (const std::string& l : report)
    if (l == line) return true;
  return false;
}

// The fused cpu program against the reference backend, every fetch.
void expect_matches_reference(const Program& p, const std::string& what) {
  Executable cpu(p.g, p.feeds, p.fetch);
  Executable ref(p.g, p.feeds, p.fetch, CompileOptions{.backend = "reference"});
  const auto in = feed_values(p.g, p.feeds);
  const auto got = test_util::run_once(cpu, in), want = test_util::run_once(ref, in);
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_LE(test_util::worst(got[k], want[k], 1e-4, 1e-4), 1.0) << what << ", fetch " << k;
}

// The ops declared as fused activations that conv2d takes.
std::vector<const OpDef*> conv_activations() {
  const OpRegistry& r = OpRegistry::get();
  std::vector<const OpDef*> v;
  for (const OpDef* d : r.ops())
    if ((d->fusion & kFuseActivation) && holds(r.op(op::conv2d).takes_activations, d->fused_as))
      v.push_back(d);
  return v;
}

TEST(ActivationFusion, EveryDeclaredActivationFusesIntoTheConvThatTakesIt) {
  std::set<std::string> fused;
  for (const OpDef* d : conv_activations()) {
    const std::string name = fused_activation_name(d->fused_as);
    for (bool bias : {true, false}) {
      const Program p = conv_then(d->name, bias, /*training=*/false);
      Executable cpu(p.g, p.feeds, p.fetch);
      const std::string line =
          std::string("fused conv2d+") + (bias ? "bias+" : "") + name + (bias ? " 'conv'" : "");
      const std::string want = bias ? line : "fused conv2d+" + name + " 'conv'";
      EXPECT_TRUE(has_line(cpu.report(), want)) << d->name << (bias ? " with" : " without")
                                                << " a bias: no '" << want << "' in the report";
      expect_matches_reference(p, std::string(d->name) + (bias ? " after a bias" : ""));
    }
    fused.insert(name);
  }
  // gelu was declared fusable (kFuseActivation, fused_as gelu, in conv2d's takes_activations)
  // with no edit to the fusion pass: it is among them.
  EXPECT_TRUE(fused.count("gelu"));
  EXPECT_TRUE(fused.count("relu") && fused.count("relu6") && fused.count("sigmoid") &&
              fused.count("swish"));
}

TEST(ActivationFusion, InTrainingOnlyAGradientFromTheOutputLetsItFuse) {
  for (const OpDef* d : conv_activations()) {
    const Program p = conv_then(d->name, /*bias=*/true, /*training=*/true);
    Executable cpu(p.g, p.feeds, p.fetch);
    const std::string line =
        std::string("fused conv2d+bias+") + fused_activation_name(d->fused_as) + " 'conv'";
    EXPECT_EQ(has_line(cpu.report(), line), bool(d->fusion & kFuseGradFromOutput)) << d->name;
    expect_matches_reference(p, std::string(d->name) + " in training");
  }
}

TEST(ActivationFusion, AnActivationWithANonDefaultAttributeStaysApart) {
  const Program p =
      conv_then(op::gelu, /*bias=*/true, /*training=*/false, Attrs{{"approximate", true}});
  Executable cpu(p.g, p.feeds, p.fetch);
  for (const std::string& l : cpu.report()) EXPECT_EQ(l.find("+gelu"), std::string::npos) << l;
  expect_matches_reference(p, "gelu(approximate=true)");
}

TEST(ActivationFusion, AnActivationTheProducerDoesNotTakeIsRefusedByName) {
  Graph g;
  Value x = g.input({DType::f32, Shape{1, 4, 4, 2}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 2, 2}}, "w");
  std::string e;
  try {
    g.add(op::conv2d, {x, w}, Attrs{{"activation", "tanh"}}, "c1");
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("conv2d 'c1'"), std::string::npos) << e;
  EXPECT_NE(e.find("'tanh'"), std::string::npos) << e;
  EXPECT_NE(e.find("\"gelu\""), std::string::npos) << e;  // the valid ones are listed
  e.clear();
  try {  // a fused activation batch_norm_infer does not declare
    Value c = g.input({DType::f32, Shape{2}}, "c");
    g.add(op::batch_norm_infer, {x, c, c, c, c}, Attrs{{"activation", "gelu"}}, "bn");
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("batch_norm_infer 'bn'"), std::string::npos) << e;
  EXPECT_NE(e.find("does not apply"), std::string::npos) << e;
}

// Every backend's conv2d applies every activation it declares: the node carries the attribute
// (as the cpu pass leaves it), and the cpu kernel and, where built, the xla lowering match the
// reference kernel.
TEST(ActivationFusion, EveryBackendAppliesEveryDeclaredConvActivation) {
  const std::vector<std::string> backends = registered_backends();
  for (const OpDef* d : conv_activations()) {
    Program p;
    Value x = p.g.input({DType::f32, Shape{2, 5, 5, 3}}, "x");
    Value w = p.g.input({DType::f32, Shape{3, 3, 3, 4}}, "w");
    p.feeds = {x, w};
    p.fetch = {p.g.add(op::conv2d, {x, w},
                       Attrs{{"activation", fused_activation_name(d->fused_as)}}, "conv")};
    const auto in = feed_values(p.g, p.feeds);
    Executable ref(p.g, p.feeds, p.fetch, CompileOptions{.backend = "reference"});
    const auto want = test_util::run_once(ref, in);
    for (const std::string& b : backends) {
      if (b == "reference") continue;
      std::unique_ptr<Executable> exe;
      try {
        exe = std::make_unique<Executable>(p.g, p.feeds, p.fetch, CompileOptions{.backend = b});
      } catch (const Error& e) {  // xla built, but no plugin here: the xla tests say so
        ADD_FAILURE_AT(__FILE__, __LINE__) << b << ": " << e.what();
        continue;
      }
      const auto got = test_util::run_once(*exe, in);
      EXPECT_LE(test_util::worst(got[0], want[0], 1e-4, 1e-4), 1.0) << d->name << " on " << b;
    }
  }
}

}  // namespace
}  // namespace lockstep
