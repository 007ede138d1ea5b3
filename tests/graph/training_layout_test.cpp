// The cpu layout pass in training programs: every float32 activation whose producer and
// readers all take oneDNN's blocked nChw16c layout (convolutions forward and backward, max_pool2d
// and its gradient, batch norm forward and backward with relu and residual, channel reductions,
// elementwise ops) stays blocked, so no reorder runs between the convolutions of a train step.
// The blocked program's loss and gradients match the unfused program (all NHWC) and the
// reference backend, for the reference CNN's shape of network (with tiled and overlapping
// padded pools) and a ResNet block (strided conv, projection shortcut, global average pool),
// with the direct and the Winograd convolutions; in the CNN the pool gradient also carries the
// conv's relu_grad (fuse_pool_relu_grad).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "graph/graph_test_util.h"
#include "lockstep/core/config.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;
using config::ConvAlgorithm;

using test_util::AlgorithmGuard;

struct Program {
  Graph g;
  std::vector<Value> feeds, fetch;  // fetch: loss, then d loss / d (every feed but the last)
};

Value input(Program& p, Shape s, const std::string& name) {
  Value v = p.g.input({DType::f32, s}, name);
  p.feeds.push_back(v);
  return v;
}

// loss = sum(y * r) with r a last feed of y's shape; gradients with respect to every other feed.
void finish(Program& p, Value y) {
  Value r = input(p, p.g.type(y).shape, "r");
  Value loss = p.g.add(op::reduce_sum, {p.g.add(op::mul, {y, r})},
                       Attrs{{"axes", I{0, 1}}, {"keepdims", false}});
  std::vector<Value> wrt(p.feeds.begin(), p.feeds.end() - 1);
  p.fetch = {loss};
  for (Value d : gradients(p.g, loss, wrt)) p.fetch.push_back(d);
}

Value conv(Program& p, Value x, Shape w, const std::string& padding, int64_t stride,
           const std::string& name) {
  return p.g.add(op::conv2d, {x, input(p, w, name + "_w")},
                 Attrs{{"padding", padding}, {"strides", I{stride, stride}}}, name);
}

// batch_norm_train(v) with gamma and beta feeds of their own ("<name>_gamma", "<name>_beta").
Value bn(Program& p, Value v, const std::string& name) {
  const int64_t c = p.g.type(v).shape[3];
  Value gamma = input(p, Shape{c}, name + "_gamma"), beta = input(p, Shape{c}, name + "_beta");
  return p.g.add_multi(op::batch_norm_train, {v, gamma, beta}, Attrs{{"epsilon", 1e-3}}, name)[0];
}

// The reference CNN's shape: conv+bias+relu, conv+bias+relu, max_pool, flatten, dense.
Program cnn(const I& pool, int64_t pool_stride, const std::string& pool_padding) {
  Program p;
  Graph& g = p.g;
  Value x = input(p, Shape{8, 10, 10, 16}, "x");
  auto conv_relu = [&](Value v, int64_t c, int64_t o, const std::string& name) {
    Value b = input(p, Shape{o}, name + "_b");
    return g.add(op::relu,
                 {g.add(op::bias_add, {conv(p, v, Shape{3, 3, c, o}, "valid", 1, name), b})});
  };
  Value h = conv_relu(conv_relu(x, 16, 32, "c1"), 32, 32, "c2");
  Value pooled = g.add(
      op::max_pool2d, {h},
      Attrs{
          {"pool_size", pool}, {"strides", I{pool_stride, pool_stride}}, {"padding", pool_padding}},
      "pool");
  const Shape ps = g.type(pooled).shape;
  Value flat = g.add(op::reshape, {pooled}, Attrs{{"shape", I{ps[0], ps[1] * ps[2] * ps[3]}}});
  finish(p, g.add(op::matmul, {flat, input(p, Shape{ps[1] * ps[2] * ps[3], 10}, "dense")}));
  return p;
}

// A ResNet block: a = relu(bn(conv3x3/2(x))); y = relu(bn(conv3x3(a)) + bn(conv1x1/2(x)));
// global average pool, dense.
Program resnet_block() {
  Program p;
  Graph& g = p.g;
  Value x = input(p, Shape{8, 16, 16, 16}, "x");
  Value a = g.add(op::relu, {bn(p, conv(p, x, Shape{3, 3, 16, 32}, "same", 2, "ca"), "bna")});
  Value main = bn(p, conv(p, a, Shape{3, 3, 32, 32}, "same", 1, "cb"), "bnb");
  Value shortcut = bn(p, conv(p, x, Shape{1, 1, 16, 32}, "valid", 2, "cs"), "bns");
  Value y = g.add(op::relu, {g.add(op::add, {main, shortcut})});
  Value pooled = g.add(op::reduce_mean, {y}, Attrs{{"axes", I{1, 2}}, {"keepdims", false}}, "gap");
  finish(p, g.add(op::matmul, {pooled, input(p, Shape{32, 10}, "dense")}));
  return p;
}

std::vector<std::vector<float>> feed_values(const Program& p) {
  Philox rng(23);
  std::vector<std::vector<float>> v;
  for (Value f : p.feeds) {
    const std::string& name = p.g.node(f.node).name;
    const bool gamma = name.find("_gamma") != std::string::npos;
    std::vector<float> t(size_t(p.g.type(f).shape.numel()));
    for (float& e : t) e = gamma ? rng.uniform(0.5f, 1.5f) : rng.uniform(-1.f, 1.f);
    v.push_back(std::move(t));
  }
  return v;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-30, err = 0;
  for (float v : b) scale = std::max(scale, double(std::fabs(v)));
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::fabs(double(a[i]) - b[i]));
  return err / scale;
}

std::string layout_lines(const Executable& exe) {
  std::string all;
  for (const std::string& l : exe.report())
    if (l.rfind("layout:", 0) == 0) all += l + "\n";
  return all;
}

// Compiles p three ways (fused with layouts, unfused, reference), checks the blocked one planned
// what `expect` lists, and compares every fetch.
void check(Program& p, const std::vector<std::string>& expect, double tol) {
  Executable exe(p.g, p.feeds, p.fetch);
  const std::string lines = layout_lines(exe);
  for (const std::string& e : expect)
    EXPECT_NE(lines.find(e), std::string::npos) << e << "\n" << lines;
  Executable plain(p.g, p.feeds, p.fetch, CompileOptions{.fuse = false});
  EXPECT_EQ(layout_lines(plain), "");
  Executable reference(p.g, p.feeds, p.fetch, CompileOptions{.backend = "reference"});
  const auto in = feed_values(p);
  const auto got = test_util::run_once(exe, in), want = test_util::run_once(plain, in),
             ref = test_util::run_once(reference, in);
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size());
    EXPECT_LT(relative_error(got[k], want[k]), tol) << "fetch " << k;
    EXPECT_LT(relative_error(got[k], ref[k]), tol) << "fetch " << k;
  }
}

struct PoolCase {
  I pool;
  int64_t stride;
  std::string padding;
  ConvAlgorithm algorithm;
};

class CnnLayouts : public ::testing::TestWithParam<PoolCase> {};

TEST_P(CnnLayouts, BlockedTrainStepMatchesUnblockedAndReference) {
  const PoolCase& k = GetParam();
  AlgorithmGuard guard(k.algorithm);
  Program p = cnn(k.pool, k.stride, k.padding);
  // c1's output (read by c2, c2's filter gradient and relu_grad) and c2's (read by the pool, its
  // gradient and relu_grad), and the gradients between them, are blocked.
  check(p,
        {"'c1 (conv2d)', 'c2 (conv2d)'", "'c2 (conv2d)', 'pool (max_pool2d)'", "max_pool2d_grad",
         "conv2d_backward_input", "relu_grad"},
        1e-5);
  // The pool gradient masks by the conv's relu itself (fuse_pool_relu_grad).
  Executable exe(p.g, p.feeds, p.fetch);
  const auto& r = exe.report();
  EXPECT_NE(std::find(r.begin(), r.end(), "fused max_pool2d_grad+relu_grad 'pool/grad'"), r.end());
}

INSTANTIATE_TEST_SUITE_P(Pools, CnnLayouts,
                         ::testing::Values(PoolCase{{2, 2}, 2, "valid", ConvAlgorithm::kAuto},
                                           PoolCase{{2, 2}, 2, "valid", ConvAlgorithm::kWinograd},
                                           PoolCase{{3, 3}, 2, "same", ConvAlgorithm::kAuto},
                                           PoolCase{{3, 3}, 1, "valid", ConvAlgorithm::kWinograd}));

TEST(ResNetLayouts, BlockedTrainStepMatchesUnblockedAndReference) {
  for (ConvAlgorithm algorithm : {ConvAlgorithm::kAuto, ConvAlgorithm::kDirect}) {
    AlgorithmGuard guard(algorithm);
    Program p = resnet_block();
    // Batch norm forward (fused relu, residual) and backward, the global pool and its gradient
    // run blocked; x and dx (graph input and output) stay NHWC.
    check(p,
          {"'ca (conv2d)', 'bna (batch_norm_train)'", "'gap (reduce_mean)'",
           "batch_norm_train_grad", "reduce_mean_grad", "conv2d_backward_filter"},
          1e-4);
  }
}

// A float32 activation that a graph output, a reshape or a bfloat16 op reads stays NHWC, and so
// does everything tied to it.
TEST(ResNetLayouts, OutputsAndOtherReadersKeepNhwc) {
  Program p;
  Graph& g = p.g;
  Value x = input(p, Shape{4, 8, 8, 16}, "x");
  Value h = conv(p, x, Shape{3, 3, 16, 32}, "same", 1, "c1");  // read by a graph output
  Value k = g.add(op::relu, {conv(p, x, Shape{3, 3, 16, 32}, "same", 1, "c2")});  // by a reshape
  Value flat = g.add(op::reshape, {k}, Attrs{{"shape", I{4, 8 * 8 * 32}}});
  Executable exe(g, p.feeds, {h, flat});
  EXPECT_EQ(layout_lines(exe), "");
}

// EfficientNet's inverted-residual core: 1x1 expand, 5x5 depthwise (strided and not), 1x1
// project. The depthwise filter gradients run Lockstep's kernel (oneDNN's depthwise kernel takes
// 3x3 only) on the blocked activations the layout pass keeps between the convolutions.
TEST(DepthwiseLayouts, BlockedDepthwise5x5TrainStepMatchesUnblockedAndReference) {
  Program p;
  Graph& g = p.g;
  Value x = input(p, Shape{4, 9, 9, 16}, "x");
  auto depthwise = [&](Value v, int64_t stride, const std::string& name) {
    const int64_t c = g.type(v).shape[3];
    return g.add(
        op::conv2d, {v, input(p, Shape{5, 5, 1, c}, name + "_w")},
        Attrs{{"padding", std::string("same")}, {"strides", I{stride, stride}}, {"groups", c}},
        name);
  };
  Value e = g.add(op::relu, {conv(p, x, Shape{1, 1, 16, 48}, "valid", 1, "expand")});
  Value d1 = g.add(op::relu, {depthwise(e, 1, "dw1")});
  Value d2 = g.add(op::relu, {depthwise(d1, 2, "dw2")});
  Value y = conv(p, d2, Shape{1, 1, 48, 32}, "valid", 1, "project");
  Value pooled = g.add(op::reduce_mean, {y}, Attrs{{"axes", I{1, 2}}, {"keepdims", false}}, "gap");
  finish(p, g.add(op::matmul, {pooled, input(p, Shape{32, 10}, "dense")}));
  check(p,
        {"'dw1 (conv2d)', 'dw2 (conv2d)'", "'dw1/grad (conv2d_backward_filter)'",
         "'dw2/grad (conv2d_backward_filter)'"},
        1e-4);
}

// MobileNetV2's and EfficientNetB0's batch norms, blocked: expand 1x1 -> bn + relu6, depthwise
// 3x3 -> bn + swish, project 1x1 -> bn (linear). 7x9 positions: each channel block's run of 63
// rows ends inside a four-row group of the kernels' accumulators and inside a 64-row block, and
// the threads' shares split a run; three channel blocks.
TEST(BatchNormLayouts, BlockedRelu6SwishAndLinearOnOddRunsMatchUnblockedAndReference) {
  Program p;
  Graph& g = p.g;
  Value x = input(p, Shape{3, 7, 9, 16}, "x");
  Value e = g.add(op::relu6, {bn(p, conv(p, x, Shape{1, 1, 16, 48}, "valid", 1, "expand"), "bne")});
  Value dw =
      g.add(op::conv2d, {e, input(p, Shape{3, 3, 1, 48}, "dw_w")},
            Attrs{{"padding", std::string("same")}, {"strides", I{1, 1}}, {"groups", 48}}, "dw");
  Value d = g.add(op::swish, {bn(p, dw, "bnd")});
  Value y = bn(p, conv(p, d, Shape{1, 1, 48, 32}, "valid", 1, "project"), "bnp");
  Value pooled = g.add(op::reduce_mean, {y}, Attrs{{"axes", I{1, 2}}, {"keepdims", false}}, "gap");
  finish(p, g.add(op::matmul, {pooled, input(p, Shape{32, 10}, "dense")}));
  check(p,
        {"'bne (batch_norm_train)'", "'bnd (batch_norm_train)'", "'bnp (batch_norm_train)'",
         "'bne/grad (batch_norm_train_grad)'", "'bnd/grad (batch_norm_train_grad)'"},
        1e-4);
}

// EfficientNet's squeeze-and-excitation: x -> conv -> swish -> h; s = sigmoid(conv1x1(relu(
// conv1x1(mean over H, W of h)))); y = h * s ([N, H, W, C] times one [1, 1, C] row per image)
// -> project conv. The scale multiply and its gradient's multiply take h and y blocked (the
// per-image row stays plain), so h, y and the convs around them need no reorder.
TEST(SqueezeExcitationLayouts, BlockedScaleTrainStepMatchesUnblockedAndReference) {
  Program p;
  Graph& g = p.g;
  Value x = input(p, Shape{4, 6, 6, 16}, "x");
  Value h = g.add(op::swish, {conv(p, x, Shape{3, 3, 16, 32}, "same", 1, "expand")});
  Value sq = g.add(op::reduce_mean, {h}, Attrs{{"axes", I{1, 2}}, {"keepdims", true}}, "squeeze");
  Value r = g.add(op::relu, {conv(p, sq, Shape{1, 1, 32, 8}, "valid", 1, "se_reduce")});
  Value s = g.add(op::sigmoid, {conv(p, r, Shape{1, 1, 8, 32}, "valid", 1, "se_expand")});
  Value y = g.add(op::mul, {h, s}, {}, "excite");
  Value out = conv(p, y, Shape{1, 1, 32, 16}, "valid", 1, "project");
  Value pooled = g.add(op::reduce_mean, {out}, Attrs{{"axes", I{1, 2}}, {"keepdims", false}});
  finish(p, g.add(op::matmul, {pooled, input(p, Shape{16, 10}, "dense")}));
  check(p, {"'excite (mul)', 'project (conv2d)'", "'squeeze (reduce_mean)'"}, 1e-4);
}

// EfficientNet's drop-connect: project conv -> y * m, m one scalar per image [N, 1, 1, 1] (a
// Dropout with noise_shape (None, 1, 1, 1), no gradient), + the shortcut (a conv's) -> conv. The
// multiply and its gradient take y and the product blocked (each image's elements are contiguous in
// nChw16c too), so the residual add and the convs around it need no reorder.
TEST(DropConnectLayouts, BlockedPerImageScaleTrainStepMatchesUnblockedAndReference) {
  Program p;
  Graph& g = p.g;
  Value x = input(p, Shape{4, 6, 6, 16}, "x");
  Value m = g.add(op::stop_gradient, {input(p, Shape{4, 1, 1, 1}, "mask")});
  Value shortcut = conv(p, x, Shape{3, 3, 16, 16}, "same", 1, "stem");
  Value h = g.add(op::relu, {conv(p, shortcut, Shape{3, 3, 16, 32}, "same", 1, "expand")});
  Value y = conv(p, h, Shape{1, 1, 32, 16}, "valid", 1, "project");
  Value d = g.add(op::add, {g.add(op::mul, {y, m}, {}, "drop"), shortcut}, {}, "residual");
  Value out = conv(p, d, Shape{3, 3, 16, 16}, "same", 1, "next");
  Value pooled = g.add(op::reduce_mean, {out}, Attrs{{"axes", I{1, 2}}, {"keepdims", false}});
  finish(p, g.add(op::matmul, {pooled, input(p, Shape{16, 10}, "dense")}));
  check(p, {"'project (conv2d)', 'drop (mul)', 'residual (add)', 'next (conv2d)'"}, 1e-4);
}

}  // namespace
}  // namespace lockstep
