// The fusion pass's pad fold in training programs: pad (zeros on H and W) -> conv2d "valid",
// with the conv's filter gradient reading the padded tensor and the pad's gradient a slice of
// the conv's input gradient, becomes one conv2d with explicit pads whose gradients take the
// pads too (no padded copy written, no slice run). Loss and gradients match the unfused
// compiled program, the eager one and the reference backend; a pad with another reader stays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph/graph_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;

struct Case {
  Shape x;                 // NHWC
  int64_t k, out, stride;  // filter k x k, output channels (0: depthwise), stride
  I before, after;         // the pad
};

struct Program {
  Graph g;
  std::vector<Value> feeds;  // x, w, r
  std::vector<Value> fetch;  // loss, y, then d loss / d wrt
};

// y = conv2d(pad(x), w) "valid"; loss = sum(y * r) [+ sum(relu(pad(x))) with a second reader];
// gradients with respect to x (unless filter_only) and w.
Program program(const Case& c, bool second_reader, bool filter_only) {
  Program p;
  Graph& g = p.g;
  const int64_t C = c.x[3];
  const bool depthwise = c.out == 0;
  const int64_t O = depthwise ? C : c.out;
  Value x = g.input({DType::f32, c.x}, "x");
  Value w = g.input({DType::f32, Shape{c.k, c.k, depthwise ? 1 : C, O}}, "w");
  Value padded = g.add(op::pad, {x}, Attrs{{"before", c.before}, {"after", c.after}}, "pad");
  Value y = g.add(op::conv2d, {padded, w},
                  Attrs{{"groups", depthwise ? C : int64_t(1)},
                        {"strides", I{c.stride, c.stride}},
                        {"padding", std::string("valid")}},
                  "conv");
  Value r = g.input(g.type(y), "r");
  p.feeds = {x, w, r};
  const I axes{0, 1, 2, 3};
  const Attrs sum{{"axes", axes}, {"keepdims", false}};
  Value loss = g.add(op::reduce_sum, {g.add(op::mul, {y, r})}, sum);
  if (second_reader)
    loss = g.add(op::add, {loss, g.add(op::reduce_sum, {g.add(op::relu, {padded})}, sum)});
  p.fetch = {loss, y};
  const std::vector<Value> wrt = filter_only ? std::vector<Value>{w} : std::vector<Value>{x, w};
  for (Value d : gradients(g, loss, wrt)) p.fetch.push_back(d);
  return p;
}

std::vector<std::vector<float>> feed_values(const Program& p) {
  Philox rng(23);
  std::vector<std::vector<float>> v;
  for (Value f : p.feeds) {
    v.emplace_back(size_t(p.g.type(f).shape.numel()));
    for (float& e : v.back()) e = rng.uniform(-1.f, 1.f);
  }
  return v;
}

int count_lines(const std::vector<std::string>& report, const std::string& what) {
  return int(std::count_if(report.begin(), report.end(), [&](const std::string& l) {
    return l.find(what) != std::string::npos;
  }));
}

using test_util::worst;

// Nodes of the compiled graph with op `op`, and nodes that read one (the graph keeps the dead
// nodes a fusion left, which the schedule drops).
int count_ops(const Executable& exe, const std::string& op) {
  int n = 0;
  for (const Node& node : exe.graph().nodes()) n += node.op == OpId::named(op);
  return n;
}
int readers_of(const Executable& exe, const std::string& op) {
  const Graph& g = exe.graph();
  int n = 0;
  for (const Node& node : g.nodes())
    n += std::any_of(node.inputs.begin(), node.inputs.end(),
                     [&](Value v) { return g.node(v.node).op == OpId::named(op); });
  return n;
}

// Compiles fused (default), unfused, eager and on the reference backend; checks the report
// line `want` (or that no pad folded when want is empty) and that every fetch matches.
void check(Program& p, const std::string& want, const std::vector<std::string>& names) {
  Executable fused(p.g, p.feeds, p.fetch);
  Executable unfused(p.g, p.feeds, p.fetch, CompileOptions{.fuse = false});
  Executable eager(p.g, p.feeds, p.fetch, CompileOptions{.eager = true});
  Executable reference(p.g, p.feeds, p.fetch, CompileOptions{.backend = "reference"});
  std::string all;
  for (const std::string& l : fused.report()) all += l + "\n";
  if (want.empty()) {
    EXPECT_EQ(count_lines(fused.report(), "folded pad"), 0) << all;
    EXPECT_EQ(count_lines(reference.report(), "folded pad"), 0) << all;
    EXPECT_GT(readers_of(fused, "pad"), 0) << all;  // the conv still reads the padded copy
  } else {
    EXPECT_EQ(count_lines(fused.report(), want), 1) << all;
    EXPECT_EQ(count_lines(reference.report(), want), 1) << all;
    // Nothing reads a pad or slices any more.
    EXPECT_EQ(readers_of(fused, "pad"), 0) << all;
    EXPECT_EQ(count_ops(fused, "slice"), 0) << all;
    EXPECT_LT(fused.num_scheduled(), unfused.num_scheduled());
  }
  const auto in = feed_values(p);
  const auto got = test_util::run_once(fused, in), want_v = test_util::run_once(unfused, in),
             oracle = test_util::run_once(eager, in), ref = test_util::run_once(reference, in);
  ASSERT_EQ(got.size(), p.fetch.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want_v[k].size()) << names[k];
    EXPECT_LE(worst(got[k], want_v[k], 1e-7, 1e-5), 1.0) << names[k] << " vs unfused";
    EXPECT_LE(worst(got[k], oracle[k], 1e-7, 1e-5), 1.0) << names[k] << " vs eager";
    EXPECT_LE(worst(ref[k], want_v[k], 1e-7, 1e-5), 1.0) << names[k] << " reference vs unfused";
  }
}

void check(const Case& c, bool second_reader, bool filter_only, const std::string& want) {
  Program p = program(c, second_reader, filter_only);
  check(p, want, {"loss", "y", filter_only ? "dw" : "dx", "dw"});
}

// An inverted-residual block around the pad (MobileNetV2's, EfficientNet's): x -> 1x1 expand ->
// relu -> pad -> k x k depthwise / 2 -> relu -> 1x1 project. Every activation has 32 channels, so
// the cpu layout pass keeps them blocked (nChw16c) and the folded convs pad blocked tensors.
Program inverted_residual(int64_t k, const I& before, const I& after) {
  Program p;
  Graph& g = p.g;
  Value x = g.input({DType::f32, Shape{4, 10, 9, 16}}, "x");
  Value we = g.input({DType::f32, Shape{1, 1, 16, 32}}, "expand_w");
  Value wd = g.input({DType::f32, Shape{k, k, 1, 32}}, "w");
  Value wp = g.input({DType::f32, Shape{1, 1, 32, 16}}, "project_w");
  auto conv = [&](Value v, Value w, int64_t groups, int64_t stride, const std::string& name) {
    return g.add(
        op::conv2d, {v, w},
        Attrs{
            {"groups", groups}, {"strides", I{stride, stride}}, {"padding", std::string("valid")}},
        name);
  };
  Value e = g.add(op::relu, {conv(x, we, 1, 1, "expand")});
  Value padded = g.add(op::pad, {e}, Attrs{{"before", before}, {"after", after}}, "pad");
  Value d = g.add(op::relu, {conv(padded, wd, 32, 2, "conv")});
  Value y = conv(d, wp, 1, 1, "project");
  Value r = g.input(g.type(y), "r");
  p.feeds = {x, we, wd, wp, r};
  Value loss = g.add(op::reduce_sum, {g.add(op::mul, {y, r})},
                     Attrs{{"axes", I{0, 1, 2, 3}}, {"keepdims", false}});
  p.fetch = {loss, y};
  for (Value dv : gradients(g, loss, {x, we, wd, wp})) p.fetch.push_back(dv);
  return p;
}

const std::string kFolded = "folded pad 'pad' into conv2d 'conv' and its gradients";

// MobileNetV2's depthwise block: 3x3, stride 2, asymmetric pads (the cpu backend's oneDNN
// depthwise kernels).
TEST(PadFoldTraining, DepthwiseStride2AsymmetricPads) {
  check({Shape{2, 9, 10, 16}, 3, 0, 2, I{0, 0, 1, 0}, I{0, 1, 0, 0}}, false, false, kFolded);
}

// EfficientNet's 5x5 depthwise (Lockstep's own depthwise filter gradient on the cpu backend).
TEST(PadFoldTraining, Depthwise5x5Stride2) {
  check({Shape{2, 11, 12, 8}, 5, 0, 2, I{0, 1, 2, 0}, I{0, 2, 1, 0}}, false, false, kFolded);
}

TEST(PadFoldTraining, RegularConvStride2) {
  check({Shape{2, 9, 8, 5}, 3, 7, 2, I{0, 1, 0, 0}, I{0, 0, 1, 0}}, false, false, kFolded);
}

TEST(PadFoldTraining, RegularConvStride1) {
  check({Shape{3, 7, 6, 4}, 3, 6, 1, I{0, 2, 1, 0}, I{0, 1, 2, 0}}, false, false, kFolded);
}

// No gradient with respect to x (a stem conv on the image): the conv and its filter gradient
// take the pads.
TEST(PadFoldTraining, FilterGradientOnly) {
  check({Shape{2, 9, 10, 3}, 3, 8, 2, I{0, 0, 1, 0}, I{0, 1, 0, 0}}, false, true,
        "folded pad 'pad' into conv2d 'conv' and its filter gradient");
}

// A pad with a reader other than the conv and its gradients is still written: nothing folds.
TEST(PadFoldTraining, PadWithAnotherReaderStays) {
  check({Shape{2, 9, 10, 16}, 3, 0, 2, I{0, 0, 1, 0}, I{0, 1, 0, 0}}, true, false, "");
}

TEST(PadFoldTraining, BlockedInvertedResidual3x3) {
  Program p = inverted_residual(3, I{0, 0, 1, 0}, I{0, 1, 0, 0});
  check(p, kFolded, {"loss", "y", "dx", "d expand_w", "dw", "d project_w"});
}

TEST(PadFoldTraining, BlockedInvertedResidual5x5) {
  Program p = inverted_residual(5, I{0, 1, 2, 0}, I{0, 2, 1, 0});
  check(p, kFolded, {"loss", "y", "dx", "d expand_w", "dw", "d project_w"});
}

// Padding beyond the window's reach ((k - 1) * dilation) does not fold in training.
TEST(PadFoldTraining, PadBeyondTheWindowStays) {
  check({Shape{2, 9, 10, 4}, 3, 0, 2, I{0, 3, 0, 0}, I{0, 0, 1, 0}}, false, false, "");
}

}  // namespace
}  // namespace lockstep
