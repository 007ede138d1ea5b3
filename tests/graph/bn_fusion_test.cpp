// The fusion pass on batch-norm chains of a ResNet block: batch_norm_train -> relu,
// batch_norm_train -> add -> relu (identity and projection shortcuts) and, in the backward,
// relu_grad -> batch_norm_train_grad. The fused program's outputs and gradients match the
// unfused compiled program and the eager (op-by-op) one in f32 and under bf16 activations, and
// its gradients match central finite differences of the loss.
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

const Shape kX{8, 4, 4, 6};
constexpr int64_t kC = 6;
constexpr int kNorms = 4;

struct Program {
  Graph g;
  std::vector<Value> feeds;  // x, w, then gamma_k, beta_k per norm
  std::vector<Value> fetch;  // loss, block output, d loss / d feeds (x, gammas, betas)
};

// a = relu(bn0(x)); b = relu(bn1(a) + a); c = relu(bn2(b) + bn3(b)); loss = sum(w * c).
Program block(bool bf16) {
  Program p;
  Graph& g = p.g;
  Value x = g.input({DType::f32, kX}, "x");
  Value w = g.input({DType::f32, kX}, "w");
  p.feeds = {x, w};
  std::vector<Value> gamma, beta;
  for (int k = 0; k < kNorms; ++k) {
    gamma.push_back(g.input({DType::f32, Shape{kC}}, "gamma"));
    beta.push_back(g.input({DType::f32, Shape{kC}}, "beta"));
    p.feeds.push_back(gamma.back());
    p.feeds.push_back(beta.back());
  }
  auto bn = [&](Value v, int k) {
    return g.add_multi(op::batch_norm_train, {v, gamma[size_t(k)], beta[size_t(k)]},
                       Attrs{{"epsilon", 1e-3}}, "bn" + std::to_string(k))[0];
  };
  Value h = bf16 ? g.add(op::cast, {x}, Attrs{{"dtype", std::string("bfloat16")}}) : x;
  Value a = g.add(op::relu, {bn(h, 0)});
  Value b = g.add(op::relu, {g.add(op::add, {bn(a, 1), a})});
  Value c = g.add(op::relu, {g.add(op::add, {bn(b, 2), bn(b, 3)})});
  if (bf16) c = g.add(op::cast, {c}, Attrs{{"dtype", std::string("float32")}});
  I axes{0, 1, 2, 3};
  Value loss =
      g.add(op::reduce_sum, {g.add(op::mul, {c, w})}, Attrs{{"axes", axes}, {"keepdims", false}});
  std::vector<Value> wrt{x};
  for (size_t i = 2; i < p.feeds.size(); ++i) wrt.push_back(p.feeds[i]);
  p.fetch = {loss, c};
  for (Value d : gradients(g, loss, wrt)) p.fetch.push_back(d);
  return p;
}

std::vector<std::vector<float>> feed_values() {
  Philox rng(7);
  std::vector<std::vector<float>> v;
  auto fill = [&](int64_t n, float lo, float hi) {
    std::vector<float> t(static_cast<size_t>(n));
    for (float& f : t) f = rng.uniform(lo, hi);
    v.push_back(t);
  };
  fill(kX.numel(), -2.f, 2.f);  // x
  fill(kX.numel(), -1.f, 1.f);  // w
  for (int k = 0; k < kNorms; ++k) {
    fill(kC, 0.5f, 1.5f);   // gamma
    fill(kC, -0.5f, 0.5f);  // beta
  }
  return v;
}

constexpr auto* run = &test_util::run_once;

int count_lines(const std::vector<std::string>& report, const std::string& what) {
  return int(std::count_if(report.begin(), report.end(), [&](const std::string& l) {
    return l.find(what) != std::string::npos;
  }));
}

using test_util::worst;

void check_fused_matches_unfused(bool bf16) {
  Program p = block(bf16);
  Executable fused(p.g, p.feeds, p.fetch);
  Executable unfused(p.g, p.feeds, p.fetch, CompileOptions{.fuse = false});
  Executable eager(p.g, p.feeds, p.fetch, CompileOptions{.eager = true});
  const auto& r = fused.report();
  std::string all;
  for (const std::string& l : r) all += l + "\n";
  EXPECT_EQ(count_lines(r, "fused batch_norm+relu"), 1) << all;
  EXPECT_EQ(count_lines(r, "fused batch_norm+add+relu"), 2) << all;
  EXPECT_EQ(count_lines(r, "fused relu_grad+batch_norm_train_grad"), kNorms) << all;
  // bn0 (relu, no residual) recomputes its mask from x in float32; the residual ones read y.
  EXPECT_EQ(count_lines(r, "(mask from x)"), bf16 ? 0 : 1) << all;
  EXPECT_EQ(count_lines(r, "bf16:"), 0) << "a norm ran through the conversion adapter\n" << all;
  EXPECT_LT(fused.num_scheduled(), unfused.num_scheduled());
  // The fused program no longer runs relu or relu_grad.
  bool relu_left = false;
  for (const Node& n : fused.graph().nodes()) relu_left |= n.op == op::relu;
  EXPECT_FALSE(relu_left);

  const auto in = feed_values();
  const auto got = run(fused, in), want = run(unfused, in), oracle = run(eager, in);
  ASSERT_EQ(got.size(), want.size());
  // f32: the same arithmetic up to summation order. bf16: the fused kernels skip the rounding
  // of the intermediate bn(x) and bn(x) + z to bf16, which moves results by bf16 steps.
  const double atol = bf16 ? 3e-2 : 1e-4, rtol = bf16 ? 3e-2 : 1e-4;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_LE(worst(got[k], want[k], atol, rtol), 1.0) << "fetch " << k << " vs unfused";
    EXPECT_LE(worst(got[k], oracle[k], atol, rtol), 1.0) << "fetch " << k << " vs eager";
  }
  if (!bf16) {  // the unfused compiled program and the eager one agree exactly in f32
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_LE(worst(want[k], oracle[k], 1e-6, 1e-6), 1.0) << "fetch " << k;
  }
}

TEST(BatchNormFusion, FusedMatchesUnfusedAndEagerF32) { check_fused_matches_unfused(false); }
TEST(BatchNormFusion, FusedMatchesUnfusedAndEagerBf16) { check_fused_matches_unfused(true); }

// MobileNetV2's BatchNormalization -> ReLU(max_value=6) in training: batch_norm_train -> relu6
// becomes one batch_norm_train (activation relu6), and relu6_grad -> batch_norm_train_grad one
// gradient node that masks dy by 0 < y < 6; EfficientNet's -> swish the same way (below). Two
// layers, gamma large enough that outputs clip at both 0 and 6; fused = unfused = eager = reference
// backend, f32 and bf16 activations.
void check_activation(const std::string& act, bool bf16) {
  Graph g;
  Value x = g.input({DType::f32, kX}, "x");
  Value w = g.input({DType::f32, kX}, "w");
  std::vector<Value> feeds{x, w}, wrt{x};
  auto bn_relu6 = [&](Value v, int k) {
    Value gamma = g.input({DType::f32, Shape{kC}}, "gamma"),
          beta = g.input({DType::f32, Shape{kC}}, "beta");
    feeds.push_back(gamma);
    feeds.push_back(beta);
    wrt.push_back(gamma);
    wrt.push_back(beta);
    return g.add(OpId::named(act),
                 {g.add_multi(op::batch_norm_train, {v, gamma, beta}, Attrs{{"epsilon", 1e-3}},
                              "bn" + std::to_string(k))[0]});
  };
  Value h = bf16 ? g.add(op::cast, {x}, Attrs{{"dtype", std::string("bfloat16")}}) : x;
  Value y = bn_relu6(bn_relu6(h, 0), 1);
  if (bf16) y = g.add(op::cast, {y}, Attrs{{"dtype", std::string("float32")}});
  Value loss = g.add(op::reduce_sum, {g.add(op::mul, {y, w})},
                     Attrs{{"axes", I{0, 1, 2, 3}}, {"keepdims", false}});
  std::vector<Value> fetch{loss, y};
  for (Value d : gradients(g, loss, wrt)) fetch.push_back(d);

  Executable fused(g, feeds, fetch);
  Executable unfused(g, feeds, fetch, CompileOptions{.fuse = false});
  Executable eager(g, feeds, fetch, CompileOptions{.eager = true});
  Executable reference(g, feeds, fetch, CompileOptions{.backend = "reference"});
  const auto& r = fused.report();
  std::string all;
  for (const std::string& l : r) all += l + "\n";
  if (act == "relu6") {
    EXPECT_EQ(count_lines(r, "fused batch_norm+relu6"), 2) << all;
    EXPECT_EQ(count_lines(r, "fused relu6_grad+batch_norm_train_grad"), 2) << all;
    // float32: the gradient recomputes the mask from x and beta and never reads y (bf16: it
    // reads y, which the forward rounded on the way to memory).
    EXPECT_EQ(count_lines(r, "(mask from x)"), bf16 ? 0 : 2) << all;
  } else {
    EXPECT_EQ(count_lines(r, "fused batch_norm+swish"), 2) << all;
  }
  for (const Node& n : fused.graph().nodes()) EXPECT_NE(n.op, OpId::named(act));
  // The activations are views now (free); the two activation gradients are gone.
  EXPECT_EQ(fused.num_scheduled(), unfused.num_scheduled() - 2);

  Philox rng(11);
  std::vector<std::vector<float>> in;
  auto fill = [&](int64_t n, float lo, float hi) {
    std::vector<float> t(static_cast<size_t>(n));
    for (float& f : t) f = rng.uniform(lo, hi);
    in.push_back(t);
  };
  fill(kX.numel(), -2.f, 2.f);
  fill(kX.numel(), -1.f, 1.f);
  for (int k = 0; k < 2; ++k) {
    fill(kC, 3.f, 5.f);  // gamma: bn(x) spans about [-7, 9]
    fill(kC, 0.5f, 1.5f);
  }
  const auto got = run(fused, in), want = run(unfused, in), oracle = run(eager, in),
             ref = run(reference, in);
  if (act == "relu6") {  // clipped at both ends somewhere: both sides of the mask exercised
    const auto& out = got[1];
    EXPECT_GT(std::count(out.begin(), out.end(), 0.f), 0);
    EXPECT_GT(std::count(out.begin(), out.end(), 6.f), 0);
  }
  const double atol = bf16 ? 5e-2 : 1e-4, rtol = bf16 ? 5e-2 : 1e-4;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_LE(worst(got[k], want[k], atol, rtol), 1.0) << "fetch " << k << " vs unfused";
    EXPECT_LE(worst(got[k], oracle[k], atol, rtol), 1.0) << "fetch " << k << " vs eager";
    EXPECT_LE(worst(ref[k], want[k], atol, rtol), 1.0) << "fetch " << k << " reference";
  }
}

TEST(BatchNormFusion, TrainRelu6FusedMatchesUnfusedEagerAndReferenceF32) {
  check_activation("relu6", false);
}
TEST(BatchNormFusion, TrainRelu6FusedMatchesUnfusedEagerAndReferenceBf16) {
  check_activation("relu6", true);
}
// EfficientNet's BatchNormalization -> swish: the forward writes swish(bn(x)), the gradient
// recomputes bn(x) from x and beta.
TEST(BatchNormFusion, TrainSwishFusedMatchesUnfusedEagerAndReferenceF32) {
  check_activation("swish", false);
}
TEST(BatchNormFusion, TrainSwishFusedMatchesUnfusedEagerAndReferenceBf16) {
  check_activation("swish", true);
}

// Directional finite differences of the fused program's loss along random directions, for x
// and for every gamma and beta, against the fused program's gradients.
TEST(BatchNormFusion, FusedGradientsMatchFiniteDifferences) {
  Program p = block(false);
  Executable exe(p.g, p.feeds, p.fetch);
  auto in = feed_values();
  const auto base = run(exe, in);
  Philox rng(3);
  // feeds index -> gradient fetch index: x -> 2, feed i >= 2 -> i + 1.
  for (size_t f = 0; f < in.size(); ++f) {
    if (f == 1) continue;  // w: not differentiated
    const size_t gk = f == 0 ? 2 : f + 1;
    std::vector<float> u(in[f].size());
    double analytic = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      u[i] = rng.uniform(-1.f, 1.f);
      analytic += double(u[i]) * base[gk][i];
    }
    const float eps = 2e-3f;
    auto loss_at = [&](float s) {
      auto moved = in;
      for (size_t i = 0; i < u.size(); ++i) moved[f][i] += s * u[i];
      return double(run(exe, moved)[0][0]);
    };
    const double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    EXPECT_NEAR(numeric, analytic, 2e-2 * std::max(1.0, std::fabs(analytic))) << "feed " << f;
  }
}

// Inference: batch_norm_infer -> relu and batch_norm_infer -> add -> relu (as a ResNet block's
// evaluation and predict programs run them) fuse the same way; the fused program matches the
// unfused one, the eager one and the reference backend, in f32 and with bf16 activations.
void check_infer_fusion(bool bf16) {
  Graph g;
  Value x = g.input({DType::f32, kX}, "x");
  std::vector<Value> feeds{x};
  auto bn = [&](Value v, int k) {
    std::vector<Value> in{v};
    for (const char* p : {"gamma", "beta", "mean", "var"}) {
      in.push_back(g.input({DType::f32, Shape{kC}}, std::string(p) + std::to_string(k)));
      feeds.push_back(in.back());
    }
    return g.add(op::batch_norm_infer, in, Attrs{{"epsilon", 1e-3}}, "bn" + std::to_string(k));
  };
  Value h = bf16 ? g.add(op::cast, {x}, Attrs{{"dtype", std::string("bfloat16")}}) : x;
  Value a = g.add(op::relu, {bn(h, 0)});
  Value b = g.add(op::relu, {g.add(op::add, {bn(a, 1), a})});
  Value c = g.add(op::relu, {g.add(op::add, {bn(b, 2), bn(b, 3)})});
  if (bf16) c = g.add(op::cast, {c}, Attrs{{"dtype", std::string("float32")}});
  Executable fused(g, feeds, {c});
  Executable unfused(g, feeds, {c}, CompileOptions{.fuse = false});
  Executable eager(g, feeds, {c}, CompileOptions{.eager = true});
  Executable reference(g, feeds, {c}, CompileOptions{.backend = "reference"});
  std::string all;
  for (const std::string& l : fused.report()) all += l + "\n";
  EXPECT_EQ(count_lines(fused.report(), "fused batch_norm_infer+relu"), 1) << all;
  EXPECT_EQ(count_lines(fused.report(), "fused batch_norm_infer+add+relu"), 2) << all;
  bool relu_left = false;
  for (const Node& n : fused.graph().nodes()) relu_left |= n.op == op::relu;
  EXPECT_FALSE(relu_left);
  Philox rng(9);
  std::vector<std::vector<float>> in;
  in.emplace_back(size_t(kX.numel()));
  for (float& v : in[0]) v = rng.uniform(-2.f, 2.f);
  for (int k = 0; k < kNorms; ++k)
    for (auto [lo, hi] : {std::pair{0.5f, 1.5f}, {-0.5f, 0.5f}, {-0.3f, 0.3f}, {0.5f, 2.f}}) {
      in.emplace_back(size_t(kC));
      for (float& v : in.back()) v = rng.uniform(lo, hi);
    }
  const auto got = run(fused, in), want = run(unfused, in), oracle = run(eager, in),
             ref = run(reference, in);
  const double tol = bf16 ? 3e-2 : 1e-5;
  EXPECT_LE(worst(got[0], want[0], tol, tol), 1.0) << "vs unfused";
  EXPECT_LE(worst(got[0], oracle[0], tol, tol), 1.0) << "vs eager";
  EXPECT_LE(worst(got[0], ref[0], tol, tol), 1.0) << "vs reference";
}

TEST(BatchNormFusion, InferenceFusedMatchesUnfusedEagerAndReferenceF32) {
  check_infer_fusion(false);
}
TEST(BatchNormFusion, InferenceFusedMatchesUnfusedEagerAndReferenceBf16) {
  check_infer_fusion(true);
}

// Inference: conv2d [+ bias] -> batch_norm_infer [-> relu] folds into one conv2d whose weights
// and bias come from a batch_norm_fold node; a batch norm whose conv output has another reader,
// or that adds a residual, stays. The folded program matches the unfused, eager and reference
// ones.
// bf16: as a mixed_bfloat16 model builds it: x and w cast to bfloat16 for the conv, the bias
// and the batch norm's parameters float32.
void check_fold(bool bias, bool relu, bool bf16 = false) {
  Graph g;
  Value x = g.input({DType::f32, Shape{4, 10, 10, 16}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 16, 24}}, "w");
  std::vector<Value> feeds{x, w};
  auto to_bf16 = [&](Value v) {
    return bf16 ? g.add(op::cast, {v}, Attrs{{"dtype", std::string("bfloat16")}}) : v;
  };
  Attrs ca{{"padding", std::string("same")}};
  Value y;
  if (bias) {
    feeds.push_back(g.input({DType::f32, Shape{24}}, "b"));
    Value conv = g.add(op::conv2d, {to_bf16(x), to_bf16(w)}, ca, "conv");
    y = g.add(op::bias_add, {conv, to_bf16(feeds.back())});
  } else {
    y = g.add(op::conv2d, {to_bf16(x), to_bf16(w)}, ca, "conv");
  }
  std::vector<Value> bn_in{y};
  for (const char* p : {"gamma", "beta", "mean", "var"}) {
    bn_in.push_back(g.input({DType::f32, Shape{24}}, p));
    feeds.push_back(bn_in.back());
  }
  Value out = g.add(op::batch_norm_infer, bn_in, Attrs{{"epsilon", 1e-3}}, "bn");
  if (relu) out = g.add(op::relu, {out});
  if (bf16) out = g.add(op::cast, {out}, Attrs{{"dtype", std::string("float32")}});
  Executable fused(g, feeds, {out});
  Executable unfused(g, feeds, {out}, CompileOptions{.fuse = false});
  Executable eager(g, feeds, {out}, CompileOptions{.eager = true});
  Executable reference(g, feeds, {out}, CompileOptions{.backend = "reference"});
  std::string all;
  for (const std::string& l : fused.report()) all += l + "\n";
  EXPECT_EQ(count_lines(fused.report(), "folded batch_norm_infer 'bn' into conv2d 'conv'"), 1)
      << all;
  int bn_left = 0;
  for (const Node& n : fused.graph().nodes()) bn_left += n.op == op::batch_norm_infer;
  EXPECT_EQ(bn_left, 0) << all;
  Philox rng(13);
  std::vector<std::vector<float>> in;
  for (Value f : feeds) {
    in.emplace_back(size_t(g.type(f).shape.numel()));
    const bool variance = g.node(f.node).name == "var";
    for (float& v : in.back()) v = variance ? rng.uniform(0.5f, 2.f) : rng.uniform(-1.f, 1.f);
  }
  const auto got = run(fused, in), want = run(unfused, in), oracle = run(eager, in),
             ref = run(reference, in);
  // Folding rounds w * s instead of (conv(x, w) - mean) * s: float rounding apart (bf16: the
  // folded weights and the conv's output each rounded to bf16 once).
  const double tol = bf16 ? 3e-2 : 1e-5;
  EXPECT_LE(worst(got[0], want[0], tol, tol), 1.0) << "vs unfused";
  EXPECT_LE(worst(got[0], oracle[0], tol, tol), 1.0) << "vs eager";
  EXPECT_LE(worst(got[0], ref[0], tol, tol), 1.0) << "vs reference";
}

TEST(BatchNormFusion, InferenceFoldsIntoConv) { check_fold(false, false); }
TEST(BatchNormFusion, InferenceFoldsIntoConvWithBiasAndRelu) { check_fold(true, true); }
TEST(BatchNormFusion, InferenceFoldsIntoBf16Conv) { check_fold(false, true, true); }
TEST(BatchNormFusion, InferenceFoldsIntoBf16ConvWithBias) { check_fold(true, false, true); }

// A program compiled fused, unfused, eager and on the reference backend, and its output from
// each on the same inputs: x in [-4, 4] (past relu6's kinks), var in [0.5, 2], the rest in
// [-1, 1]. `report` and `all` (its lines joined) are the fused program's.
struct FourWays {
  std::vector<std::string> report;
  std::string all;
  std::vector<float> got, want, oracle, ref;  // fused, unfused, eager, reference
};

FourWays run_four_ways(const Graph& g, const std::vector<Value>& feeds, Value out, uint64_t seed) {
  Executable fused(g, feeds, {out});
  Executable unfused(g, feeds, {out}, CompileOptions{.fuse = false});
  Executable eager(g, feeds, {out}, CompileOptions{.eager = true});
  Executable reference(g, feeds, {out}, CompileOptions{.backend = "reference"});
  FourWays r{fused.report(), "", {}, {}, {}, {}};
  for (const std::string& l : r.report) r.all += l + "\n";
  Philox rng(seed);
  std::vector<std::vector<float>> in;
  for (Value f : feeds) {
    in.emplace_back(size_t(g.type(f).shape.numel()));
    const std::string& name = g.node(f.node).name;
    for (float& v : in.back())
      v = name == "var" ? rng.uniform(0.5f, 2.f)
          : name == "x" ? rng.uniform(-4.f, 4.f)
                        : rng.uniform(-1.f, 1.f);
  }
  r.got = run(fused, in)[0];
  r.want = run(unfused, in)[0];
  r.oracle = run(eager, in)[0];
  r.ref = run(reference, in)[0];
  return r;
}

// Mixed precision, a depthwise conv as DepthwiseConv2D builds it: the float32 kernel (3, 3, C, 1)
// cast to bfloat16 and reshaped to (3, 3, 1, C). The fold takes the float32 kernel through a
// reshape of its own; the program matches the unfused, eager and reference ones.
TEST(BatchNormFusion, InferenceFoldsIntoBf16DepthwiseConv) {
  Graph g;
  const int64_t C = 16;
  Value x = g.input({DType::f32, Shape{2, 7, 7, C}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, C, 1}}, "w");
  std::vector<Value> feeds{x, w};
  auto bf16 = [&](Value v) {
    return g.add(op::cast, {v}, Attrs{{"dtype", std::string("bfloat16")}});
  };
  Value k = g.add(op::reshape, {bf16(w)}, Attrs{{"shape", std::vector<int64_t>{3, 3, 1, C}}});
  Value y =
      g.add(op::conv2d, {bf16(x), k}, Attrs{{"groups", C}, {"padding", std::string("same")}}, "dw");
  std::vector<Value> bn_in{y};
  for (const char* q : {"gamma", "beta", "mean", "var"}) {
    bn_in.push_back(g.input({DType::f32, Shape{C}}, q));
    feeds.push_back(bn_in.back());
  }
  Value out = g.add(
      op::cast,
      {g.add(op::relu6, {g.add(op::batch_norm_infer, bn_in, Attrs{{"epsilon", 1e-3}}, "bn")})},
      Attrs{{"dtype", std::string("float32")}});
  const FourWays r = run_four_ways(g, feeds, out, 19);
  EXPECT_EQ(count_lines(r.report, "folded batch_norm_infer 'bn' into conv2d 'dw'"), 1) << r.all;
  EXPECT_EQ(count_lines(r.report, "fused conv2d+relu6 'dw'"), 1) << r.all;
  EXPECT_LE(worst(r.got, r.want, 3e-2, 3e-2), 1.0) << "vs unfused";
  EXPECT_LE(worst(r.got, r.oracle, 3e-2, 3e-2), 1.0) << "vs eager";
  EXPECT_LE(worst(r.got, r.ref, 3e-2, 3e-2), 1.0) << "vs reference";
}

// The conv's output read by something else besides the batch norm: no fold.
TEST(BatchNormFusion, InferenceKeepsABatchNormWhoseConvOutputIsShared) {
  Graph g;
  Value x = g.input({DType::f32, Shape{2, 6, 6, 16}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 16, 16}}, "w");
  std::vector<Value> feeds{x, w};
  Value y = g.add(op::conv2d, {x, w}, Attrs{{"padding", std::string("same")}}, "conv");
  std::vector<Value> bn_in{y};
  for (const char* p : {"gamma", "beta", "mean", "var"}) {
    bn_in.push_back(g.input({DType::f32, Shape{16}}, p));
    feeds.push_back(bn_in.back());
  }
  Value out = g.add(op::add, {g.add(op::batch_norm_infer, bn_in, Attrs{{"epsilon", 1e-3}}), y});
  Executable exe(g, feeds, {out});
  EXPECT_EQ(count_lines(exe.report(), "folded"), 0);
}

// Inference, MobileNetV2's strided block: pad -> depthwise conv2d (valid) -> batch_norm_infer ->
// relu6. The pad becomes the conv's explicit pads, the batch norm folds into the conv and the
// relu6 rides on it (activation relu6); the program matches the unfused, eager and reference
// ones, with values spread past both of relu6's kinks (0 and 6).
TEST(BatchNormFusion, InferencePadConvBatchNormRelu6BecomeOneConv) {
  Graph g;
  const int64_t C = 16;
  Value x = g.input({DType::f32, Shape{2, 9, 9, C}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 1, C}}, "w");
  std::vector<Value> feeds{x, w};
  Value p = g.add(op::pad, {x},
                  Attrs{{"before", std::vector<int64_t>{0, 0, 0, 0}},
                        {"after", std::vector<int64_t>{0, 1, 1, 0}}},
                  "pad");
  Value y = g.add(op::conv2d, {p, w},
                  Attrs{{"groups", C},
                        {"strides", std::vector<int64_t>{2, 2}},
                        {"padding", std::string("valid")}},
                  "conv");
  std::vector<Value> bn_in{y};
  for (const char* q : {"gamma", "beta", "mean", "var"}) {
    bn_in.push_back(g.input({DType::f32, Shape{C}}, q));
    feeds.push_back(bn_in.back());
  }
  Value out =
      g.add(op::relu6, {g.add(op::batch_norm_infer, bn_in, Attrs{{"epsilon", 1e-3}}, "bn")});
  const FourWays r = run_four_ways(g, feeds, out, 17);
  EXPECT_EQ(count_lines(r.report, "folded pad 'pad' into conv2d 'conv'"), 1) << r.all;
  EXPECT_EQ(count_lines(r.report, "fused conv2d+relu6 'conv'"), 1) << r.all;
  int clipped = 0;
  for (float v : r.want) clipped += v == 6.f;
  EXPECT_GT(clipped, 0) << "no value reached relu6's upper kink";
  EXPECT_LE(worst(r.got, r.want, 1e-5, 1e-5), 1.0) << "vs unfused";
  EXPECT_LE(worst(r.got, r.oracle, 1e-5, 1e-5), 1.0) << "vs eager";
  EXPECT_LE(worst(r.got, r.ref, 1e-5, 1e-5), 1.0) << "vs reference";
}

}  // namespace
}  // namespace lockstep
