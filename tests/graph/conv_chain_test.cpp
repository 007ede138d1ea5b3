// The cpu backend's 1x1 + depthwise pair fusion (src/backends/cpu/conv_chain.h) on
// MobileNetV2's / EfficientNet's expansion block as the layers trace it: conv2d (1x1) ->
// batch_norm_infer -> relu6 (or swish) -> pad (Keras's correct_pad) -> depthwise conv2d (valid,
// stride 2) -> batch_norm_infer -> relu6. After the batch norms fold and the pad becomes the conv's
// pads, the two convs become one conv2d_pointwise_depthwise, whose output matches the unfused,
// eager and reference programs; a program that differentiates through the pair keeps it apart,
// one that needs no gradient through it (a frozen backbone under a trained head) fuses it; the
// size threshold and LOCKSTEP_DW_FUSION_BYTES=-1 keep small pairs apart. A swish pair stays
// apart unless oneDNN runs the convs' swish (LOCKSTEP_CONV_SWISH=onednn), and matches either way.
// A NaN in x or in a filter channel comes out of the fused pair where the reference puts it.
// Whether a pair fuses is oneDNN's answer on the machine at hand (cpu::fused_pair_impl: a Zen 4/5
// gets jit_1x1, a 2-core Xeon with AMX only ref_fused_convolution), so each test asks it, names
// the answer and the CPU in its output, and runs again with the answer forced to "none"
// (cpu::force_no_fused_pair_impl), covering both branches on every machine.
#include "backends/cpu/conv_chain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include "graph/graph_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;
using test_util::worst;

// Sets LOCKSTEP_DW_FUSION_BYTES for one test and restores the default after it.
struct FusionBytes {
  explicit FusionBytes(const char* v) { setenv("LOCKSTEP_DW_FUSION_BYTES", v, 1); }
  ~FusionBytes() { unsetenv("LOCKSTEP_DW_FUSION_BYTES"); }
};

// Forces oneDNN's answer for every pair to "none" for one scope (when `on`).
struct NoFusedImpl {
  explicit NoFusedImpl(bool on) { cpu::force_no_fused_pair_impl(on); }
  ~NoFusedImpl() { cpu::force_no_fused_pair_impl(false); }
};

// Whether the pass may fuse expansion_block(C, M, act)'s pair here: oneDNN's answer for it (as
// the pass asks it, after the batch norms and the pad fold), printed and recorded with the CPU.
bool onednn_fuses_pair(int64_t C, int64_t M, const std::string& act) {
  const Attrs attrs{{"activation", act},
                    {"dw_activation", act},
                    {"dw_strides", I{2, 2}},
                    {"dw_pads", I{0, 1, 0, 1}}};
  const std::string impl =
      cpu::fused_pair_impl(Shape{8, 48, 48, C}, Shape{1, 1, C, M}, Shape{3, 3, 1, M}, attrs);
  const bool fuses = cpu::fuses_with(impl);
  const std::string line = "C=" + std::to_string(C) + " M=" + std::to_string(M) + " " + act +
                           ": oneDNN's pair kernel '" + (impl.empty() ? "none" : impl) + "' (" +
                           (fuses ? "fuses" : "stays apart") + ") on " + cpu::onednn_condition();
  std::cout << "[ condition ] " << line << "\n";
  ::testing::Test::RecordProperty(
      "onednn_pair_C" + std::to_string(C) + "_M" + std::to_string(M) + "_" + act, line);
  return fuses;
}

struct Block {
  Graph g;
  std::vector<Value> feeds;
  Value out, w1, head;  // the block's output; the 1x1 filter; a head weight on the output
};

// x [8, 48, 48, C] (oneDNN fuses a pair this large) -> 1x1 to M -> bn -> act -> pad [0,1,0,1] ->
// depthwise 3x3 s2 -> bn -> act; head: a per-channel weight the output is multiplied by.
Block expansion_block(int64_t C, int64_t M, const char* act = "relu6") {
  Block b;
  Graph& g = b.g;
  Value x = g.input({DType::f32, Shape{8, 48, 48, C}}, "x");
  b.w1 = g.input({DType::f32, Shape{1, 1, C, M}}, "w1");
  Value wd = g.input({DType::f32, Shape{3, 3, 1, M}}, "wd");
  b.feeds = {x, b.w1, wd};
  auto bn = [&](Value v, const std::string& name) {
    std::vector<Value> in{v};
    for (const char* q : {"gamma", "beta", "mean", "var"}) {
      in.push_back(g.input({DType::f32, Shape{M}}, q));
      b.feeds.push_back(in.back());
    }
    return g.add(OpId::named(act),
                 {g.add(op::batch_norm_infer, in, Attrs{{"epsilon", 1e-3}}, name)});
  };
  Value e = bn(g.add(op::conv2d, {x, b.w1}, {}, "expand"), "expand_bn");
  Value p = g.add(op::pad, {e}, Attrs{{"before", I{0, 0, 0, 0}}, {"after", I{0, 1, 1, 0}}});
  Value d = g.add(op::conv2d, {p, wd}, Attrs{{"groups", M}, {"strides", I{2, 2}}}, "dwconv");
  b.out = bn(d, "dw_bn");
  b.head = g.input({DType::f32, Shape{M}}, "head");
  b.feeds.push_back(b.head);
  return b;
}

std::vector<std::vector<float>> inputs(const Graph& g, const std::vector<Value>& feeds,
                                       uint64_t seed) {
  Philox rng(seed);
  std::vector<std::vector<float>> in;
  for (Value f : feeds) {
    in.emplace_back(size_t(g.type(f).shape.numel()));
    const bool var = g.node(f.node).name == "var";
    for (float& v : in.back()) v = var ? rng.uniform(0.5f, 2.f) : rng.uniform(-1.f, 1.f);
  }
  return in;
}

int fused_pairs(const Executable& exe) {
  int n = 0;
  for (const std::string& l : exe.report())
    n += l.find("fused conv2d 'expand' + depthwise conv2d 'dwconv'") != std::string::npos;
  return n;
}

// Inference: the pair fuses (16 channels in, 32 or 48 expanded) where oneDNN offers a fused
// kernel for it, and stays apart otherwise (and with the answer forced to "none"); every program
// matches the unfused, eager and reference ones.
TEST(ConvChainFusion, InferenceFusesTheExpansionAndItsDepthwiseConv) {
  FusionBytes always("0");
  for (bool forced_none : {false, true}) {
    NoFusedImpl hook(forced_none);
    for (auto [C, M] : {std::pair<int64_t, int64_t>{16, 32}, {16, 48}}) {
      const bool offered = onednn_fuses_pair(C, M, "relu6");
      Block b = expansion_block(C, M);
      Executable fused(b.g, b.feeds, {b.out});
      Executable unfused(b.g, b.feeds, {b.out}, CompileOptions{.fuse = false});
      Executable eager(b.g, b.feeds, {b.out}, CompileOptions{.eager = true});
      Executable reference(b.g, b.feeds, {b.out}, CompileOptions{.backend = "reference"});
      std::string all;
      for (const std::string& l : fused.report()) all += l + "\n";
      EXPECT_EQ(fused_pairs(fused), offered ? 1 : 0) << all;
      EXPECT_EQ(fused_pairs(unfused), 0);
      const auto in = inputs(b.g, b.feeds, 7);
      const auto got = test_util::run_once(fused, in)[0];
      EXPECT_LE(worst(got, test_util::run_once(unfused, in)[0], 1e-5, 1e-5), 1.0) << "vs unfused";
      EXPECT_LE(worst(got, test_util::run_once(eager, in)[0], 1e-5, 1e-5), 1.0) << "vs eager";
      EXPECT_LE(worst(got, test_util::run_once(reference, in)[0], 1e-5, 1e-5), 1.0) << "vs ref";
    }
  }
}

// A gradient through the pair (the 1x1 filter's) reads the expanded activation: no fusion.
// A gradient only of the head (a frozen block) fuses it where oneDNN offers the fused kernel, and
// the head's gradient matches the unfused program's either way.
TEST(ConvChainFusion, OnlyAPairNoGradientGoesThroughFuses) {
  FusionBytes always("0");
  for (bool forced_none : {false, true}) {
    NoFusedImpl hook(forced_none);
    const bool offered = onednn_fuses_pair(16, 32, "relu6");
    for (bool frozen : {false, true}) {
      Block b = expansion_block(16, 32);
      Graph& g = b.g;
      Value loss = g.add(op::reduce_sum, {g.add(op::mul, {b.out, b.head})},
                         Attrs{{"axes", I{0, 1, 2, 3}}, {"keepdims", false}});
      const std::vector<Value> wrt = frozen ? std::vector<Value>{b.head} : std::vector<Value>{b.w1};
      const std::vector<Value> grads = gradients(g, loss, wrt);
      Executable fused(g, b.feeds, {loss, grads[0]});
      Executable unfused(g, b.feeds, {loss, grads[0]}, CompileOptions{.fuse = false});
      EXPECT_EQ(fused_pairs(fused), frozen && offered ? 1 : 0)
          << (frozen ? "frozen" : "trainable") << (forced_none ? ", forced none" : "");
      const auto in = inputs(g, b.feeds, 11);
      const auto got = test_util::run_once(fused, in), want = test_util::run_once(unfused, in);
      EXPECT_LE(worst(got[0], want[0], 1e-4, 1e-5), 1.0);
      EXPECT_LE(worst(got[1], want[1], 1e-5, 1e-5), 1.0);
    }
  }
}

// oneDNN's relu / relu6 post-ops inside the fused pair turn NaN into 0; TensorFlow and PyTorch
// keep it, and so do the unfused convs (Lockstep's own relu pass). A NaN pixel of x, then a NaN
// in one channel of the 1x1 filter: the fused program's output is NaN exactly where the
// reference backend's is, and equal elsewhere.
TEST(ConvChainFusion, NaNGoesThroughTheFusedPairAsThroughTheUnfusedConvs) {
  FusionBytes always("0");
  const bool offered = onednn_fuses_pair(16, 32, "relu6");
  for (int where : {0, 1}) {
    Block b = expansion_block(16, 32);
    Executable fused(b.g, b.feeds, {b.out});
    Executable reference(b.g, b.feeds, {b.out}, CompileOptions{.backend = "reference"});
    EXPECT_EQ(fused_pairs(fused), offered ? 1 : 0);
    auto in = inputs(b.g, b.feeds, 13);
    if (where == 0)
      in[0][size_t(((3 * 48 + 10) * 48 + 20) * 16 + 5)] = std::nanf("");  // image 3, (10, 20)
    else
      in[1][size_t(3 * 32 + 7)] = std::nanf("");  // w1[0, 0, 3, 7]: channel 7
    const auto got = test_util::run_once(fused, in)[0];
    const auto want = test_util::run_once(reference, in)[0];
    ASSERT_EQ(got.size(), want.size());
    size_t nans = 0, mismatched = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      nans += std::isnan(want[i]);
      mismatched += std::isnan(got[i]) != std::isnan(want[i]);
    }
    EXPECT_EQ(nans, where == 0 ? size_t(2 * 2 * 32) : size_t(8 * 24 * 24)) << where;
    EXPECT_EQ(mismatched, 0u) << (where == 0 ? "a NaN pixel" : "a NaN filter channel")
                              << (offered ? " (fused)" : " (apart)");
    std::vector<float> g2 = got, w2 = want;
    for (size_t i = 0; i < g2.size(); ++i)
      if (std::isnan(w2[i])) g2[i] = w2[i] = 0.f;
    EXPECT_LE(worst(g2, w2, 1e-5, 1e-5), 1.0);
  }
}

// The default threshold (16 MiB of expanded activation) keeps this small pair apart, and -1
// turns the pass off.
TEST(ConvChainFusion, SmallPairsAndTheSwitchKeepThePairApart) {
  {
    Block b = expansion_block(16, 32);
    Executable exe(b.g, b.feeds, {b.out});
    EXPECT_EQ(fused_pairs(exe), 0);
  }
  FusionBytes off("-1");
  Block b = expansion_block(16, 32);
  Executable exe(b.g, b.feeds, {b.out});
  EXPECT_EQ(fused_pairs(exe), 0);
}

// EfficientNet's swish: the convs' swish is Lockstep's pass (conv_kernels.cpp), which oneDNN's
// fused kernel cannot run, so the pair stays apart; with LOCKSTEP_CONV_SWISH=onednn the post-op
// runs it and the pair fuses where oneDNN offers the fused kernel. All match the reference.
TEST(ConvChainFusion, SwishPairsFuseOnlyWhenOneDnnRunsTheSwish) {
  FusionBytes always("0");
  for (bool forced_none : {false, true}) {
    NoFusedImpl hook(forced_none);
    for (bool onednn : {false, true}) {
      if (onednn) setenv("LOCKSTEP_CONV_SWISH", "onednn", 1);
      const bool offered = onednn && onednn_fuses_pair(16, 32, "swish");
      Block b = expansion_block(16, 32, "swish");
      Executable exe(b.g, b.feeds, {b.out});
      Executable reference(b.g, b.feeds, {b.out}, CompileOptions{.backend = "reference"});
      unsetenv("LOCKSTEP_CONV_SWISH");
      EXPECT_EQ(fused_pairs(exe), offered ? 1 : 0)
          << (onednn ? "onednn" : "lockstep") << " swish" << (forced_none ? ", forced none" : "");
      const auto in = inputs(b.g, b.feeds, 5);
      EXPECT_LE(
          worst(test_util::run_once(exe, in)[0], test_util::run_once(reference, in)[0], 1e-5, 1e-5),
          1.0);
    }
  }
}

// The environment switch does what the hook does: LOCKSTEP_DW_FUSION_IMPL=none keeps every pair
// apart, and the pass says why in the compile report.
TEST(ConvChainFusion, ForcedNoneKeepsThePairApartAndSaysWhy) {
  FusionBytes always("0");
  setenv("LOCKSTEP_DW_FUSION_IMPL", "none", 1);
  Block b = expansion_block(16, 32);
  Executable exe(b.g, b.feeds, {b.out});
  unsetenv("LOCKSTEP_DW_FUSION_IMPL");
  EXPECT_EQ(fused_pairs(exe), 0);
  std::string all;
  for (const std::string& l : exe.report()) all += l + "\n";
  EXPECT_NE(all.find("conv2d 'expand' + depthwise conv2d 'dwconv' stay apart: oneDNN offers no "
                     "non-reference kernel for the pair here (none)"),
            std::string::npos)
      << all;
}

}  // namespace
}  // namespace lockstep
