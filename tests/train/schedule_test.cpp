// Learning-rate schedules at chosen steps against Keras's formulas (numbers written out).
#include "lockstep/optimizers/schedule.h"

#include <gtest/gtest.h>

#include "lockstep/graph/executable.h"
#include "ops/internal/schedule_math.h"

using namespace lockstep;

TEST(Sched, Constant) {
  auto s = schedules::Constant(0.01);
  EXPECT_DOUBLE_EQ((*s)(0), 0.01);
  EXPECT_DOUBLE_EQ((*s)(12345), 0.01);
}

TEST(Sched, ExponentialDecay) {
  auto s = schedules::ExponentialDecay(0.1, 10, 0.5);
  EXPECT_NEAR((*s)(0), 0.1, 1e-12);
  EXPECT_NEAR((*s)(5), 0.07071067811865475, 1e-12);  // 0.1 * 0.5^0.5
  EXPECT_NEAR((*s)(15), 0.03535533905932738, 1e-12);
  EXPECT_NEAR((*s)(20), 0.025, 1e-12);
  auto st = schedules::ExponentialDecay(0.1, 10, 0.5, true);
  EXPECT_NEAR((*st)(9), 0.1, 1e-12);
  EXPECT_NEAR((*st)(15), 0.05, 1e-12);
  EXPECT_NEAR((*st)(20), 0.025, 1e-12);
  EXPECT_THROW(schedules::ExponentialDecay(0.1, 0, 0.5), Error);
}

TEST(Sched, CosineDecay) {
  auto s = schedules::CosineDecay(0.1, 100);
  EXPECT_NEAR((*s)(0), 0.1, 1e-12);
  EXPECT_NEAR((*s)(25), 0.08535533905932738, 1e-12);  // 0.1 * 0.5 * (1 + cos(pi/4))
  EXPECT_NEAR((*s)(50), 0.05, 1e-12);
  EXPECT_NEAR((*s)(100), 0.0, 1e-12);
  EXPECT_NEAR((*s)(250), 0.0, 1e-12);  // clamped at decay_steps
  auto a = schedules::CosineDecay(0.1, 100, 0.1);
  EXPECT_NEAR((*a)(50), 0.055, 1e-12);  // 0.1 * (0.9 * 0.5 + 0.1)
  EXPECT_NEAR((*a)(100), 0.01, 1e-12);  // alpha * initial
  EXPECT_NEAR((*a)(1000), 0.01, 1e-12);
}

TEST(Sched, CosineDecayWithWarmup) {
  // Keras 3: linear 0 -> 0.1 over 10 steps, then cosine from 0.1 over 100 steps.
  auto s = schedules::CosineDecay(0.0, 100, 0.0, 0.1, 10);
  EXPECT_NEAR((*s)(0), 0.0, 1e-12);
  EXPECT_NEAR((*s)(5), 0.05, 1e-12);
  EXPECT_NEAR((*s)(10), 0.1, 1e-12);
  EXPECT_NEAR((*s)(35), 0.08535533905932738, 1e-12);
  EXPECT_NEAR((*s)(60), 0.05, 1e-12);
  EXPECT_NEAR((*s)(110), 0.0, 1e-12);
  EXPECT_NEAR((*s)(500), 0.0, 1e-12);
  auto w = schedules::CosineDecay(0.01, 100, 0.2, 0.1, 10);
  EXPECT_NEAR((*w)(4), 0.046, 1e-12);   // 0.01 + 0.09 * 0.4
  EXPECT_NEAR((*w)(110), 0.02, 1e-12);  // alpha * warmup_target
}

TEST(Sched, PiecewiseConstantDecay) {
  auto s = schedules::PiecewiseConstantDecay({10, 20}, {1.0, 0.5, 0.1});
  EXPECT_DOUBLE_EQ((*s)(0), 1.0);
  EXPECT_DOUBLE_EQ((*s)(10), 1.0);
  EXPECT_DOUBLE_EQ((*s)(11), 0.5);
  EXPECT_DOUBLE_EQ((*s)(20), 0.5);
  EXPECT_DOUBLE_EQ((*s)(21), 0.1);
  EXPECT_THROW(schedules::PiecewiseConstantDecay({10}, {1.0}), Error);
}

TEST(Sched, AttrsRoundTripAndLrScheduleOp) {
  auto s = schedules::CosineDecay(0.0, 100, 0.0, 0.1, 10);
  EXPECT_DOUBLE_EQ(ops::evaluate_schedule(s->attrs(), 60), (*s)(60));
  EXPECT_THROW(ops::evaluate_schedule(Attrs{{"kind", std::string("bogus")}}, 0), Error);
  auto it = std::make_shared<Variable>(Variable{"iterations", Tensor::full(Shape{}, 5.f), false});
  Graph g;
  Value lr =
      g.add(op::lr_schedule, {g.variable(it)}, schedules::ExponentialDecay(0.1, 10, 0.5)->attrs());
  EXPECT_EQ(g.type(lr).shape, Shape{});
  Executable exe(g, {}, {lr}, {.backend = "reference"});
  exe.run();
  EXPECT_NEAR(exe.output(0).item(), 0.07071067811865475, 1e-7);
}

TEST(Sched, PolynomialDecay) {
  // (0.1 - 0.01) * (1 - min(step, 10) / 10)^2 + 0.01
  auto s = schedules::PolynomialDecay(0.1, 10, 0.01, 2.0);
  EXPECT_NEAR((*s)(0), 0.1, 1e-12);
  EXPECT_NEAR((*s)(4), 0.0424, 1e-12);  // 0.09 * 0.36 + 0.01
  EXPECT_NEAR((*s)(10), 0.01, 1e-12);
  EXPECT_NEAR((*s)(15), 0.01, 1e-12);
  // cycle: the period grows to the next multiple of 10 (20 at step 15: p = 0.75).
  auto c = schedules::PolynomialDecay(0.1, 10, 0.01, 1.0, true);
  EXPECT_NEAR((*c)(0), 0.1, 1e-12);
  EXPECT_NEAR((*c)(15), 0.0325, 1e-12);  // 0.09 * 0.25 + 0.01
  EXPECT_NEAR((*c)(20), 0.01, 1e-12);
  EXPECT_THROW(schedules::PolynomialDecay(0.1, 0), Error);
}

TEST(Sched, InverseTimeDecay) {
  auto s = schedules::InverseTimeDecay(0.1, 5, 0.5);
  EXPECT_NEAR((*s)(0), 0.1, 1e-12);
  EXPECT_NEAR((*s)(3), 0.1 / 1.3, 1e-12);
  auto st = schedules::InverseTimeDecay(0.1, 5, 0.5, true);
  EXPECT_NEAR((*st)(4), 0.1, 1e-12);
  EXPECT_NEAR((*st)(12), 0.05, 1e-12);  // floor(12 / 5) = 2 -> 0.1 / (1 + 1)
}

TEST(Sched, CosineDecayRestarts) {
  // Periods 10, 20, 40 ... starting at steps 0, 10, 30; peaks 1, 0.5, 0.25; floor alpha 0.1.
  auto s = schedules::CosineDecayRestarts(0.1, 10, 2.0, 0.5, 0.1);
  EXPECT_NEAR((*s)(0), 0.1, 1e-12);
  EXPECT_NEAR((*s)(5), 0.055, 1e-12);    // 0.1 * (0.9 * 0.5 + 0.1)
  EXPECT_NEAR((*s)(10), 0.055, 1e-12);   // restart: peak 0.5
  EXPECT_NEAR((*s)(20), 0.0325, 1e-12);  // half of period 2: 0.1 * (0.9 * 0.25 + 0.1)
  EXPECT_NEAR((*s)(30), 0.0325, 1e-12);  // restart: peak 0.25
  auto fixed = schedules::CosineDecayRestarts(0.1, 10, 1.0, 1.0, 0.0);
  EXPECT_NEAR((*fixed)(25), 0.05, 1e-12);
  EXPECT_NEAR((*fixed)(30), 0.1, 1e-12);
}
