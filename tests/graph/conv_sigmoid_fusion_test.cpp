// The fusion pass's conv2d+sigmoid (EfficientNet's squeeze-and-excitation gate,
// Conv2D(activation="sigmoid")): conv2d -> bias_add -> sigmoid becomes one conv2d with a fused
// bias and activation sigmoid, in inference and in training (sigmoid_grad reads the sigmoid's
// output, which the fused conv writes, so the backward is unchanged). Outputs and gradients
// match the unfused compiled program, the eager one and the reference backend; a conv whose
// output has another reader keeps its sigmoid.
#include <gtest/gtest.h>

#include "graph/graph_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;

int count_lines(const std::vector<std::string>& report, const std::string& line) {
  int n = 0;
  for (const std::string& l : report) n += l == line;
  return n;
}

struct Program {
  Graph g;
  std::vector<Value> feeds, fetch;
};

// s = sigmoid(conv1x1(x, w) + b), a 1x1 gate over pooled features ([N, 1, 1, C]) as in SE;
// training: loss = sum(s * r) and its gradients with respect to x, w and b.
Program gate(bool training, bool second_reader) {
  Program p;
  Graph& g = p.g;
  Value x = g.input({DType::f32, Shape{4, 1, 1, 24}}, "x");
  Value w = g.input({DType::f32, Shape{1, 1, 24, 32}}, "w");
  Value b = g.input({DType::f32, Shape{32}}, "b");
  Value z =
      g.add(op::bias_add,
            {g.add(op::conv2d, {x, w}, Attrs{{"padding", std::string("valid")}}, "se_expand"), b});
  Value s = g.add(op::sigmoid, {z});
  p.feeds = {x, w, b};
  if (second_reader) s = g.add(op::add, {s, g.add(op::relu, {z})});
  p.fetch = {s};
  if (training) {
    Value r = g.input(g.type(s), "r");
    p.feeds.push_back(r);
    Value loss = g.add(op::reduce_sum, {g.add(op::mul, {s, r})},
                       Attrs{{"axes", I{0, 1, 2, 3}}, {"keepdims", false}});
    p.fetch.push_back(loss);
    for (Value d : gradients(g, loss, {x, w, b})) p.fetch.push_back(d);
  }
  return p;
}

std::vector<std::vector<float>> feed_values(const Program& p) {
  Philox rng(23);
  std::vector<std::vector<float>> in;
  for (Value f : p.feeds) {
    in.emplace_back(size_t(p.g.type(f).shape.numel()));
    for (float& v : in.back()) v = rng.uniform(-2.f, 2.f);
  }
  return in;
}

void check(bool training, bool second_reader) {
  Program p = gate(training, second_reader);
  Executable fused(p.g, p.feeds, p.fetch);
  Executable unfused(p.g, p.feeds, p.fetch, CompileOptions{.fuse = false});
  Executable eager(p.g, p.feeds, p.fetch, CompileOptions{.eager = true});
  Executable reference(p.g, p.feeds, p.fetch, CompileOptions{.backend = "reference"});
  EXPECT_EQ(count_lines(fused.report(), "fused conv2d+bias+sigmoid 'se_expand'"),
            second_reader ? 0 : 1);
  const auto in = feed_values(p);
  const auto got = test_util::run_once(fused, in), want = test_util::run_once(unfused, in),
             oracle = test_util::run_once(eager, in), ref = test_util::run_once(reference, in);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_LE(test_util::worst(got[k], want[k], 1e-5, 1e-5), 1.0) << "fetch " << k;
    EXPECT_LE(test_util::worst(got[k], oracle[k], 1e-5, 1e-5), 1.0) << "fetch " << k;
    EXPECT_LE(test_util::worst(got[k], ref[k], 1e-5, 1e-5), 1.0) << "fetch " << k;
  }
}

TEST(ConvSigmoidFusion, InferenceGateBecomesOneConv) { check(false, false); }
TEST(ConvSigmoidFusion, TrainingGateBecomesOneConvWithTheSameGradients) { check(true, false); }
TEST(ConvSigmoidFusion, AConvOutputWithAnotherReaderKeepsItsSigmoid) { check(true, true); }

}  // namespace
}  // namespace lockstep
