// The cpu backend's swish pass (swish_span in src/backends/cpu/vec_math.h: the swish a conv2d
// with activation "swish" applies to its output, in place of oneDNN's eltwise post-op) against
// x / (1 + e^-x) in double precision: over the float range where sigmoid is not flushed, at
// every length from 0 to 80 (the 64-wide loop, the 16-wide one and the masked tail), in place,
// at the edges (NaN, infinities, clamped arguments), and in bfloat16, where it must round the
// float32 result once, as f32_to_bf16 does; and the scalar vec_sigmoid. The conv2d that runs it is
// checked against the reference backend by the op table's conv2d_fused_bias_swish(_large) cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/vec_math.h"
#include "lockstep/core/rng.h"

namespace lockstep {
namespace {

double swish_exact(double x) { return x / (1.0 + std::exp(-x)); }

// |y - swish(x)| within 1e-6 relative, or 1e-30 absolute where swish underflows.
void expect_close(float x, float y) {
  const double want = swish_exact(x);
  EXPECT_LE(std::fabs(y - want), 1e-6 * std::fabs(want) + 1e-30) << "x = " << x;
}

TEST(SwishSpan, MatchesDoublePrecisionOverTheRange) {
  std::vector<float> x;
  for (float v = -87.f; v <= 87.f; v += 0.00731f) x.push_back(v);
  std::vector<float> y(x.size());
  cpu::swish_span(x.data(), y.data(), int64_t(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    expect_close(x[i], y[i]);
    const double want = swish_exact(x[i]);
    if (want != 0) worst = std::max(worst, std::fabs(y[i] - want) / std::fabs(want));
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_GT(worst, 0.0);  // an approximation, not libm: a test of the pass, not of a copy
}

// vec_sigmoid, the scalar form the elementwise and batch-norm kernels vectorise with
// `omp simd` (the fused batch norm + swish of training, sigmoid, swish_grad).
TEST(SwishSpan, ScalarSigmoidMatchesDoublePrecision) {
  double worst = 0;
  for (float v = -87.f; v <= 87.f; v += 0.00731f) {
    const double want = 1.0 / (1.0 + std::exp(-double(v)));
    worst = std::max(worst, std::fabs(cpu::vec_sigmoid(v) - want) / want);
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_TRUE(std::isnan(cpu::vec_sigmoid(std::nanf(""))));
  EXPECT_EQ(cpu::vec_sigmoid(200.f), 1.f);
  EXPECT_LE(cpu::vec_sigmoid(-200.f), 2e-38f);
}

TEST(SwishSpan, EveryLengthAndInPlace) {
  Philox rng(7);
  for (int64_t n = 0; n <= 80; ++n) {
    std::vector<float> x(size_t(n) + 1), y(size_t(n) + 1, 42.f);
    for (auto& v : x) v = rng.uniform(-12.f, 12.f);
    cpu::swish_span(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) expect_close(x[size_t(i)], y[size_t(i)]);
    EXPECT_EQ(y[size_t(n)], 42.f) << "wrote past the end at n = " << n;
    std::vector<float> z = x;
    cpu::swish_span(z.data(), z.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[size_t(i)], y[size_t(i)]) << n << " " << i;
  }
}

TEST(SwishSpan, Edges) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{std::nanf(""), inf, 200.f, 87.3f, 0.f, -0.f, -87.f, -200.f};
  std::vector<float> y(x.size());
  cpu::swish_span(x.data(), y.data(), int64_t(x.size()));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[2], 200.f);
  EXPECT_FLOAT_EQ(y[3], 87.3f);
  EXPECT_EQ(y[4], 0.f);
  EXPECT_EQ(y[5], 0.f);
  expect_close(x[6], y[6]);
  EXPECT_LE(std::fabs(y[7]), 1e-35f);  // sigmoid clamped at e^-87.3: ~ -2e-36, not 0
}

TEST(SwishSpan, Bfloat16RoundsTheFloat32ResultOnce) {
  Philox rng(11);
  for (int64_t n : {1, 15, 16, 17, 100, 1000}) {
    std::vector<float> xf(static_cast<size_t>(n));
    std::vector<bf16> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = f32_to_bf16(rng.uniform(-20.f, 20.f));
      xf[size_t(i)] = bf16_to_f32(x[size_t(i)]);
    }
    std::vector<float> yf(static_cast<size_t>(n));
    cpu::swish_span(xf.data(), yf.data(), n);
    cpu::swish_span(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(y[size_t(i)].bits, f32_to_bf16(yf[size_t(i)]).bits) << "n " << n << " i " << i;
  }
}

}  // namespace
}  // namespace lockstep
