// Conv2DTranspose and UpSampling2D (issue 23): outputs against values Keras 3.15 computed, the
// configs both ways, reference / cpu / bf16, training through them, and bad arguments.
//
// The expected values come from Keras 3.15.1 on JAX, computed once (KERAS_BACKEND=jax,
// .venv-interop/bin/python) and pasted here:
//   x[i] = ((i * 37) % 19 - 9) / 8 over the flat NHWC input,
//   kernel[i] = ((i * 23) % 13 - 6) / 10 over Keras's flat kernel [kh, kw, filters, C],
//   bias = 0.1, 0.2, ... (when use_bias);
//   layer = keras.layers.Conv2DTranspose(**kw); layer.build(x.shape);
//   layer.set_weights([kernel, bias]); print(np.asarray(layer(x)).ravel())
// and likewise keras.layers.UpSampling2D(**kw)(x) (no weights).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "lockstep/graph/executable.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/config.h"
#include "test_util.h"

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

std::vector<float> seq(int64_t n, int64_t a, int64_t m, int64_t off, double d) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(float(double((i * a) % m - off) / d));
  return v;
}
Tensor x_of(const Shape& s) { return Tensor::from_vector(s, seq(s.numel(), 37, 19, 9, 8.0)); }

// Builds `l` for x's shape (batch symbolic), calls it and runs it on `backend` (in bf16 when
// asked: x cast to bf16 first, as mixed_bfloat16 does).
Tensor run_layer(const LayerHandle& l, const Tensor& x, const std::string& backend = "reference",
                 DType dtype = DType::f32) {
  l->ensure_built({x.shape().with_dim(0, -1)});
  Graph g;
  Value in = g.input({DType::f32, x.shape()}, "x");
  Value v = dtype == DType::f32 ? in : g.add(op::cast, {in}, Attrs{{"dtype", "bfloat16"}});
  CallContext ctx{g, false, 0, {}};
  Value y = l->call(ctx, {v})[0];
  if (g.type(y).dtype != DType::f32) y = g.add(op::cast, {y}, Attrs{{"dtype", "float32"}});
  Executable exe(g, {in}, {y}, {.backend = backend});
  exe.input(0).copy_from(x);
  exe.run();
  return exe.output(0).clone();
}

void expect_values(const Tensor& got, const Shape& shape, const std::vector<float>& want,
                   double tol) {
  ASSERT_EQ(got.shape(), shape);
  auto g = got.to_vector();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
}

LayerPtr round_trip(const LayerHandle& l) {
  return layer_from_config(json{{"class_name", l->class_name()}, {"config", l->config()}});
}

// Sets Keras's test weights (see the header) on a built Conv2DTranspose.
void set_test_weights(const LayerHandle& l) {
  const auto& w = l->weights();
  Tensor& k = w.at(0)->value;
  k.copy_from(Tensor::from_vector(k.shape(), seq(k.numel(), 23, 13, 6, 10.0)));
  if (w.size() > 1) {
    std::vector<float> b;
    for (int64_t i = 0; i < w[1]->value.numel(); ++i) b.push_back(0.1f * float(i + 1));
    w[1]->value.copy_from(Tensor::from_vector(w[1]->value.shape(), b));
  }
}

struct TransposeCase {
  const char* name;
  std::function<LayerHandle()> make;
  Shape x;
  Shape y;
  std::vector<float> keras;
};
struct UpCase {
  const char* name;
  std::function<LayerHandle()> make;
  Shape x;
  Shape y;
  std::vector<float> keras;
};

const std::vector<TransposeCase> kTransposeCases = {
    {"valid_s2_k3x2",
     [] {
       return L::Conv2DTranspose(3, {3, 2}, {.strides = {2, 2}, .padding = "valid"});
     },
     {1, 3, 4, 2},
     {1, 7, 8, 3},
     {1.22500002f,    -0.137500003f,  1.42499995f,    -0.237500012f,  1.32500005f,
      -0.037499994f,  -0.150000036f,  0.125f,         0.237500012f,   0.212500006f,
      0.325000018f,   0.600000024f,   -0.100000016f,  0.150000006f,   0.237500012f,
      0.1875f,        0.275000006f,   0.525000036f,   -0.0500000045f, 0.174999997f,
      0.237500012f,   0.162499994f,   0.225000009f,   0.450000018f,   -0.237500042f,
      -0.137500003f,  -0.0374999642f, -0.237500012f,  -0.137500003f,  -0.037499994f,
      -0.725000024f,  0.6875f,        -0.337499976f,  0.775000036f,   -0.25f,
      1.16250002f,    -0.5f,          0.5625f,        -0.162499994f,  0.600000024f,
      -0.125000015f,  0.93750006f,    -0.275000006f,  0.4375f,        0.0125000179f,
      0.424999982f,   0.0f,           0.712500036f,   -0.337500006f,  1.32500005f,
      -0.099999994f,  1.26250005f,    -0.162500009f,  1.5f,           -0.212500036f,
      -0.0250000209f, 0.162500009f,   0.0500000007f,  0.237500012f,   0.425000012f,
      -0.0874999985f, 0.0499999821f,  0.187500015f,   0.0249999985f,  0.162500009f,
      0.300000012f,   0.0375000052f,  0.125f,         0.212500006f,   0.0f,
      0.0874999911f,  0.175000012f,   -0.0500000045f, 0.3125f,        0.187500015f,
      0.25f,          0.125f,         0.487500012f,   0.175000012f,   0.1875f,
      0.362500012f,   0.075000003f,   0.25f,          0.262500018f,   0.400000006f,
      0.0625f,        0.537500024f,   -0.100000001f,  0.375f,         0.037499994f,
      0.62500006f,    -0.0625000149f, 0.712499976f,   -0.275000006f,  0.5f,
      -0.1875f,       0.162500009f,   0.199999988f,   0.237500012f,   -0.0249999985f,
      0.012500003f,   0.0500000119f,  0.287500024f,   0.275000006f,   0.262500018f,
      -0.0500000045f, -0.0625000447f, -0.0749999881f, -0.0624999925f, 0.112500012f,
      0.287500024f,   0.162499994f,   0.337500006f,   0.512500048f,   0.0624999776f,
      0.187500015f,   0.3125f,        0.137499988f,   0.262500018f,   0.387500018f,
      0.850000024f,   -0.187500015f,  0.887499988f,   -0.450000018f,  0.625f,
      -0.412500024f,  1.07500005f,    -0.3125f,       1.0625f,        -0.625f,
      0.75f,          -0.637500048f,  -0.837499976f,  0.75f,          -0.425000012f,
      0.862500012f,   -0.3125f,       1.2750001f,     -0.612500012f,  0.625f,
      -0.25f,         0.6875f,        -0.187499985f,  1.05000007f,    0.362500012f,
      0.300000012f,   0.400000006f,   0.0375000015f,  0.137499988f,   0.075000003f,
      0.4375f,        0.350000024f,   0.425000012f,   0.0375000015f,  0.112500004f,
      0.0249999762f,  -0.200000018f,  -0.075000003f,  0.212500006f,   0.0375000015f,
      0.324999988f,   0.450000018f,   -0.125f,        -0.0250000209f, 0.237500012f,
      0.0375000015f,  0.300000012f,   0.400000036f}},
    {"same_s2_k3",
     [] {
       return L::Conv2DTranspose(2, {3, 3}, {.strides = {2, 2}, .padding = "same"});
     },
     {2, 3, 3, 2},
     {2, 6, 6, 2},
     {1.22500002f,    -0.137500003f,  1.22500002f,    -0.137500003f,  0.975000024f,
      -0.212500021f,  0.0375000015f,  0.3125f,        0.0249999985f,  0.449999988f,
      0.0375000015f,  0.287500024f,   -0.237500042f,  -0.137500003f,  -0.237499982f,
      -0.137500003f,  -1.0625f,       0.350000024f,   -0.537499964f,  0.875f,
      -0.950000048f,  1.42500007f,    -0.362500012f,  0.699999988f,   -0.387500018f,
      1.30000007f,    -0.300000012f,  1.38750005f,    -0.575000048f,  1.22500002f,
      -0.0375000015f, 0.175000012f,   -0.0499999896f, 0.225000009f,   -0.0124999955f,
      0.150000006f,   -0.275000006f,  0.4375f,        -0.1875f,       0.524999976f,
      -0.25000003f,   0.725000024f,   -0.0124999955f, 0.350000024f,   0.100000001f,
      0.375f,         0.162499994f,   0.174999997f,   -0.0124999955f, 0.099999994f,
      0.012500003f,   0.125f,         0.0500000082f,  0.125f,         0.0375000015f,
      0.100000001f,   0.100000001f,   0.075000003f,   0.0625f,        0.075000003f,
      0.400000006f,   0.0625f,        0.337500006f,   0.0f,           0.800000072f,
      -0.325000048f,  0.512499988f,   -0.174999997f,  1.14999998f,    -0.675000012f,
      0.6875f,        -0.350000024f,  0.25000003f,    0.324999988f,   0.0375000015f,
      0.112500004f,   -0.450000077f,  -0.187500015f,  0.0375000015f,  0.324999988f,
      0.0249999836f,  0.475000024f,   0.0375000015f,  0.300000012f,   1.07500005f,
      -0.3125f,       0.862500012f,   -0.525000036f,  -0.287499994f,  -0.187500045f,
      -0.625f,        0.962499976f,   -1.125f,        1.60000002f,    -0.450000018f,
      0.787499964f,   0.262500018f,   0.31250003f,    0.162499994f,   0.212500006f,
      -0.362500012f,  -0.175000057f,  -0.0500000045f, 0.1875f,        -0.0750000104f,
      0.249999985f,   -0.0249999985f, 0.162499994f,   -0.387500018f,  0.5f,
      -0.275000006f,  0.612500012f,   -0.424999982f,  0.899999976f,   -0.100000001f,
      0.4375f,        -0.0750000104f, 0.550000012f,   0.075000003f,   0.262499988f,
      -0.0750000104f, 0.0625000149f,  0.0f,           0.137500003f,   0.0249999985f,
      0.150000006f,   0.0249999985f,  0.112499997f,   0.0749999955f,  0.100000009f,
      0.0500000007f,  0.087500006f,   0.287499994f,   0.125f,         0.25f,
      0.087500006f,   0.62500006f,    -0.150000021f,  0.424999982f,   -0.0874999911f,
      0.975000083f,   -0.5f,          0.600000024f,   -0.262499988f}},
    {"valid_s2_outpad",
     [] {
       return L::Conv2DTranspose(2, {3, 3},
                                 {.strides = {2, 2}, .padding = "valid", .output_padding = {1, 0}});
     },
     {1, 3, 3, 2},
     {1, 8, 7, 2},
     {1.22500002f,    -0.137500003f, 1.22500002f,    -0.137500003f, 0.975000024f,   -0.212500021f,
      0.0375000015f,  0.3125f,       0.0249999985f,  0.449999988f,  0.0375000015f,  0.287500024f,
      0.175000012f,   0.425000012f,  -0.237500042f,  -0.137500003f, -0.237499982f,  -0.137500003f,
      -1.0625f,       0.350000024f,  -0.537499964f,  0.875f,        -0.950000048f,  1.42500007f,
      -0.362500012f,  0.699999988f,  -0.225000024f,  0.837500036f,  -0.387500018f,  1.30000007f,
      -0.300000012f,  1.38750005f,   -0.575000048f,  1.22500002f,   -0.0375000015f, 0.175000012f,
      -0.0499999896f, 0.225000009f,  -0.0124999955f, 0.150000006f,  0.112500004f,   0.275000006f,
      -0.275000006f,  0.4375f,       -0.1875f,       0.524999976f,  -0.25000003f,   0.725000024f,
      -0.0124999955f, 0.350000024f,  0.100000001f,   0.375f,        0.162499994f,   0.174999997f,
      0.150000006f,   0.162499994f,  -0.0124999955f, 0.099999994f,  0.012500003f,   0.125f,
      0.0500000082f,  0.125f,        0.0375000015f,  0.100000001f,  0.100000001f,   0.075000003f,
      0.0625f,        0.075000003f,  -0.112500004f,  -0.100000009f, 0.400000006f,   0.0625f,
      0.337500006f,   0.0f,          0.800000072f,   -0.325000048f, 0.512499988f,   -0.174999997f,
      1.14999998f,    -0.675000012f, 0.6875f,        -0.350000024f, 0.525000036f,   -0.512500048f,
      0.212500006f,   0.200000003f,  0.150000006f,   0.137500003f,  0.275000006f,   0.125000015f,
      0.175000012f,   0.137500003f,  0.325000018f,   0.125f,        0.200000003f,   0.137500003f,
      0.037499994f,   -0.025000006f, 0.100000001f,   0.200000003f,  0.100000001f,   0.200000003f,
      0.100000001f,   0.200000003f,  0.100000001f,   0.200000003f,  0.100000001f,   0.200000003f,
      0.100000001f,   0.200000003f,  0.100000001f,   0.200000003f}},
    {"same_s2_k4_outpad1",
     [] {
       return L::Conv2DTranspose(2, {4, 4},
                                 {.strides = {2, 2}, .padding = "same", .output_padding = {1}});
     },
     {1, 3, 2, 3},
     {1, 5, 3, 2},
     {1.42500007f,   0.462500036f,   -1.13750005f, 1.72500014f,   0.324999988f,  -0.550000012f,
      -0.774999976f, 0.175000027f,   1.91250002f,  -1.4375f,      -0.43750003f,  2.22500014f,
      1.31250012f,   0.3125f,        -0.5f,        -0.112500027f, -0.25000006f,  -1.0f,
      0.137499988f,  0.237499982f,   0.362499982f, 0.212499991f,  0.512499988f,  -0.612499952f,
      -0.1875f,      -0.0875000209f, 0.800000072f, 0.487500012f,  -0.512499928f, -0.012500003f}},
    {"same_dil2",
     [] {
       return L::Conv2DTranspose(2, {3, 3}, {.padding = "same", .dilation_rate = {2, 2}});
     },
     {1, 5, 4, 2},
     {1, 5, 4, 2},
     {-1.17500007f,  0.075000003f,  -1.20000005f,   0.962500036f,   -0.987499952f, 0.262499988f,
      -0.975000024f, 1.1875f,       0.150000006f,   0.300000012f,   0.600000024f,  -2.98023224e-08f,
      0.25f,         0.400000036f,  0.49999997f,    -0.0999999791f, -0.712499976f, 1.2125001f,
      1.02499998f,   -0.700000048f, -0.800000012f,  1.125f,         1.11249995f,   -0.612500072f,
      -0.199999988f, 0.600000024f,  0.300000012f,   0.350000024f,   -0.100000001f, 0.699999988f,
      0.199999988f,  0.25f,         1.08749998f,    -0.87500006f,   0.162499994f,  -0.887500107f,
      0.862500012f,  -1.10000002f,  -0.0249999985f, -1.07499993f}},
    {"valid_s3_k2_relu_nobias",
     [] {
       return L::Conv2DTranspose(
           2, {2, 2},
           {.strides = {3, 3}, .padding = "valid", .activation = "relu", .use_bias = false});
     },
     {1, 2, 3, 2},
     {1, 6, 9, 2},
     {1.125f,       0.0f,          1.125f,       0.0f,          0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.112500004f,  0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.087500006f,  0.0f, 0.0f,
      1.125f,       0.0f,          0.0f,         0.0f,          0.0f, 0.0f,
      0.125000015f, 0.300000012f,  0.0f,         0.487500012f,  0.0f, 0.0f,
      0.075000003f, 0.225000009f,  0.0f,         0.362500012f,  0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.0f,          0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.0f,          0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.0f,          0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.0625f,       0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.0375000015f, 0.0f, 0.0f,
      0.0f,         0.0250000004f, 0.0f,         0.0125000002f, 0.0f, 0.0f,
      0.025000006f, 0.150000006f,  0.0f,         0.237499997f,  0.0f, 0.0f,
      0.0f,         0.075000003f,  0.0f,         0.112500004f,  0.0f, 0.0f,
      0.0f,         0.0f,          0.075000003f, 0.0f,          0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.0f,          0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.0f,          0.0f, 0.0f,
      0.0f,         0.0f,          0.0f,         0.0f,          0.0f, 0.0f}},
};
const std::vector<UpCase> kUpCases = {
    {"nearest_2x3",
     [] {
       return L::UpSampling2D({2, 3}, "nearest");
     },
     {1, 2, 3, 2},
     {1, 4, 9, 2},
     {-1.125f, 1.125f, -1.125f, 1.125f, -1.125f, 1.125f, 1.0f,    0.875f, 1.0f,
      0.875f,  1.0f,   0.875f,  0.75f,  0.625f,  0.75f,  0.625f,  0.75f,  0.625f,
      -1.125f, 1.125f, -1.125f, 1.125f, -1.125f, 1.125f, 1.0f,    0.875f, 1.0f,
      0.875f,  1.0f,   0.875f,  0.75f,  0.625f,  0.75f,  0.625f,  0.75f,  0.625f,
      0.5f,    0.375f, 0.5f,    0.375f, 0.5f,    0.375f, 0.25f,   0.125f, 0.25f,
      0.125f,  0.25f,  0.125f,  0.0f,   -0.125f, 0.0f,   -0.125f, 0.0f,   -0.125f,
      0.5f,    0.375f, 0.5f,    0.375f, 0.5f,    0.375f, 0.25f,   0.125f, 0.25f,
      0.125f,  0.25f,  0.125f,  0.0f,   -0.125f, 0.0f,   -0.125f, 0.0f,   -0.125f}},
    {"bilinear_2x2",
     [] { return L::UpSampling2D({2}, "bilinear"); },
     {1, 3, 3, 2},
     {1, 6, 6, 2},
     {-1.125f,    1.125f,   -0.59375f,  1.0625f,  0.46875f,   0.9375f,  0.9375f,     0.8125f,
      0.8125f,    0.6875f,  0.75f,      0.625f,   -0.71875f,  0.9375f,  -0.3359375f, 0.875f,
      0.4296875f, 0.75f,    0.75f,      0.625f,   0.625f,     0.5f,     0.5625f,     0.4375f,
      0.09375f,   0.5625f,  0.1796875f, 0.5f,     0.3515625f, 0.375f,   0.375f,      0.25f,
      0.25f,      0.125f,   0.1875f,    0.0625f,  0.3125f,    0.1875f,  0.25f,       0.125f,
      0.125f,     0.0f,     0.0f,       -0.125f,  -0.125f,    -0.25f,   -0.1875f,    -0.3125f,
      -0.0625f,   -0.1875f, -0.125f,    -0.25f,   -0.25f,     -0.375f,  -0.375f,     -0.5f,
      -0.5f,      -0.625f,  -0.5625f,   -0.6875f, -0.25f,     -0.375f,  -0.3125f,    -0.4375f,
      -0.4375f,   -0.5625f, -0.5625f,   -0.6875f, -0.6875f,   -0.8125f, -0.75f,      -0.875f}},
    {"bilinear_3x2",
     [] {
       return L::UpSampling2D({3, 2}, "bilinear");
     },
     {2, 2, 3, 1},
     {2, 6, 6, 1},
     {-1.125f,       -0.5625f,       0.5625f,      1.09375f,      1.03125f,      1.0f,
      -1.125f,       -0.5625f,       0.5625f,      1.09375f,      1.03125f,      1.0f,
      -0.458333254f, -0.0937499404f, 0.635416627f, 0.96875f,      0.90625f,      0.875f,
      0.208333462f,  0.375000119f,   0.708333313f, 0.84375f,      0.78125f,      0.75f,
      0.875f,        0.84375f,       0.78125f,     0.71875f,      0.65625f,      0.625f,
      0.875f,        0.84375f,       0.78125f,     0.71875f,      0.65625f,      0.625f,
      0.5f,          0.46875f,       0.40625f,     0.34375f,      0.28125f,      0.25f,
      0.5f,          0.46875f,       0.40625f,     0.34375f,      0.28125f,      0.25f,
      0.375f,        0.34374997f,    0.28124997f,  0.218749985f,  0.156249985f,  0.124999985f,
      0.24999997f,   0.21874997f,    0.15624997f,  0.0937499702f, 0.0312499702f, -2.98023224e-08f,
      0.125f,        0.09375f,       0.03125f,     -0.03125f,     -0.09375f,     -0.125f,
      0.125f,        0.09375f,       0.03125f,     -0.03125f,     -0.09375f,     -0.125f}},
};

}  // namespace

TEST(TransposeUpsampleLayers, Conv2DTransposeMatchesKeras) {
  for (const TransposeCase& c : kTransposeCases) {
    SCOPED_TRACE(c.name);
    Tensor x = x_of(c.x);
    for (const char* backend : {"reference", "cpu"}) {
      LayerHandle l = c.make();
      l->ensure_built({c.x.with_dim(0, -1)});
      set_test_weights(l);
      expect_values(run_layer(l, x, backend), c.y, c.keras, 1e-5);
    }
    // The same layer from its config, and in bf16 (inputs and kernel rounded to 8 bits).
    LayerHandle l = c.make();
    LayerPtr back = round_trip(l);
    EXPECT_EQ(back->config(), l->config());
    back->ensure_built({c.x.with_dim(0, -1)});
    set_test_weights(back);
    expect_values(run_layer(back, x), c.y, c.keras, 1e-5);
    expect_values(run_layer(back, x, "cpu", DType::bf16), c.y, c.keras, 0.05);
  }
}

TEST(TransposeUpsampleLayers, Conv2DTransposeKerasWeightLayoutAndConfig) {
  LayerHandle l = L::Conv2DTranspose(5, {3, 2}, {.strides = {2, 1}, .padding = "same"});
  l->ensure_built({Shape{-1, 4, 4, 7}});
  ASSERT_EQ(l->weights().size(), 2u);
  EXPECT_EQ(l->weights()[0]->value.shape(), (Shape{3, 2, 5, 7}));  // [kh, kw, filters, C]
  EXPECT_EQ(l->weights()[1]->value.shape(), (Shape{5}));
  const json c = l->config();
  EXPECT_EQ(c["name"].get<std::string>().rfind("conv2d_transpose", 0), 0u) << c["name"];
  EXPECT_EQ(c["filters"], 5);
  EXPECT_EQ(c["kernel_size"], json({3, 2}));
  EXPECT_EQ(c["strides"], json({2, 1}));
  EXPECT_TRUE(c["output_padding"].is_null());
  EXPECT_EQ(c["dilation_rate"], json({1, 1}));
  EXPECT_EQ(c["data_format"], "channels_last");
  EXPECT_FALSE(c.contains("groups"));
  // Keras's own config (keras.layers.Conv2DTranspose(3, (3, 2), strides=2,
  // output_padding=(1, 0)).get_config(), Keras 3.15.1).
  json keras = json::parse(R"({"name": "conv2d_transpose", "trainable": true, "dtype": {"module":
    "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null},
    "filters": 3, "kernel_size": [3, 2], "strides": [2, 2], "padding": "valid",
    "output_padding": [1, 0], "data_format": "channels_last", "dilation_rate": [1, 1],
    "activation": "linear", "use_bias": true, "kernel_initializer": {"module":
    "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null, "input_axes":
    null, "output_axes": null}, "registered_name": null}, "bias_initializer": {"module":
    "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
    "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
    "kernel_constraint": null, "bias_constraint": null})");
  LayerPtr from = layer_from_config(json{{"class_name", "Conv2DTranspose"}, {"config", keras}});
  EXPECT_EQ(from->class_name(), "Conv2DTranspose");
  EXPECT_EQ(from->config()["output_padding"], json({1, 0}));
  EXPECT_EQ(from->config()["kernel_size"], json({3, 2}));
  // A value Lockstep cannot represent names the layer and key.
  keras["data_format"] = "channels_first";
  try {
    layer_from_config(json{{"class_name", "Conv2DTranspose"}, {"config", keras}});
    ADD_FAILURE() << "channels_first accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data_format"), std::string::npos) << e.what();
  }
}

TEST(TransposeUpsampleLayers, Conv2DTransposeRejectsBadArguments) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([] {
    L::Conv2DTranspose(2, 3, {.strides = {2, 2}, .output_padding = {2}});
  });
  EXPECT_NE(m.find("output_padding"), std::string::npos) << m;
  EXPECT_NE(m.find("Conv2DTranspose 'conv2d_transpose"), std::string::npos) << m;
  m = message([] { L::Conv2DTranspose(0, 3); });
  EXPECT_NE(m.find("filters"), std::string::npos) << m;
  m = message([] { L::Conv2DTranspose(2, 3, {.padding = "full"}); });
  EXPECT_NE(m.find("padding"), std::string::npos) << m;
}

TEST(TransposeUpsampleLayers, UpSampling2DMatchesKeras) {
  for (const UpCase& c : kUpCases) {
    SCOPED_TRACE(c.name);
    Tensor x = x_of(c.x);
    for (const char* backend : {"reference", "cpu"})
      expect_values(run_layer(c.make(), x, backend), c.y, c.keras, 1e-6);
    LayerHandle l = c.make();
    LayerPtr back = round_trip(l);
    EXPECT_EQ(back->config(), l->config());
    expect_values(run_layer(back, x), c.y, c.keras, 1e-6);
    expect_values(run_layer(back, x, "cpu", DType::bf16), c.y, c.keras, 0.02);
  }
  // Keras's config (keras.layers.UpSampling2D().get_config()) and a bad interpolation.
  json keras = json::parse(R"({"name": "up_sampling2d", "trainable": true, "dtype": "float32",
    "size": [2, 2], "data_format": "channels_last", "interpolation": "bilinear"})");
  LayerPtr l = layer_from_config(json{{"class_name", "UpSampling2D"}, {"config", keras}});
  EXPECT_EQ(l->config()["interpolation"], "bilinear");
  EXPECT_EQ(l->config()["size"], json({2, 2}));
  EXPECT_EQ(L::UpSampling2D()->config()["interpolation"], "nearest");
  try {
    L::UpSampling2D({2, 2}, "bicubic", "up");
    ADD_FAILURE() << "bicubic accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("UpSampling2D 'up'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bicubic"), std::string::npos) << e.what();
  }
}

// A small encoder-decoder trains through both layers on cpu, in float32 and under
// mixed_bfloat16 (the gradients: conv2d and conv2d_backward_filter for Conv2DTranspose,
// upsample2d_grad for UpSampling2D).
TEST(TransposeUpsampleLayers, EncoderDecoderTrainsInFloat32AndMixedBfloat16) {
  for (const char* policy : {"float32", "mixed_bfloat16"}) {
    SCOPED_TRACE(policy);
    mixed_precision::set_global_policy(policy);
    set_random_seed(5);
    using namespace layers;
    Model m = Sequential(
        {Input({8, 8, 2}),
         Conv2D(6, 3, {.strides = {2, 2}, .padding = "same", .activation = "relu"}),
         UpSampling2D({2, 2}, "bilinear"),
         Conv2DTranspose(4, 3, {.strides = {2, 2}, .padding = "same", .activation = "relu"}),
         Conv2DTranspose(4, 2, {.strides = {3, 3}, .output_padding = {1}}), UpSampling2D({1, 2}),
         GlobalAveragePooling2D(), Dense(3)});
    mixed_precision::set_global_policy("float32");
    m.compile({.optimizer = optimizers::Adam(2e-2),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    auto [x, y] = test_util::quadrant_images(96, 3);
    auto h = m.fit(x, y, {.batch_size = 16, .epochs = 8, .verbose = 0});
    const auto& loss = h.history["loss"];
    for (double l : loss) EXPECT_TRUE(std::isfinite(l));
    EXPECT_LT(loss.back(), 0.8 * loss.front()) << loss.front() << " -> " << loss.back();
  }
}
