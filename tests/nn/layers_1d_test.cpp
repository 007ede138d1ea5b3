// The 1D layers (lockstep/nn/layers_1d.h): values against direct computations written here from
// Keras's definitions (Conv1D's valid / same / causal padding, strides, dilation and groups; the
// pools; the reshaping layers; TimeDistributed), on the reference and cpu backends and in
// bfloat16; masks reaching the global pools; training on reference, cpu and xla alike; configs
// both ways; bad arguments with the errors they give.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "lockstep/graph/executable.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/config.h"
#include "ops/op_harness.h"
#include "test_util.h"
#ifdef LOCKSTEP_XLA
#include "backends/xla_test_util.h"
#endif

using namespace lockstep;
namespace L = lockstep::layers;
using lockstep::test_util::error_of;

namespace {

using V = std::vector<float>;

V seq(int64_t n, int64_t a, int64_t m, int64_t off, double d) {
  V v;
  for (int64_t i = 0; i < n; ++i) v.push_back(float(double((i * a) % m - off) / d));
  return v;
}
Tensor x_of(const Shape& s) { return Tensor::from_vector(s, seq(s.numel(), 37, 19, 9, 8.0)); }

// Builds `l` for x's shape, calls it (with `mask` as its input's mask when given) and runs it.
Tensor run_layer(const LayerHandle& l, const Tensor& x, const std::string& backend = "reference",
                 DType dtype = DType::f32, const Tensor* mask = nullptr, bool training = false) {
  l->ensure_built({x.shape().with_dim(0, -1)});
  Graph g;
  Value in = g.input({DType::f32, x.shape()}, "x");
  std::vector<Value> feeds{in};
  Value v = dtype == DType::f32 ? in : g.add(op::cast, {in}, Attrs{{"dtype", "bfloat16"}});
  CallContext ctx{g, training, 0, {}};
  if (mask) {
    feeds.push_back(g.input({DType::f32, mask->shape()}, "mask"));
    ctx.masks = {feeds.back()};
  }
  Value y = l->call(ctx, {v})[0];
  if (g.type(y).dtype != DType::f32) y = g.add(op::cast, {y}, Attrs{{"dtype", "float32"}});
  Executable exe(g, feeds, {y}, {.backend = backend});
  exe.input(0).copy_from(x);
  if (mask) exe.input(1).copy_from(*mask);
  exe.run();
  return exe.output(0).clone();
}

void expect_values(const Tensor& got, const Shape& shape, const V& want, double tol) {
  ASSERT_EQ(got.shape(), shape);
  V g = got.to_vector();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
}

// Conv1D as Keras defines it, directly: x [N, W, C], kernel [K, C/G, F], bias [F].
struct Conv1DSpec {
  int64_t filters, k, strides = 1, dilation = 1, groups = 1;
  std::string padding = "valid";
};
V direct_conv1d(const Conv1DSpec& c, const Tensor& xt, const V& w, const V& b, int64_t& out_w) {
  const int64_t N = xt.shape()[0], W = xt.shape()[1], C = xt.shape()[2], F = c.filters;
  const int64_t reach = c.dilation * (c.k - 1) + 1, Cg = C / c.groups, Fg = F / c.groups;
  int64_t left = 0;
  if (c.padding == "valid") out_w = (W - reach) / c.strides + 1;
  if (c.padding == "causal") out_w = (W - 1) / c.strides + 1, left = reach - 1;
  if (c.padding == "same") {
    out_w = (W + c.strides - 1) / c.strides;
    left = std::max<int64_t>((out_w - 1) * c.strides + reach - W, 0) / 2;
  }
  const V x = xt.to_vector();
  V y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < out_w; ++t)
      for (int64_t f = 0; f < F; ++f) {
        double s = b.empty() ? 0.0 : b[size_t(f)];
        const int64_t grp = f / Fg;
        for (int64_t j = 0; j < c.k; ++j) {
          const int64_t at = t * c.strides + j * c.dilation - left;
          if (at < 0 || at >= W) continue;
          for (int64_t ci = 0; ci < Cg; ++ci)
            s += double(x[size_t((n * W + at) * C + grp * Cg + ci)]) *
                 w[size_t((j * Cg + ci) * F + f)];
        }
        y.push_back(float(s));
      }
  return y;
}

LayerHandle conv1d_layer(const Conv1DSpec& c, const Shape& x, V& w, V& b) {
  LayerHandle l = L::Conv1D(c.filters, c.k,
                            {.strides = c.strides,
                             .padding = c.padding,
                             .dilation_rate = c.dilation,
                             .groups = c.groups});
  l->ensure_built({x.with_dim(0, -1)});
  Tensor& k = l->weights().at(0)->value;
  w = seq(k.numel(), 23, 13, 6, 10.0);
  k.copy_from(Tensor::from_vector(k.shape(), w));
  b.clear();
  for (int64_t i = 0; i < c.filters; ++i) b.push_back(0.1f * float(i + 1));
  l->weights().at(1)->value.copy_from(Tensor::from_vector({c.filters}, b));
  return l;
}

LayerPtr round_trip(const LayerHandle& l) {
  return layer_from_config(json{{"class_name", l->class_name()}, {"config", l->config()}});
}

struct PolicyScope {
  explicit PolicyScope(const char* name) { mixed_precision::set_global_policy(name); }
  ~PolicyScope() { mixed_precision::set_global_policy("float32"); }
};

}  // namespace

TEST(Conv1D, MatchesADirectConvolutionForEveryPaddingStrideDilationAndGroups) {
  const Shape xs{2, 9, 4};
  const Tensor x = x_of(xs);
  const std::vector<Conv1DSpec> specs = {
      {.filters = 3, .k = 3},
      {.filters = 4, .k = 3, .strides = 2, .padding = "same"},
      {.filters = 2, .k = 4, .padding = "same"},
      {.filters = 3, .k = 3, .dilation = 2, .padding = "causal"},
      {.filters = 2, .k = 2, .strides = 3, .padding = "causal"},
      {.filters = 4, .k = 2, .dilation = 3, .groups = 2},
      {.filters = 6, .k = 3, .groups = 2, .padding = "same"},
  };
  for (const Conv1DSpec& c : specs) {
    SCOPED_TRACE("padding " + c.padding + " k " + std::to_string(c.k) + " strides " +
                 std::to_string(c.strides) + " dilation " + std::to_string(c.dilation) +
                 " groups " + std::to_string(c.groups));
    V w, b;
    LayerHandle l = conv1d_layer(c, xs, w, b);
    int64_t ow = 0;
    const V want = direct_conv1d(c, x, w, b, ow);
    for (const char* backend : {"reference", "cpu"})
      expect_values(run_layer(l, x, backend), Shape{2, ow, c.filters}, want, 1e-5);
    expect_values(run_layer(l, x, "cpu", DType::bf16), Shape{2, ow, c.filters}, want, 3e-2);
  }
}

TEST(Conv1D, CausalOutputAtStepTSeesOnlyEarlierSteps) {
  V w, b;
  LayerHandle l = conv1d_layer({.filters = 2, .k = 3, .dilation = 2, .padding = "causal"},
                               Shape{1, 8, 3}, w, b);
  Tensor x = x_of({1, 8, 3});
  const V before = run_layer(l, x, "cpu").to_vector();
  V changed = x.to_vector();
  for (int c = 0; c < 3; ++c) changed[size_t(5 * 3 + c)] += 1.0f;  // step 5 only
  const V after = run_layer(l, Tensor::from_vector({1, 8, 3}, changed), "cpu").to_vector();
  for (int t = 0; t < 8; ++t)
    for (int f = 0; f < 2; ++f) {
      const size_t i = size_t(t * 2 + f);
      if (t < 5)
        EXPECT_EQ(before[i], after[i]) << "step " << t << " moved with a later step";
      else if (t == 5)
        EXPECT_NE(before[i], after[i]) << "step " << t;
    }
}

TEST(Pooling1D, MaxAndAverageMatchTheirWindows) {
  const Tensor x = x_of({2, 7, 3});
  const V xv = x.to_vector();
  struct Case {
    bool max;
    int64_t pool, strides;
    std::string padding;
  };
  for (const Case& c : std::vector<Case>{{true, 2, 2, "valid"},
                                         {false, 3, 2, "valid"},
                                         {true, 3, 2, "same"},
                                         {false, 2, 2, "same"},
                                         {false, 3, 1, "same"}}) {
    SCOPED_TRACE(std::string(c.max ? "max" : "avg") + " pool " + std::to_string(c.pool) + " " +
                 c.padding);
    const int64_t W = 7;
    int64_t ow, left = 0;
    if (c.padding == "valid") {
      ow = (W - c.pool) / c.strides + 1;
    } else {
      ow = (W + c.strides - 1) / c.strides;
      left = std::max<int64_t>((ow - 1) * c.strides + c.pool - W, 0) / 2;
    }
    V want;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t t = 0; t < ow; ++t)
        for (int64_t ch = 0; ch < 3; ++ch) {
          double m = -std::numeric_limits<double>::infinity(), s = 0;
          int cnt = 0;
          for (int64_t j = 0; j < c.pool; ++j) {
            const int64_t at = t * c.strides + j - left;
            if (at < 0 || at >= W) continue;  // "same" excludes the padding
            const double v = xv[size_t((n * W + at) * 3 + ch)];
            m = std::max(m, v), s += v, ++cnt;
          }
          want.push_back(float(c.max ? m : s / cnt));
        }
    L::Pool1DOptions o{.strides = c.strides, .padding = c.padding};
    LayerHandle l = c.max ? L::MaxPooling1D(c.pool, o) : L::AveragePooling1D(c.pool, o);
    for (const char* backend : {"reference", "cpu"})
      expect_values(run_layer(l, x, backend), Shape{2, ow, 3}, want, 1e-6);
    expect_values(run_layer(l, x, "cpu", DType::bf16), Shape{2, ow, 3}, want, 2e-2);
  }
}

TEST(GlobalPooling1D, TheAverageCountsOnlyUnmaskedStepsAndTheMaximumTakesEveryStep) {
  const Tensor x = x_of({2, 5, 3});
  const V xv = x.to_vector();
  const V m{1, 1, 0, 1, 0, /**/ 0, 1, 1, 1, 1};
  const Tensor mask = Tensor::from_vector({2, 5}, m);
  V avg, masked_avg, mx;
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c) {
      double s = 0, sm = 0, cnt = 0, best = -1e30;
      for (int t = 0; t < 5; ++t) {
        const double v = xv[size_t((n * 5 + t) * 3 + c)];
        s += v, best = std::max(best, v);
        sm += v * m[size_t(n * 5 + t)], cnt += m[size_t(n * 5 + t)];
      }
      avg.push_back(float(s / 5)), masked_avg.push_back(float(sm / cnt)), mx.push_back(float(best));
    }
  LayerHandle ga = L::GlobalAveragePooling1D(), gm = L::GlobalMaxPooling1D();
  EXPECT_TRUE(ga->supports_masking());
  EXPECT_TRUE(gm->supports_masking());
  for (const char* backend : {"reference", "cpu"}) {
    expect_values(run_layer(ga, x, backend), Shape{2, 3}, avg, 1e-6);
    expect_values(run_layer(ga, x, backend, DType::f32, &mask), Shape{2, 3}, masked_avg, 1e-6);
    expect_values(run_layer(gm, x, backend, DType::f32, &mask), Shape{2, 3}, mx, 1e-6);
  }
  expect_values(run_layer(ga, x, "cpu", DType::bf16, &mask), Shape{2, 3}, masked_avg, 2e-2);
  LayerHandle keep = L::GlobalAveragePooling1D(true);
  expect_values(run_layer(keep, x, "cpu", DType::f32, &mask), Shape{2, 1, 3}, masked_avg, 1e-6);
}

TEST(Reshaping1D, UpSamplingPaddingCroppingRepeatAndPermuteMoveTheRightValues) {
  const Tensor x = x_of({2, 4, 3});
  const V xv = x.to_vector();
  auto at = [&](int64_t n, int64_t t, int64_t c) {
    return (t < 0 || t >= 4) ? 0.0f : xv[size_t((n * 4 + t) * 3 + c)];
  };
  V up, padded, cropped, permuted;
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t t = 0; t < 8; ++t)
      for (int64_t c = 0; c < 3; ++c) up.push_back(at(n, t / 2, c));
    for (int64_t t = -1; t < 6; ++t)
      for (int64_t c = 0; c < 3; ++c) padded.push_back(at(n, t, c));
    for (int64_t t = 1; t < 3; ++t)
      for (int64_t c = 0; c < 3; ++c) cropped.push_back(at(n, t, c));
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t t = 0; t < 4; ++t) permuted.push_back(at(n, t, c));
  }
  for (const char* b : {"reference", "cpu"}) {
    SCOPED_TRACE(b);
    expect_values(run_layer(L::UpSampling1D(2), x, b), Shape{2, 8, 3}, up, 0);
    expect_values(run_layer(L::ZeroPadding1D({1, 2}), x, b), Shape{2, 7, 3}, padded, 0);
    expect_values(run_layer(L::Cropping1D({1, 1}), x, b), Shape{2, 2, 3}, cropped, 0);
    expect_values(run_layer(L::Permute({2, 1}), x, b), Shape{2, 3, 4}, permuted, 0);
    expect_values(run_layer(L::Permute({2, 1}), x, b, DType::bf16), Shape{2, 3, 4}, permuted, 1e-2);
    const Tensor v = x_of({2, 3});
    V rep;
    for (int64_t n = 0; n < 2; ++n)
      for (int k = 0; k < 4; ++k)
        for (int64_t c = 0; c < 3; ++c) rep.push_back(v.to_vector()[size_t(n * 3 + c)]);
    expect_values(run_layer(L::RepeatVector(4), v, b), Shape{2, 4, 3}, rep, 0);
  }
}

TEST(SpatialDropout1D, DropsWholeChannelsInTrainingOnly) {
  const Tensor x = Tensor::full({4, 6, 8}, 1.0f);
  LayerHandle l = L::SpatialDropout1D(0.5, 3);
  expect_values(run_layer(l, x, "cpu"), Shape{4, 6, 8}, x.to_vector(), 0);
  const V y = run_layer(l, x, "cpu", DType::f32, nullptr, /*training=*/true).to_vector();
  int dropped = 0;
  for (int n = 0; n < 4; ++n)
    for (int c = 0; c < 8; ++c) {
      const float first = y[size_t(n * 48 + c)];
      EXPECT_TRUE(first == 0.0f || first == 2.0f) << first;
      dropped += first == 0.0f;
      for (int t = 1; t < 6; ++t) EXPECT_EQ(y[size_t((n * 6 + t) * 8 + c)], first);
    }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 32);
}

TEST(TimeDistributed, AppliesItsLayerToEveryStepWithTheLayersWeights) {
  LayerHandle dense = L::Dense(5, {.activation = "tanh"});
  LayerHandle td = L::TimeDistributed(dense);
  const Tensor x = x_of({2, 3, 4});
  td->ensure_built({Shape{-1, 3, 4}});
  ASSERT_EQ(td->weights().size(), 2u);
  EXPECT_EQ(td->weights()[0], dense->weights()[0]);
  const V per_step =
      run_layer(dense, Tensor::from_vector({6, 4}, x.to_vector()), "cpu").to_vector();
  for (const char* b : {"reference", "cpu"})
    expect_values(run_layer(td, x, b), Shape{2, 3, 5}, per_step, 1e-6);
  // Conv1D inside: a 4D input [N, T, W, C].
  LayerHandle td_conv = L::TimeDistributed(L::Conv1D(2, 2));
  EXPECT_EQ(run_layer(td_conv, x_of({2, 3, 5, 4}), "cpu").shape(), Shape({2, 3, 4, 2}));
}

// The gradient of sum(w * layer(x)) with respect to x, through autodiff on the reference and
// cpu backends, against central finite differences (the op table's check, on the layer's ops).
TEST(Layers1D, GradientsThroughEachLayerMatchFiniteDifferences) {
  struct Case {
    const char* name;
    LayerHandle layer;
    Shape x;
    bool masked = false;
  };
  const std::vector<Case> cases = {
      {"conv1d_causal_dilated_grouped",
       L::Conv1D(4, 3,
                 {.padding = "causal", .dilation_rate = 2, .groups = 2, .activation = "tanh"}),
       {2, 7, 4}},
      {"conv1d_same_strided", L::Conv1D(3, 2, {.strides = 2, .padding = "same"}), {2, 7, 2}},
      {"max_pooling1d_same", L::MaxPooling1D(3, {.strides = 2, .padding = "same"}), {2, 7, 3}},
      {"average_pooling1d_same",
       L::AveragePooling1D(3, {.strides = 2, .padding = "same"}),
       {2, 7, 3}},
      {"global_average_pooling1d_masked", L::GlobalAveragePooling1D(), {2, 5, 3}, true},
      {"global_max_pooling1d", L::GlobalMaxPooling1D(true), {2, 5, 3}},
      {"up_sampling1d", L::UpSampling1D(3), {2, 3, 2}},
      {"zero_padding1d", L::ZeroPadding1D({2, 1}), {2, 3, 2}},
      {"cropping1d", L::Cropping1D({1, 2}), {2, 6, 2}},
      {"permute", L::Permute({2, 1}), {2, 3, 4}},
      {"repeat_vector", L::RepeatVector(3), {2, 4}},
      {"time_distributed_dense",
       L::TimeDistributed(L::Dense(3, {.activation = "tanh"})),
       {2, 3, 4}},
  };
  for (const Case& c : cases) {
    c.layer->ensure_built({c.x.with_dim(0, -1)});
    lockstep::testing::OpCase oc{
        .name = c.name, .op = "identity", .inputs = {lockstep::testing::OpInput{.shape = c.x}}};
    oc.fd_eps = 1e-3f;  // well inside the gaps between a window's values (max pools)
    if (c.masked)
      oc.inputs.push_back(lockstep::testing::OpInput{.shape = {c.x[0], c.x[1]},
                                                     .differentiable = false,
                                                     .values = {1, 0, 1, 1, 0, 0, 1, 1, 1, 1}});
    LayerHandle l = c.layer;
    const bool masked = c.masked;
    oc.build = [l, masked](Graph& g, const std::vector<Value>& in) {
      CallContext ctx{g, false, 0, {}};
      if (masked) ctx.masks = {in.at(1)};
      return l->call(ctx, {in[0]})[0];
    };
    EXPECT_EQ(lockstep::testing::run_grad_check(oc), "") << c.name;
  }
}

TEST(Layers1D, ConfigsRoundTripAndWriteKerasKeys) {
  std::vector<LayerHandle> ls = {
      L::Conv1D(8, 3, {.strides = 2, .padding = "causal", .groups = 2, .activation = "relu"}),
      L::MaxPooling1D(3, {.strides = 2, .padding = "same"}),
      L::AveragePooling1D(2),
      L::GlobalAveragePooling1D(true),
      L::GlobalMaxPooling1D(),
      L::UpSampling1D(3),
      L::ZeroPadding1D({1, 2}),
      L::Cropping1D({0, 2}),
      L::SpatialDropout1D(0.25, 7),
      L::RepeatVector(4),
      L::Permute({2, 1}),
      L::TimeDistributed(L::Dense(3, {.activation = "relu"})),
  };
  for (const LayerHandle& l : ls) {
    SCOPED_TRACE(l->class_name());
    LayerPtr again = round_trip(l);
    EXPECT_EQ(again->class_name(), l->class_name());
    EXPECT_EQ(again->config(), l->config());
  }
  const json c = ls[0]->config();
  EXPECT_EQ(c["kernel_size"], json({3}));
  EXPECT_EQ(c["strides"], json({2}));
  EXPECT_EQ(c["padding"], "causal");
  EXPECT_EQ(c["dilation_rate"], json({1}));
  EXPECT_EQ(ls[1]->config()["pool_size"], json({3}));
  EXPECT_EQ(ls[11]->config()["layer"]["class_name"], "Dense");
  EXPECT_FALSE(ls[8]->config().contains("trainable"));  // as Keras writes SpatialDropout1D
  // Keras writes kernel_size and strides as one-element lists; a bare int is read too.
  LayerPtr from_ints = layer_from_config(
      json{{"class_name", "Conv1D"},
           {"config", {{"name", "c"}, {"filters", 2}, {"kernel_size", 3}, {"strides", 1}}}});
  EXPECT_EQ(from_ints->config()["kernel_size"], json({3}));
}

TEST(Layers1D, BadArgumentsNameTheLayerAndTheFix) {
  EXPECT_NE(error_of([] {
              L::Conv1D(4, 3, {.padding = "full", .name = "c1"});
            }).find("Conv1D 'c1': padding must be \"valid\", \"same\" or \"causal\""),
            std::string::npos);
  EXPECT_NE(error_of([] {
              L::Conv1D(4, 3, {.groups = 3, .name = "c2"});
            }).find("filters (4) must be divisible by groups (3)"),
            std::string::npos);
  const std::string short_input = error_of([] {
    LayerHandle l = L::Conv1D(2, 5, {.name = "c3"});
    run_layer(l, x_of({1, 3, 2}));
  });
  EXPECT_NE(short_input.find("Conv1D 'c3': the input has 3 steps, fewer than the kernel's reach"),
            std::string::npos)
      << short_input;
  EXPECT_NE(error_of([] {
              L::Conv1D(2, 3, {.name = "c4"})->ensure_built({Shape{-1, 8, 8, 3}});
            }).find("Conv1D 'c4': expected input of rank 3 (batch, steps, channels)"),
            std::string::npos);
  EXPECT_NE(error_of([] { L::Permute({1, 3}, "p"); }).find("Permute 'p': dims"), std::string::npos);
  EXPECT_NE(error_of([] {
              run_layer(L::Cropping1D({2, 2}, "cr"), x_of({1, 4, 2}));
            }).find("Cropping1D 'cr': cropping"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              layer_from_config(json{{"class_name", "Conv1D"},
                                     {"config",
                                      {{"name", "k"},
                                       {"filters", 2},
                                       {"kernel_size", {3}},
                                       {"data_format", "channels_first"}}}});
            }).find("data_format"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g;
              Value x = g.input({DType::f32, Shape{2, 3}}, "x");
              g.add(op::transpose, {x}, Attrs{{"perm", std::vector<int64_t>{0, 0}}});
            }).find("perm names axis 0 twice"),
            std::string::npos);
}

namespace {

// Test-only: passes x on and gives it the mask of its second input (what Embedding(mask_zero)
// will do), so the model's masks reach the layers after it.
class MaskFrom : public Layer {
 public:
  using Layer::Layer;
  std::string class_name() const override { return "MaskFrom"; }
  std::vector<Value> call(CallContext&, const std::vector<Value>& in) override { return {in[0]}; }
  std::vector<Value> compute_mask(CallContext&, const std::vector<Value>& in,
                                  const std::vector<Value>&, int) override {
    return {in.at(1)};
  }
};

Model masked_model(LayerHandle after) {
  KTensor x = L::Input({5, 3}), m = L::Input({5});
  KTensor h = LayerHandle(std::make_shared<MaskFrom>("mask_from"))({x, m});
  return Model({x, m}, {after(h)});
}

}  // namespace

TEST(GlobalPooling1D, TakesTheMaskAModelCarriesAndOtherLayersRefuseIt) {
  Model model = masked_model(L::GlobalAveragePooling1D());
  const Tensor x = x_of({2, 5, 3});
  const Tensor m = Tensor::from_vector({2, 5}, {1, 0, 1, 0, 0, 1, 1, 1, 1, 1});
  const V got = model.predict({x, m}, {.batch_size = 2}).to_vector();
  const V want = run_layer(L::GlobalAveragePooling1D(), x, "reference", DType::f32, &m).to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6);
  const std::string refused = error_of([] { masked_model(L::Conv1D(2, 2, {.name = "conv_m"})); });
  EXPECT_NE(refused.find("conv_m"), std::string::npos) << refused;
}

namespace {

// Built twice alike: the same names give the same initial weights (seeded by name).
Model conv1d_model() {
  reset_layer_names();
  set_random_seed(5);
  return Sequential(
      {L::Input({12, 4}),
       L::Conv1D(8, 3, {.padding = "causal", .dilation_rate = 2, .activation = "relu"}),
       L::MaxPooling1D(2), L::Conv1D(6, 3, {.strides = 2, .padding = "same", .groups = 2}),
       L::UpSampling1D(2), L::ZeroPadding1D({1}), L::Cropping1D({1, 0}),
       L::SpatialDropout1D(0.2, 3), L::Permute({2, 1}), L::Permute({2, 1}),
       L::TimeDistributed(L::Dense(5, {.activation = "tanh"})), L::GlobalAveragePooling1D(),
       L::RepeatVector(2), L::GlobalMaxPooling1D(), L::Dense(3)});
}

std::pair<Tensor, Tensor> sequence_data() {
  const Tensor x = x_of({32, 12, 4});
  V y;
  for (int i = 0; i < 32; ++i) y.push_back(float(i % 3));
  return {x, Tensor::from_vector({32}, y)};
}

// Every batch's loss over 3 epochs of 4 batches (LambdaCallback's second hook: on_batch_end).
std::vector<double> fit_losses(Model& m, const std::string& backend) {
  m.compile({.optimizer = optimizers::Adam(1e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .backend = backend});
  auto [x, y] = sequence_data();
  std::vector<double> losses;
  auto cb =
      callbacks::LambdaCallback({}, [&](int, const Logs& l) { losses.push_back(l.at("loss")); });
  m.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0, .callbacks = {cb}, .shuffle = false});
  return losses;
}

double epoch_mean(const std::vector<double>& batch_losses, size_t epoch) {
  double s = 0;
  for (size_t i = 4 * epoch; i < 4 * epoch + 4; ++i) s += batch_losses.at(i);
  return s / 4;
}

}  // namespace

TEST(Layers1D, AModelOfEveryLayerTrainsAlikeOnReferenceAndCpuAndLearns) {
  Model ref = conv1d_model(), cpu = conv1d_model();
  const std::vector<double> a = fit_losses(ref, "reference"), b = fit_losses(cpu, "cpu");
  ASSERT_EQ(a.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + a[i])) << "batch " << i;
  EXPECT_LT(epoch_mean(a, 2), epoch_mean(a, 0));
}

TEST(Layers1D, MixedBfloat16ComputesInBfloat16AndTracksFloat32) {
  Model f32 = conv1d_model();
  Model mixed = [] {
    PolicyScope p("mixed_bfloat16");
    return conv1d_model();
  }();
  mixed.set_weights(f32.get_weights());
  for (const LayerPtr& l : mixed.layers())
    if (l->class_name() == "Conv1D") EXPECT_EQ(l->compute_dtype(), DType::bf16);
  const Tensor x = sequence_data().first;
  const V want = f32.predict(x, 8).to_vector(), got = mixed.predict(x, 8).to_vector();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 5e-2 * (1 + std::abs(want[i])));
  const std::vector<double> losses = fit_losses(mixed, "cpu");
  EXPECT_LT(epoch_mean(losses, 2), epoch_mean(losses, 0));
}

#ifdef LOCKSTEP_XLA
TEST(Layers1D, TheXlaBackendTrainsAndPredictsAsCpu) {
  auto client = XLA_CLIENT_OR_SKIP();
  Model cpu = conv1d_model(), xla = conv1d_model();
  const std::vector<double> a = fit_losses(cpu, "cpu"), b = fit_losses(xla, "xla");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + a[i])) << "batch " << i;
  const Tensor x = sequence_data().first;
  const V p = cpu.predict(x, 8).to_vector(), q = xla.predict(x, 8).to_vector();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], q[i], 1e-4 * (1 + std::abs(p[i])));
}
#endif
