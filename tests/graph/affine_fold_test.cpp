// fold_channel_affine (src/ops/fusions.cpp): keras.layers.Normalization's
// (x - mean) / max(sqrt(var), eps), with EfficientNet's Rescaling ahead of it, becomes one
// batch_norm_infer pass; the program matches the unfused, eager and reference ones, on images
// and on rank-2 features; a sub whose output something else reads stays as it is.
#include <gtest/gtest.h>

#include <string>

#include "graph/graph_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;
using test_util::worst;

struct Net {
  Graph g;
  std::vector<Value> feeds;
  Value out;
};

// [scale_shift ->] (x - reshape(mean)) / max(sqrt(reshape(var)), 1e-7), as the layers trace it;
// `share`: the sub's output is also added to the result (a second reader).
Net normalization(Shape xs, bool rescale, bool share) {
  Net n;
  Graph& g = n.g;
  const int64_t C = xs[-1];
  Value x = g.input({DType::f32, xs}, "x");
  Value mean = g.input({DType::f32, Shape{C}}, "mean");
  Value var = g.input({DType::f32, Shape{C}}, "var");
  n.feeds = {x, mean, var};
  I bcast(size_t(xs.rank()), 1);
  bcast.back() = C;
  const Attrs shape{{"shape", bcast}};
  Value h = rescale ? g.add(op::scale_shift, {x}, Attrs{{"scale", 1.0 / 255}, {"shift", -0.5}},
                            "rescaling")
                    : x;
  Value sd =
      g.add(op::maximum, {g.add(op::sqrt, {g.add(op::reshape, {var}, shape)}), g.scalar(1e-7f)});
  Value centred = g.add(op::sub, {h, g.add(op::reshape, {mean}, shape)});
  n.out = g.add(op::div, {centred, sd}, {}, "normalization");
  if (share) n.out = g.add(op::add, {n.out, centred});
  return n;
}

struct Result {
  std::string report;
  std::vector<float> got, want, oracle, ref;
};

Result run_all(const Net& n, float lo, float hi) {
  Executable fused(n.g, n.feeds, {n.out});
  Executable unfused(n.g, n.feeds, {n.out}, CompileOptions{.fuse = false});
  Executable eager(n.g, n.feeds, {n.out}, CompileOptions{.eager = true});
  Executable reference(n.g, n.feeds, {n.out}, CompileOptions{.backend = "reference"});
  Result r;
  for (const std::string& l : fused.report()) r.report += l + "\n";
  Philox rng(5);
  std::vector<std::vector<float>> in;
  for (Value f : n.feeds) {
    in.emplace_back(size_t(n.g.type(f).shape.numel()));
    const std::string& name = n.g.node(f.node).name;
    for (float& v : in.back())
      v = name == "var" ? rng.uniform(0.01f, 2.f)
          : name == "x" ? rng.uniform(lo, hi)
                        : rng.uniform(-1.f, 1.f);
  }
  r.got = test_util::run_once(fused, in)[0];
  r.want = test_util::run_once(unfused, in)[0];
  r.oracle = test_util::run_once(eager, in)[0];
  r.ref = test_util::run_once(reference, in)[0];
  return r;
}

void expect_close(const Result& r) {
  EXPECT_LE(worst(r.got, r.want, 1e-5, 1e-5), 1.0) << "vs unfused\n" << r.report;
  EXPECT_LE(worst(r.got, r.oracle, 1e-5, 1e-5), 1.0) << "vs eager";
  EXPECT_LE(worst(r.got, r.ref, 1e-5, 1e-5), 1.0) << "vs reference";
}

TEST(ChannelAffineFold, RescalingAndNormalizationBecomeOneBatchNorm) {
  const Result r = run_all(normalization(Shape{2, 9, 7, 3}, true, false), 0.f, 255.f);
  EXPECT_NE(r.report.find("folded sub+div (and scale_shift 'rescaling') 'normalization' into "
                          "one batch_norm_infer"),
            std::string::npos)
      << r.report;
  expect_close(r);
}

TEST(ChannelAffineFold, NormalizationOfFeaturesBecomesOneBatchNorm) {
  const Result r = run_all(normalization(Shape{6, 20}, false, false), -3.f, 3.f);
  EXPECT_NE(r.report.find("folded sub+div 'normalization' into one batch_norm_infer"),
            std::string::npos)
      << r.report;
  expect_close(r);
}

TEST(ChannelAffineFold, ASubWithAnotherReaderStays) {
  const Result r = run_all(normalization(Shape{2, 4, 4, 3}, true, true), 0.f, 255.f);
  EXPECT_EQ(r.report.find("folded sub+div"), std::string::npos) << r.report;
  expect_close(r);
}

}  // namespace
}  // namespace lockstep
