// Learning-rate schedules (Keras 3 semantics), serialised as lr_schedule op attrs.
#include <algorithm>

#include "lockstep/optimizers/schedule.h"
#include "ops/internal/schedule_math.h"

namespace lockstep {

namespace {

class AttrSchedule : public LearningRateSchedule {
 public:
  explicit AttrSchedule(Attrs a) : a_(std::move(a)) {}
  double operator()(int64_t step) const override { return ops::evaluate_schedule(a_, step); }
  Attrs attrs() const override { return a_; }

 private:
  Attrs a_;
};

}  // namespace

namespace schedules {

SchedulePtr Constant(double lr) {
  return std::make_shared<AttrSchedule>(Attrs{{"kind", std::string("constant")}, {"value", lr}});
}

SchedulePtr ExponentialDecay(double initial_learning_rate, int64_t decay_steps, double decay_rate,
                             bool staircase) {
  LS_CHECK(decay_steps > 0, "ExponentialDecay: decay_steps must be positive, got ", decay_steps);
  return std::make_shared<AttrSchedule>(Attrs{{"kind", std::string("exponential_decay")},
                                              {"initial_learning_rate", initial_learning_rate},
                                              {"decay_steps", decay_steps},
                                              {"decay_rate", decay_rate},
                                              {"staircase", staircase}});
}

SchedulePtr CosineDecay(double initial_learning_rate, int64_t decay_steps, double alpha,
                        double warmup_target, int64_t warmup_steps) {
  LS_CHECK(decay_steps > 0, "CosineDecay: decay_steps must be positive, got ", decay_steps);
  LS_CHECK(warmup_steps >= 0, "CosineDecay: warmup_steps must be >= 0");
  return std::make_shared<AttrSchedule>(Attrs{{"kind", std::string("cosine_decay")},
                                              {"initial_learning_rate", initial_learning_rate},
                                              {"decay_steps", decay_steps},
                                              {"alpha", alpha},
                                              {"warmup_target", warmup_target},
                                              {"warmup_steps", warmup_steps}});
}

SchedulePtr PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<double> values) {
  LS_CHECK(values.size() == boundaries.size() + 1, "PiecewiseConstantDecay: got ",
           boundaries.size(), " boundaries and ", values.size(),
           " values; expected one more value than boundaries");
  LS_CHECK(std::is_sorted(boundaries.begin(), boundaries.end()),
           "PiecewiseConstantDecay: boundaries must be increasing");
  return std::make_shared<AttrSchedule>(Attrs{{"kind", std::string("piecewise_constant_decay")},
                                              {"boundaries", boundaries},
                                              {"values", values}});
}

SchedulePtr PolynomialDecay(double initial_learning_rate, int64_t decay_steps,
                            double end_learning_rate, double power, bool cycle) {
  LS_CHECK(decay_steps > 0, "PolynomialDecay: decay_steps must be positive, got ", decay_steps);
  return std::make_shared<AttrSchedule>(Attrs{{"kind", std::string("polynomial_decay")},
                                              {"initial_learning_rate", initial_learning_rate},
                                              {"decay_steps", decay_steps},
                                              {"end_learning_rate", end_learning_rate},
                                              {"power", power},
                                              {"cycle", cycle}});
}

SchedulePtr InverseTimeDecay(double initial_learning_rate, int64_t decay_steps, double decay_rate,
                             bool staircase) {
  LS_CHECK(decay_steps > 0, "InverseTimeDecay: decay_steps must be positive, got ", decay_steps);
  return std::make_shared<AttrSchedule>(Attrs{{"kind", std::string("inverse_time_decay")},
                                              {"initial_learning_rate", initial_learning_rate},
                                              {"decay_steps", decay_steps},
                                              {"decay_rate", decay_rate},
                                              {"staircase", staircase}});
}

SchedulePtr CosineDecayRestarts(double initial_learning_rate, int64_t first_decay_steps,
                                double t_mul, double m_mul, double alpha) {
  LS_CHECK(first_decay_steps > 0, "CosineDecayRestarts: first_decay_steps must be positive, got ",
           first_decay_steps);
  LS_CHECK(t_mul > 0, "CosineDecayRestarts: t_mul must be positive, got ", t_mul);
  return std::make_shared<AttrSchedule>(Attrs{{"kind", std::string("cosine_decay_restarts")},
                                              {"initial_learning_rate", initial_learning_rate},
                                              {"first_decay_steps", first_decay_steps},
                                              {"t_mul", t_mul},
                                              {"m_mul", m_mul},
                                              {"alpha", alpha}});
}

}  // namespace schedules

}  // namespace lockstep
