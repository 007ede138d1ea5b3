// The finite-difference check is relative per element (op_harness.h, gradient_mismatch). It
// used to allow an absolute 2e-2 * max(1, max|numeric|), under which a reduce_mean gradient
// scaled by 1/10 instead of 1/12 (off by 17% everywhere) passed: the whole gradient is below
// 0.1, so its error stays under 0.02.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lockstep/core/rng.h"
#include "ops/op_harness.h"

namespace lockstep::testing {

namespace {

// d/dx of sum(w * mean(x)) over 12 elements is w / 12; the mutant divides by 10.
std::vector<float> mean_gradient(double count) {
  Philox rng(7);
  std::vector<float> g;
  for (int i = 0; i < 12; ++i) g.push_back(float((2.0 * rng.uniform() - 1.0) / count));
  return g;
}

bool old_absolute_check_passes(const std::vector<float>& numeric,
                               const std::vector<float>& analytic) {
  double max_err = 0, max_ref = 0;
  for (size_t e = 0; e < numeric.size(); ++e) {
    max_err = std::max(max_err, std::fabs(double(numeric[e]) - analytic[e]));
    max_ref = std::max(max_ref, std::fabs(double(numeric[e])));
  }
  return max_err <= 2e-2 * std::max(1.0, max_ref);
}

}  // namespace

TEST(GradientCheck, AReduceMeanGradientOverTenInsteadOfTwelveIsCaught) {
  const auto numeric = mean_gradient(12), mutant = mean_gradient(10);
  EXPECT_TRUE(old_absolute_check_passes(numeric, mutant));  // what the old tolerance let through
  const std::string why = gradient_mismatch(numeric, mutant, 2e-2);
  EXPECT_NE(why, "");
  EXPECT_NE(why.find("element"), std::string::npos) << why;
}

TEST(GradientCheck, TheRightGradientWithFiniteDifferenceNoisePasses) {
  auto numeric = mean_gradient(12);
  const auto analytic = numeric;
  for (size_t e = 0; e < numeric.size(); ++e) numeric[e] *= 1.0f + (e % 2 ? 5e-3f : -5e-3f);
  numeric[3] = 1e-7f;  // an element at the floor: rounding noise, not a wrong gradient
  std::vector<float> near = analytic;
  near[3] = 2e-6f;
  EXPECT_EQ(gradient_mismatch(numeric, near, 2e-2), "");
}

}  // namespace lockstep::testing
