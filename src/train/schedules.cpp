// Learning-rate schedules (Keras 3 semantics), serialised as lr_schedule op attrs.
#include <algorithm>
#include <cmath>

#include "lockstep/train/schedule.h"

namespace lockstep {

namespace {

double exponential(const Attrs& a, double step) {
  double p = step / double(a.i("decay_steps"));
  if (a.b("staircase", false)) p = std::floor(p);
  return a.f("initial_learning_rate") * std::pow(a.f("decay_rate"), p);
}

// keras.optimizers.schedules.CosineDecay.__call__ (warmup_target < 0 means None).
double cosine(const Attrs& a, double step) {
  double initial = a.f("initial_learning_rate");
  double decay_steps = double(a.i("decay_steps"));
  double alpha = a.f("alpha", 0.0);
  double warmup_target = a.f("warmup_target", -1.0);
  double warmup_steps = double(a.i("warmup_steps", 0));
  auto decay = [&](double s, double from) {
    double frac = s / decay_steps;
    double cosine_decayed = 0.5 * (1.0 + std::cos(M_PI * frac));
    return from * ((1.0 - alpha) * cosine_decayed + alpha);
  };
  if (warmup_target < 0) return decay(std::min(step, decay_steps), initial);
  step = std::min(step, decay_steps + warmup_steps);
  if (step < warmup_steps)
    return (warmup_target - initial) * (step / warmup_steps) + initial;
  return decay(step - warmup_steps, warmup_target);
}

double piecewise(const Attrs& a, int64_t step) {
  const auto& b = a.ints("boundaries");
  const auto& v = a.floats("values");
  for (size_t i = 0; i < b.size(); ++i)
    if (step <= b[i]) return v[i];
  return v.back();
}

class AttrSchedule : public LearningRateSchedule {
 public:
  explicit AttrSchedule(Attrs a) : a_(std::move(a)) {}
  double operator()(int64_t step) const override { return evaluate_schedule(a_, step); }
  Attrs attrs() const override { return a_; }

 private:
  Attrs a_;
};

}  // namespace

double evaluate_schedule(const Attrs& attrs, int64_t step) {
  const std::string& kind = attrs.s("kind");
  if (kind == "constant") return attrs.f("value");
  if (kind == "exponential_decay") return exponential(attrs, double(step));
  if (kind == "cosine_decay") return cosine(attrs, double(step));
  if (kind == "piecewise_constant_decay") return piecewise(attrs, step);
  LS_FAIL("unknown learning-rate schedule '", kind, "'");
}

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

}  // namespace schedules

}  // namespace lockstep
