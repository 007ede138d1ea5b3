// Keras layers run through an Executable: values of Dense, DepthwiseConv2D, BatchNormalization
// (moving statistics) and Dropout against hand-computed references.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/graph/executable.h"
#include "lockstep/nn/layers.h"

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

Shape symbolic(Shape s) { return s.with_dim(0, -1); }

// Builds `l` for the inputs' shapes (batch symbolic), calls it on a concrete graph and runs it.
std::vector<Tensor> run_layer(const LayerHandle& l, const std::vector<Tensor>& xs, bool training,
                              const std::string& backend = "reference", bool fuse = true) {
  std::vector<Shape> shapes;
  for (auto& x : xs) shapes.push_back(symbolic(x.shape()));
  l->ensure_built(shapes);
  Graph g;
  std::vector<Value> in;
  for (auto& x : xs) in.push_back(g.input({DType::f32, x.shape()}, "x"));
  CallContext ctx{g, training, 0, {}};
  auto outs = l->call(ctx, in);
  Executable exe(g, in, outs, {.backend = backend, .fuse = fuse});
  for (size_t i = 0; i < xs.size(); ++i) exe.input(int(i)).copy_from(xs[i]);
  exe.run();
  std::vector<Tensor> r;
  for (int i = 0; i < exe.num_outputs(); ++i) r.push_back(exe.output(i).clone());
  return r;
}

Tensor iota(const Shape& s, float scale = 0.1f) {
  std::vector<float> v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int(i % 7) - 3) + 0.01f * float(i);
  return Tensor::from_vector(s, v);
}

}  // namespace

TEST(LayerNumeric, DenseMatchesMatmulPlusBias) {
  auto d = L::Dense(3, {.bias_initializer = "constant:0.5"});
  Tensor x = iota(Shape{2, 4});
  auto y = run_layer(d, {x}, false)[0].to_vector();
  auto w = d->weights()[0]->value.to_vector();
  auto xv = x.to_vector();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      float ref = 0.5f;
      for (int k = 0; k < 4; ++k) ref += xv[i * 4 + k] * w[k * 3 + j];
      EXPECT_NEAR(y[i * 3 + j], ref, 1e-5) << i << "," << j;
    }
}

TEST(LayerNumeric, DenseOnRank3AppliesToLastAxis) {
  auto d = L::Dense(2, {.use_bias = false});
  Tensor x = iota(Shape{2, 3, 4});
  Tensor y = run_layer(d, {x}, false)[0];
  EXPECT_EQ(y.shape(), Shape({2, 3, 2}));
  auto w = d->weights()[0]->value.to_vector();
  auto xv = x.to_vector(), yv = y.to_vector();
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 2; ++j) {
      float ref = 0;
      for (int k = 0; k < 4; ++k) ref += xv[r * 4 + k] * w[k * 2 + j];
      EXPECT_NEAR(yv[r * 2 + j], ref, 1e-5);
    }
}

TEST(LayerNumeric, DepthwiseChannelOrderMatchesKeras) {
  const int H = 5, W = 4, C = 3, M = 2, K = 3;
  auto dw = L::DepthwiseConv2D({K, K}, {.use_bias = false, .depth_multiplier = M});
  Tensor x = iota(Shape{1, H, W, C});
  for (const char* backend : {"reference", "cpu"}) {
    Tensor y = run_layer(dw, {x}, false, backend)[0];
    ASSERT_EQ(y.shape(), Shape({1, H - 2, W - 2, C * M}));
    auto k = dw->weights()[0]->value.to_vector();  // [K, K, C, M]
    auto xv = x.to_vector(), yv = y.to_vector();
    for (int i = 0; i < H - 2; ++i)
      for (int j = 0; j < W - 2; ++j)
        for (int c = 0; c < C; ++c)
          for (int m = 0; m < M; ++m) {
            float ref = 0;
            for (int a = 0; a < K; ++a)
              for (int b = 0; b < K; ++b)
                ref += xv[((i + a) * W + (j + b)) * C + c] * k[((a * K + b) * C + c) * M + m];
            EXPECT_NEAR(yv[(i * (W - 2) + j) * C * M + c * M + m], ref, 1e-5) << backend;
          }
  }
}

TEST(LayerNumeric, BatchNormMovingStatsFollowKeras3) {
  auto bn = L::BatchNormalization({.momentum = 0.9});
  Tensor x = iota(Shape{4, 2, 2, 3}, 0.7f);
  auto y = run_layer(bn, {x}, true)[0].to_vector();
  auto xv = x.to_vector();
  const int C = 3, n = 16;
  auto mm = bn->weights()[2]->value.to_vector(), mv = bn->weights()[3]->value.to_vector();
  for (int c = 0; c < C; ++c) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) s += xv[i * C + c];
    double mean = s / n;
    for (int i = 0; i < n; ++i) s2 += (xv[i * C + c] - mean) * (xv[i * C + c] - mean);
    double var = s2 / n;  // biased, as Keras 3
    EXPECT_NEAR(mm[c], 0.1 * mean, 1e-5);
    EXPECT_NEAR(mv[c], 0.9 * 1.0 + 0.1 * var, 1e-5);
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(y[i * C + c], (xv[i * C + c] - mean) / std::sqrt(var + 1e-3), 1e-4);
  }
  // Inference uses the moving statistics.
  auto yi = run_layer(bn, {x}, false)[0].to_vector();
  for (int c = 0; c < C; ++c)
    EXPECT_NEAR(yi[c], (xv[c] - mm[c]) / std::sqrt(mv[c] + 1e-3), 1e-4);
}

TEST(LayerNumeric, DropoutScalesKeptUnits) {
  auto d = L::Dropout(0.5);
  Tensor x = Tensor::full(Shape{64, 32}, 1.f);
  auto y = run_layer(d, {x}, true)[0].to_vector();
  int zeros = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.f || std::fabs(v - 2.f) < 1e-6) << v;
    zeros += v == 0.f;
  }
  EXPECT_GT(zeros, 800);
  EXPECT_LT(zeros, 1250);
  auto yi = run_layer(d, {x}, false)[0].to_vector();
  for (float v : yi) EXPECT_EQ(v, 1.f);
}

TEST(LayerNumeric, SeparableEqualsDepthwiseThenPointwise) {
  auto sep = L::SeparableConv2D(4, {3, 3}, {.padding = "same", .bias_initializer = "ones"});
  Tensor x = iota(Shape{2, 4, 4, 3});
  Tensor y = run_layer(sep, {x}, false, "reference", /*fuse=*/false)[0];
  ASSERT_EQ(y.shape(), Shape({2, 4, 4, 4}));
  auto dw = L::DepthwiseConv2D({3, 3}, {.padding = "same", .use_bias = false});
  dw->ensure_built({Shape{-1, 4, 4, 3}});
  dw->weights()[0]->value.copy_from(sep->weights()[0]->value);
  Tensor h = run_layer(dw, {x}, false)[0];
  auto pw = sep->weights()[1]->value.to_vector();  // [1, 1, 3, 4]
  auto hv = h.to_vector(), yv = y.to_vector();
  for (int p = 0; p < 32; ++p)
    for (int o = 0; o < 4; ++o) {
      float ref = 1.f;
      for (int c = 0; c < 3; ++c) ref += hv[p * 3 + c] * pw[c * 4 + o];
      EXPECT_NEAR(yv[p * 4 + o], ref, 1e-5);
    }
}

TEST(LayerNumeric, MergeAndPoolingValues) {
  Tensor a = iota(Shape{2, 3}), b = iota(Shape{2, 3}, 0.3f);
  auto s = run_layer(L::Add(), {a, b, a}, false)[0].to_vector();
  auto p = run_layer(L::Multiply(), {a, b}, false)[0].to_vector();
  auto c = run_layer(L::Concatenate(), {a, b}, false)[0];
  EXPECT_EQ(c.shape(), Shape({2, 6}));
  auto av = a.to_vector(), bv = b.to_vector(), cv = c.to_vector();
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(s[i], 2 * av[i] + bv[i], 1e-6);
    EXPECT_NEAR(p[i], av[i] * bv[i], 1e-6);
  }
  EXPECT_EQ(cv[3], bv[0]);
  Tensor img = iota(Shape{1, 2, 2, 2});
  auto g = run_layer(L::GlobalAveragePooling2D(), {img}, false)[0].to_vector();
  auto iv = img.to_vector();
  EXPECT_NEAR(g[1], (iv[1] + iv[3] + iv[5] + iv[7]) / 4, 1e-6);
  auto r = run_layer(L::Rescaling(2.0, -1.0), {img}, false)[0].to_vector();
  EXPECT_NEAR(r[3], iv[3] * 2 - 1, 1e-6);
}

// Conv2D emits conv2d -> bias_add -> relu; the executable's fusion pass folds them into one
// node. Fused and unfused programs must agree (and match a hand-computed value).
TEST(LayerNumeric, Conv2DBiasReluSameWithAndWithoutFusion) {
  auto conv = L::Conv2D(4, 3, {.padding = "same", .activation = "relu",
                               .bias_initializer = "constant:0.05"});
  Tensor x = iota(Shape{2, 5, 5, 3});
  auto ref = run_layer(conv, {x}, false, "reference", false)[0].to_vector();
  auto k = conv->weights()[0]->value.to_vector();  // [3, 3, 3, 4]
  auto xv = x.to_vector();
  float v = 0.05f;  // output (0, 2, 2, 1): a full 3x3 window centred on (2, 2)
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 3; ++c) v += xv[((1 + a) * 5 + (1 + b)) * 3 + c] * k[((a * 3 + b) * 3 + c) * 4 + 1];
  EXPECT_NEAR(ref[(2 * 5 + 2) * 4 + 1], std::max(v, 0.f), 1e-5);
  for (const char* backend : {"reference", "cpu"}) {
    auto fused = run_layer(conv, {x}, false, backend, true)[0].to_vector();
    ASSERT_EQ(fused.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(fused[i], ref[i], 1e-4) << backend << i;
  }
}
