// The cpu backend's Winograd convolutions (config::ConvAlgorithm): which convs take them, and
// that forward, backward-input and backward-filter agree with the direct algorithm and with the
// reference backend to Winograd's rounding, with a fused bias and relu, both paddings, a channel
// count that is not a multiple of 16, and inside a compiled train step against central finite
// differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "backends/cpu/conv_chain.h"  // onednn_offers_winograd, onednn_condition
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

struct Case {
  int64_t n, h, w, c, o;
  std::string padding;
  bool bias_relu;
};

struct Program {
  Graph g;
  std::vector<Value> feeds;  // x, w, r (loss weights), [b]
  std::vector<Value> fetch;  // loss, y, dx, dw, [db]
};

// y = conv2d(x, w [+ b, relu]); loss = sum(y * r).
Program conv_program(const Case& k) {
  Program p;
  Graph& g = p.g;
  Value x = g.input({DType::f32, Shape{k.n, k.h, k.w, k.c}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, k.c, k.o}}, "w");
  const int64_t oh = k.padding == "same" ? k.h : k.h - 2, ow = k.padding == "same" ? k.w : k.w - 2;
  Value r = g.input({DType::f32, Shape{k.n, oh, ow, k.o}}, "r");
  p.feeds = {x, w, r};
  Attrs a{{"padding", k.padding}};
  Value y;
  if (k.bias_relu) {
    Value b = g.input({DType::f32, Shape{k.o}}, "b");
    p.feeds.push_back(b);
    a.set("fused_bias", true);
    a.set("activation", "relu");
    y = g.add(op::conv2d, {x, w, b}, a, "conv");
  } else {
    y = g.add(op::conv2d, {x, w}, a, "conv");
  }
  Value loss = g.add(op::reduce_sum, {g.add(op::mul, {y, r})},
                     Attrs{{"axes", I{0, 1, 2, 3}}, {"keepdims", false}});
  std::vector<Value> wrt{x, w};
  if (k.bias_relu) wrt.push_back(p.feeds[3]);
  p.fetch = {loss, y};
  for (Value d : gradients(g, loss, wrt)) p.fetch.push_back(d);
  return p;
}

std::vector<std::vector<float>> feed_values(const Program& p) {
  Philox rng(11);
  std::vector<std::vector<float>> v;
  for (Value f : p.feeds) {
    std::vector<float> t(size_t(p.g.type(f).shape.numel()));
    for (float& e : t) e = rng.uniform(-1.f, 1.f);
    v.push_back(std::move(t));
  }
  return v;
}

constexpr auto* run = &test_util::run_once;

int winograd_kernels(const Executable& exe) {
  return int(std::count_if(exe.report().begin(), exe.report().end(), [](const std::string& l) {
    return l.rfind("algorithm: conv2d", 0) == 0 && l.find("winograd") != std::string::npos;
  }));
}

// Whether oneDNN offers Winograd on this CPU (its kernels need AVX-512: Zen 4/5 and Xeons have
// it), named in the output: where it does not, the convs run direct and no kernel says winograd.
bool winograd_offered() {
  const bool offered = cpu::onednn_offers_winograd();
  std::cout << "[ condition ] oneDNN Winograd " << (offered ? "offered" : "not offered") << " on "
            << cpu::onednn_condition() << "\n";
  ::testing::Test::RecordProperty("onednn_winograd", offered ? "offered" : "not offered");
  return offered;
}

// Largest |a - b| relative to the largest |b| of the tensor.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-30, err = 0;
  for (float v : b) scale = std::max(scale, double(std::fabs(v)));
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::fabs(double(a[i]) - b[i]));
  return err / scale;
}

class ConvAlgorithmCase : public ::testing::TestWithParam<Case> {};

TEST_P(ConvAlgorithmCase, WinogradMatchesDirectAndReference) {
  const Case k = GetParam();
  const bool offered = winograd_offered();
  Program p = conv_program(k);
  const auto in = feed_values(p);
  std::vector<std::vector<float>> wino, direct, ref;
  {
    AlgorithmGuard guard(ConvAlgorithm::kWinograd);
    Executable exe(p.g, p.feeds, p.fetch);
    // conv2d, conv2d_backward_input, conv2d_backward_filter
    EXPECT_EQ(winograd_kernels(exe), offered ? 3 : 0);
    wino = run(exe, in);
  }
  {
    AlgorithmGuard guard(ConvAlgorithm::kDirect);
    Executable exe(p.g, p.feeds, p.fetch);
    EXPECT_EQ(winograd_kernels(exe), 0);
    direct = run(exe, in);
  }
  Executable reference(p.g, p.feeds, p.fetch, CompileOptions{.backend = "reference"});
  ref = run(reference, in);
  ASSERT_EQ(wino.size(), ref.size());
  for (size_t f = 0; f < wino.size(); ++f) {
    // Winograd's transforms round differently: up to 1.4e-6 of the tensor's scale here (sums of
    // 9 * C unit-scale products). The direct algorithm stays within 1e-6.
    EXPECT_LT(relative_error(wino[f], ref[f]), 1e-5) << "fetch " << f;
    EXPECT_LT(relative_error(direct[f], ref[f]), 1e-6) << "fetch " << f;
    if (offered && f >= 1 && f <= 3) {  // y, dx, dw: the conv kernels' outputs (db: a reduce)
      EXPECT_GT(relative_error(wino[f], direct[f]), 0.0)
          << "fetch " << f << ": bit-identical to direct: Winograd did not run";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, ConvAlgorithmCase,
    ::testing::Values(Case{4, 12, 12, 32, 48, "same", false}, Case{4, 12, 12, 32, 48, "same", true},
                      Case{3, 14, 10, 24, 40, "valid", true},  // channels not a multiple of 16
                      Case{2, 9, 9, 16, 16, "valid", false}),  // a partial 4x4 output tile
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& k = info.param;
      return "C" + std::to_string(k.c) + "O" + std::to_string(k.o) + "_" + k.padding +
             (k.bias_relu ? "_bias_relu" : "");
    });

// kAuto takes Winograd only where it is faster: 3x3, stride 1, float32, >= 16 channels in and
// out, >= 512 output positions.
TEST(ConvAlgorithm, AutoPicksWinogradOnlyWhereItPays) {
  AlgorithmGuard guard(ConvAlgorithm::kAuto);
  const bool offered = winograd_offered();
  auto count = [](Shape x, Shape w, Attrs a, DType dtype = DType::f32) {
    Graph g;
    Value xv = g.input({dtype, x}, "x");
    Value wv = g.input({dtype, w}, "w");
    Value y = g.add(op::conv2d, {xv, wv}, a, "conv");
    Executable exe(g, {xv, wv}, {y});
    return winograd_kernels(exe);
  };
  EXPECT_EQ(count({8, 16, 16, 32}, {3, 3, 32, 32}, {{"padding", "same"}}), offered ? 1 : 0);
  EXPECT_EQ(count({8, 16, 16, 32}, {3, 3, 32, 32}, {{"padding", "same"}}, DType::bf16), 0);
  EXPECT_EQ(count({8, 16, 16, 32}, {3, 3, 32, 32}, {{"strides", I{2, 2}}}), 0);
  EXPECT_EQ(count({8, 16, 16, 32}, {1, 1, 32, 32}, {}), 0);
  EXPECT_EQ(count({8, 16, 16, 8}, {3, 3, 8, 32}, {{"padding", "same"}}), 0);     // 8 channels in
  EXPECT_EQ(count({1, 8, 8, 128}, {3, 3, 128, 128}, {{"padding", "same"}}), 0);  // 64 positions
  {
    AlgorithmGuard direct(ConvAlgorithm::kDirect);
    EXPECT_EQ(count({8, 16, 16, 32}, {3, 3, 32, 32}, {{"padding", "same"}}), 0);
  }
}

// The Winograd program's gradients against central finite differences of its own loss, along
// random directions (the op-table gradient check runs shapes below kAuto's threshold; the loss
// is linear in x and in w, so the differences are exact up to rounding).
TEST(ConvAlgorithm, WinogradGradientsMatchFiniteDifferences) {
  AlgorithmGuard guard(ConvAlgorithm::kWinograd);
  // Without the relu: its kinks would dominate the finite differences' error.
  Program p = conv_program(Case{2, 10, 10, 16, 16, "same", false});
  Executable exe(p.g, p.feeds, p.fetch);
  ASSERT_EQ(winograd_kernels(exe), winograd_offered() ? 3 : 0);
  auto in = feed_values(p);
  const auto base = run(exe, in);
  Philox rng(5);
  const size_t grad_of[] = {2, 3};  // feed x -> fetch dx, feed w -> fetch dw
  for (size_t f : {size_t(0), size_t(1)}) {
    std::vector<float> u(in[f].size());
    double analytic = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      u[i] = rng.uniform(-1.f, 1.f);
      analytic += double(u[i]) * base[grad_of[f]][i];
    }
    const float eps = 1e-1f;
    auto loss_at = [&](float s) {
      auto moved = in;
      for (size_t i = 0; i < u.size(); ++i) moved[f][i] += s * u[i];
      return double(run(exe, moved)[0][0]);
    };
    const double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    EXPECT_NEAR(numeric, analytic, 2e-2 * std::max(1.0, std::fabs(analytic))) << "feed " << f;
  }
}

// The layout pass: in an inference chain conv -> conv -> max_pool (as the reference CNN's and a
// ResNet block's predict programs run them) the convs' outputs stay blocked (nChw16c) for their
// readers, and the program matches the unfused one and the reference backend. A conv output
// that is also a graph output, or that a non-taking op reads, stays NHWC.
TEST(ConvLayouts, BlockedChainMatchesNhwcAndReference) {
  for (ConvAlgorithm algorithm : {ConvAlgorithm::kAuto, ConvAlgorithm::kDirect}) {
    AlgorithmGuard guard(algorithm);
    Graph g;
    Value x = g.input({DType::f32, Shape{4, 14, 14, 16}}, "x");
    Value w1 = g.input({DType::f32, Shape{3, 3, 16, 32}}, "w1");
    Value b1 = g.input({DType::f32, Shape{32}}, "b1");
    Value w2 = g.input({DType::f32, Shape{3, 3, 32, 32}}, "w2");
    Value w3 = g.input({DType::f32, Shape{1, 1, 32, 16}}, "w3");
    Attrs same{{"padding", std::string("same")}};
    Value h1 = g.add(op::conv2d, {x, w1, b1},
                     Attrs{{"padding", std::string("same")},
                           {"fused_bias", true},
                           {"activation", std::string("relu")}},
                     "c1");
    Value h2 = g.add(op::conv2d, {h1, w2}, same, "c2");
    Value pooled = g.add(op::max_pool2d, {h2}, Attrs{{"pool_size", I{2, 2}}}, "pool");
    Value h3 = g.add(op::conv2d, {h2, w3}, {}, "c3");  // 16 channels, read by a graph output
    std::vector<Value> feeds{x, w1, b1, w2, w3}, fetch{pooled, h3};
    Executable exe(g, feeds, fetch);
    std::string all;  // the layout lines
    for (const std::string& l : exe.report())
      if (l.rfind("layout:", 0) == 0) all += l + "\n";
    EXPECT_NE(all.find("layout: nChw16c between 'c1 (conv2d)', 'c2 (conv2d)'\n"), std::string::npos)
        << all;
    EXPECT_NE(
        all.find("layout: nChw16c between 'c2 (conv2d)', 'pool (max_pool2d)', 'c3 (conv2d)'\n"),
        std::string::npos)
        << all;
    EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 2) << all;  // c3's output stays NHWC
    Executable plain(g, feeds, fetch, CompileOptions{.fuse = false});
    Executable reference(g, feeds, fetch, CompileOptions{.backend = "reference"});
    Philox rng(17);
    std::vector<std::vector<float>> in;
    for (Value f : feeds) {
      in.emplace_back(size_t(g.type(f).shape.numel()));
      for (float& v : in.back()) v = rng.uniform(-1.f, 1.f);
    }
    const auto got = run(exe, in), want = run(plain, in), ref = run(reference, in);
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_LT(relative_error(got[k], want[k]), 1e-5) << "fetch " << k;
      EXPECT_LT(relative_error(got[k], ref[k]), 1e-5) << "fetch " << k;
    }
  }
}

TEST(ConvAlgorithm, SetAndReadBack) {
  AlgorithmGuard guard(ConvAlgorithm::kDirect);
  EXPECT_EQ(config::conv_algorithm(), ConvAlgorithm::kDirect);
  config::set_conv_algorithm(ConvAlgorithm::kWinograd);
  EXPECT_EQ(config::conv_algorithm(), ConvAlgorithm::kWinograd);
}

}  // namespace
}  // namespace lockstep
